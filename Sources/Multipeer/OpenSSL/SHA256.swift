internal import COpenSSL

/// SHA-256 through OpenSSL's EVP interface.
enum SHA256 {
    /// The size of a SHA-256 digest in bytes.
    static let byteCount = 32

    /// The SHA-256 digest of `bytes`.
    static func hash(_ bytes: [UInt8]) -> [UInt8] {
        OpenSSLLibrary.initialize()
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let succeeded = bytes.withUnsafeBytes { input in
            EVP_Digest(input.baseAddress, input.count, &digest, &length, EVP_sha256(), nil) == 1
        }
        // EVP_Digest fails only when a small allocation fails or the library is broken; no caller could
        // recover from either, and a fingerprint must never be silently wrong.
        precondition(succeeded && Int(length) == byteCount, "OpenSSL SHA-256 failed: \(OpenSSLErrorQueue.drain())")
        return Array(digest.prefix(byteCount))
    }
}
