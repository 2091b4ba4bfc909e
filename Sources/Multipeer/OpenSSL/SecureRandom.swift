internal import COpenSSL

/// Cryptographically secure random bytes from OpenSSL's DRBG.
package enum SecureRandom {
    /// `count` random bytes.
    package static func bytes(_ count: Int) -> [UInt8] {
        OpenSSLLibrary.initialize()
        var bytes = [UInt8](repeating: 0, count: count)
        guard count > 0 else { return bytes }
        let result = bytes.withUnsafeMutableBytes { RAND_bytes($0.baseAddress, Int32($0.count)) }
        // RAND_bytes fails only when the DRBG cannot be seeded; a predictable nonce must never be used.
        precondition(result == 1, "OpenSSL RAND_bytes failed: \(OpenSSLErrorQueue.drain())")
        return bytes
    }
}
