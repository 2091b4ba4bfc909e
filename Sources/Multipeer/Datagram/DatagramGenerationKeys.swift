internal import COpenSSL

/// The key and IV of one generation of one datagram direction, derived from the direction's base secret, with
/// the AES-256-GCM context keyed once for all the generation's packets.
///
/// A generation is 2^20 consecutive counters (``DatagramFormat/generationShift``, ``generation(of:)``); each has
/// keys of its own, so no key seals more packets than AES-GCM's usage limits allow (see ``DatagramFormat``).
/// Freeing the object frees the cipher context, which OpenSSL clears; the derived key never outlives the
/// initializer.
///
/// Not thread-safe, like ``AES256GCM``.
final class DatagramGenerationKeys {
    /// The HKDF info prefix of a generation's key; the generation follows as 8 big-endian bytes.
    static let keyLabel = "swift-multipeer datagram key"
    /// The HKDF info prefix of a generation's IV; the generation follows as 8 big-endian bytes.
    static let ivLabel = "swift-multipeer datagram iv"

    /// The generation these keys belong to.
    let generation: UInt64
    /// The generation's cipher, keyed with its key.
    let cipher: AES256GCM
    /// The generation's nonces: its IV XOR the packet counter.
    let nonce: DatagramNonce

    /// Derives generation `generation`'s key and IV from `secret` and keys a cipher with them.
    /// - Parameters:
    ///   - secret: The direction's 32-byte base secret (``DatagramKeys/Direction/secret``).
    ///   - generation: The generation, `counter >> DatagramFormat.generationShift`.
    ///   - direction: Whether the cipher seals or opens.
    /// - Throws: ``DatagramError/openSSL(_:)`` if OpenSSL cannot derive the keys or set up the cipher.
    init(secret: [UInt8], generation: UInt64, direction: AES256GCM.Direction) throws(DatagramError) {
        var key = try Self.expand(
            secret: secret, label: Self.keyLabel, generation: generation, length: AES256GCM.keyLength)
        defer { key.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        let iv = try Self.expand(
            secret: secret, label: Self.ivLabel, generation: generation, length: AES256GCM.nonceLength)
        cipher = try AES256GCM(key: key, direction: direction)
        nonce = DatagramNonce(iv: iv)
        self.generation = generation
    }

    /// The generation a packet counter belongs to.
    static func generation(of counter: UInt64) -> UInt64 {
        counter >> DatagramFormat.generationShift
    }

    /// HKDF-Expand (RFC 5869) with SHA-256, `secret` as the pseudorandom key and `label ‖ generation` (8
    /// big-endian bytes) as the info, for at most one hash output: T(1) = HMAC(secret, info ‖ 0x01), truncated.
    /// The exported base secret is already uniformly random, so no HKDF-Extract step is needed.
    static func expand(secret: [UInt8], label: String, generation: UInt64, length: Int) throws(DatagramError)
        -> [UInt8]
    {
        precondition(length <= 32, "one HKDF-SHA-256 block only")
        var info = Array(label.utf8)
        withUnsafeBytes(of: generation.bigEndian) { info.append(contentsOf: $0) }
        info.append(1)
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        defer { output.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
        var written: UInt32 = 0
        OpenSSLErrorQueue.clear()
        let result = secret.withUnsafeBytes { key in
            HMAC(EVP_sha256(), key.baseAddress, Int32(key.count), info, info.count, &output, &written)
        }
        guard result != nil, written == 32 else { throw .openSSL(OpenSSLErrorQueue.drain()) }
        return Array(output.prefix(length))
    }
}
