internal import Foundation
internal import Glibc

/// A file that holds a secret (a TSIG key, a relay password): read only when it is a regular file, at most
/// `maximumSize` bytes, that neither its group nor others may read or write, so a secret that leaked to other
/// users is never used as if it were one.
enum SecretFile {
    /// Why a secret file cannot be used: a sentence naming the file.
    struct Refusal: Error {
        let reason: String
    }

    /// The file's text, or why it cannot be used (a sentence naming the file and `what` it holds).
    static func read(_ path: String, what: String, maximumSize: Int) -> Result<String, Refusal> {
        var status = stat()
        guard stat(path, &status) == 0 else {
            return .failure(Refusal(reason: "cannot read the \(what) \(path): \(String(cString: strerror(errno)))"))
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            return .failure(Refusal(reason: "the \(what) \(path) is not a regular file"))
        }
        let mode = status.st_mode & 0o777
        guard mode & 0o077 == 0 else {
            return .failure(
                Refusal(
                    reason:
                        "the \(what) \(path) can be accessed by others (mode \(String(mode, radix: 8))); run chmod 600 \(path)"
                ))
        }
        guard status.st_size <= maximumSize else {
            return .failure(
                Refusal(reason: "the \(what) \(path) is \(status.st_size) bytes; at most \(maximumSize) are read"))
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8)
        else {
            return .failure(Refusal(reason: "cannot read the \(what) \(path) as UTF-8 text"))
        }
        return .success(text)
    }
}
