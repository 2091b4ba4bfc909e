internal import COpenSSL

/// The hashes STUN's long-term credentials use (RFC 8489 sections 9.2 and 14.5-14.7): the key is
/// `MD5(username ":" realm ":" password)`, MESSAGE-INTEGRITY an HMAC-SHA1 under it, FINGERPRINT a CRC-32.
enum STUNCrypto {
    /// The long-term credential key.
    static func longTermKey(username: String, realm: String, password: String) -> [UInt8] {
        OpenSSLLibrary.initialize()
        let input = Array("\(username):\(realm):\(password)".utf8)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        let result = input.withUnsafeBytes { input in
            EVP_Digest(input.baseAddress, input.count, &output, &length, EVP_md5(), nil)
        }
        precondition(result == 1 && length == 16, "OpenSSL MD5 failed: \(OpenSSLErrorQueue.drain())")
        return Array(output.prefix(16))
    }

    /// HMAC-SHA1 of `message` under `key`.
    static func hmacSHA1(key: [UInt8], message: [UInt8]) -> [UInt8] {
        HMACSHA256.compute(EVP_sha1(), length: 20, key: key, message: message)
    }

    /// The CRC-32 of ISO 3309 (as zlib computes it).
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xff)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }

    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 != 0 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }
}
