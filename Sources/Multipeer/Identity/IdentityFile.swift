internal import Glibc
internal import MultipeerIO

/// The identity file: its text format, and reading and writing it so the private key is never exposed.
///
/// The format is UTF-8 text, lines ending in `\n`:
///
///     swift-multipeer identity 1
///     display-name: <the display name, exactly, after one space>
///     -----BEGIN PRIVATE KEY-----
///     <the Ed25519 private key, unencrypted PKCS#8, base64 as PEM writes it>
///     -----END PRIVATE KEY-----
///
/// The PEM block is standard, so `openssl pkey -in FILE` reads the key. The file is written with mode 0600
/// and read only if its mode grants nothing to group or others.
enum IdentityFile {
    /// The first line, naming the format and its version.
    static let header = "swift-multipeer identity 1"
    /// The prefix of the second line.
    static let displayNamePrefix = "display-name: "
    /// The first line of the key block.
    static let pemBegin = "-----BEGIN PRIVATE KEY-----"
    /// The largest file read: a real identity file is about 200 bytes, so anything near this is not one,
    /// and reading stops there rather than loading an arbitrary file into memory.
    static let maximumByteCount = 16 * 1_024

    // MARK: Format

    static func encode(displayName: String, privateKeyPEM: [UInt8]) -> [UInt8] {
        Array("\(header)\n\(displayNamePrefix)\(displayName)\n".utf8) + privateKeyPEM
    }

    /// Splits a file into the display name and the PEM key block, checking everything except the key.
    static func decode(_ bytes: [UInt8], path: String) throws(IdentityError) -> (displayName: String, pem: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .fileMalformed(path: path, detail: "it is not UTF-8 text")
        }
        let lines = text.split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false)
        guard lines.count == 3, lines[0] == header else {
            throw .fileMalformed(path: path, detail: "the first line is not '\(header)'")
        }
        guard lines[1].hasPrefix(displayNamePrefix) else {
            throw .fileMalformed(path: path, detail: "the second line does not start with '\(displayNamePrefix)'")
        }
        let displayName = String(lines[1].dropFirst(displayNamePrefix.count))
        do {
            try DisplayName.validate(displayName)
        } catch {
            throw .fileMalformed(path: path, detail: "its display name is invalid: \(error.reason)")
        }
        guard lines[2].hasPrefix(pemBegin) else {
            throw .fileMalformed(path: path, detail: "the third line is not '\(pemBegin)'")
        }
        return (displayName, Array(lines[2].utf8))
    }

    // MARK: Reading

    /// The file's bytes, after checking that it is a regular file that only its owner can access.
    static func read(path: String) throws(IdentityError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .fileUnreadable(path: path, detail: systemError("open")) }
        defer { close(fd) }
        // fstat on the open descriptor checks the file that is read, not whatever the path names later.
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw .fileUnreadable(path: path, detail: systemError("fstat")) }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw .fileUnreadable(path: path, detail: "it is not a regular file")
        }
        guard status.st_mode & 0o077 == 0 else { throw .fileTooOpen(path: path, mode: status.st_mode) }

        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while bytes.count <= maximumByteCount {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileUnreadable(path: path, detail: systemError("read"))
            }
            if count == 0 { return bytes }
            bytes += chunk.prefix(count)
        }
        throw .fileMalformed(
            path: path, detail: "it is larger than \(maximumByteCount) bytes, far more than an identity needs")
    }

    // MARK: Writing

    /// Writes `bytes` to `path` atomically with mode 0600: into a new temporary file in the same directory,
    /// created 0600 and never wider, then renamed over `path`. A reader sees the old file or the new one,
    /// never a partial one, and the key is never readable by anyone but the owner.
    static func write(_ bytes: [UInt8], to path: String) throws(IdentityError) {
        var suffix = [UInt8](repeating: 0, count: 8)
        for index in suffix.indices { suffix[index] = UInt8.random(in: 0...255) }
        let temporary = path + ".tmp-" + suffix.map { String($0, radix: 16) }.joined()
        // O_EXCL|O_NOFOLLOW: never write through a file or link someone else prepared at that name.
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .fileWriteFailed(path: path, detail: systemError("open \(temporary)")) }
        var renamed = false
        defer { if !renamed { unlink(temporary) } }
        do {
            defer { close(fd) }
            // The umask can only have removed bits; fchmod makes the mode exactly 0600.
            guard fchmod(fd, 0o600) == 0 else { throw .fileWriteFailed(path: path, detail: systemError("fchmod")) }
            var offset = 0
            while offset < bytes.count {
                let count = bytes.withUnsafeBytes {
                    Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset)
                }
                if count < 0 {
                    if errno == EINTR { continue }
                    throw .fileWriteFailed(path: path, detail: systemError("write"))
                }
                offset += count
            }
            guard fsync(fd) == 0 else { throw .fileWriteFailed(path: path, detail: systemError("fsync")) }
        }
        guard rename(temporary, path) == 0 else {
            throw .fileWriteFailed(path: path, detail: systemError("rename \(temporary)"))
        }
        renamed = true
    }

    private static func systemError(_ call: String) -> String {
        SystemCallError(call: call, errno: errno).description
    }
}
