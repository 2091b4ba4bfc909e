import Glibc
import Multipeer
import Testing

/// RFC 8032 section 7.1, test 1: an Ed25519 key pair with a known public key and signature.
enum RFC8032TestVector {
    static let privateKeyPEM = """
        -----BEGIN PRIVATE KEY-----
        MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g
        -----END PRIVATE KEY-----

        """
    static let publicKey = bytes(fromHex: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    /// The signature of the empty message.
    static let emptyMessageSignature = bytes(
        fromHex: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555"
            + "fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    /// SHA-256 of `publicKey`, computed independently with sha256sum and Python's base64.b32encode.
    static let fingerprintHex = "21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"
    static let fingerprintText = "eh7d-dx5b-ksrg-cytl-7bka-i36s-e4nx-x3kl-nk7e-lksy-q57p-i74x-eg4q"
}

func bytes(fromHex hex: String) -> [UInt8] {
    let digits = Array(hex.utf8)
    return stride(from: 0, to: digits.count, by: 2).map {
        UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
    }
}

/// Runs `body` with a new private temporary directory, removed with its files afterwards.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    var template = Array("/tmp/multipeer-identity-XXXXXX".utf8CString)
    let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    let directory = try #require(created.map { String(cString: $0) })
    defer {
        if let handle = opendir(directory) {
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != "." && name != ".." { unlink(directory + "/" + name) }
            }
            closedir(handle)
        }
        rmdir(directory)
    }
    return try body(directory)
}

/// Writes `contents` to `path` with `mode`, replacing any file there.
func writeFile(_ path: String, _ contents: [UInt8], mode: mode_t = 0o600) throws {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode)
    try #require(fd >= 0)
    defer { close(fd) }
    try #require(fchmod(fd, mode) == 0)
    let written = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    try #require(written == contents.count)
}

/// The permission bits of the file at `path`.
func permissionBits(_ path: String) throws -> mode_t {
    var status = stat()
    try #require(stat(path, &status) == 0)
    return status.st_mode & 0o7777
}

/// The names in `directory` other than `.` and `..`.
func directoryEntries(_ directory: String) -> [String] {
    guard let handle = opendir(directory) else { return [] }
    defer { closedir(handle) }
    var names: [String] = []
    while let entry = readdir(handle) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}

/// The file type bits (`S_IFREG`, `S_IFLNK`, …) of `path` itself, not of what a link points to.
func fileType(_ path: String) throws -> mode_t {
    var status = stat()
    try #require(lstat(path, &status) == 0)
    return status.st_mode & S_IFMT
}

/// The whole content of the file at `path`.
func readWhole(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY)
    try #require(fd >= 0)
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4_096)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        try #require(count >= 0)
        if count == 0 { return bytes }
        bytes += chunk.prefix(count)
    }
}
