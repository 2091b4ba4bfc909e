internal import COpenSSL

/// HMAC-SHA-256 (and, through `compute`, other HMACs) through OpenSSL, and a constant-time comparison.
enum HMACSHA256 {
    /// The MAC of `message` under `key`.
    static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        compute(EVP_sha256(), length: 32, key: key, message: message)
    }

    /// An HMAC with `digest`, whose output is `length` bytes (HMAC-SHA1 for STUN, say).
    static func compute(_ digest: OpaquePointer?, length: Int, key: [UInt8], message: [UInt8]) -> [UInt8] {
        OpenSSLLibrary.initialize()
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var written: UInt32 = 0
        let result = key.withUnsafeBytes { key in
            message.withUnsafeBytes { message in
                HMAC(
                    digest, key.baseAddress, Int32(key.count),
                    message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count, &output, &written)
            }
        }
        // HMAC fails only when an allocation fails; a wrong MAC must never be returned silently.
        precondition(result != nil && written == length, "OpenSSL HMAC failed: \(OpenSSLErrorQueue.drain())")
        return Array(output.prefix(length))
    }

    /// Whether `a` and `b` are equal, in time that depends only on their lengths.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { a in b.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) }
        }
            == 0
    }
}
