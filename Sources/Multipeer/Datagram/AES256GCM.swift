internal import COpenSSL

/// AES-256-GCM with a 12-byte nonce and a 16-byte tag for one key and one direction (sealing or opening), through
/// one `EVP_CIPHER_CTX` that is set up once and reused for every message.
///
/// Setting the key once and only the nonce per message keeps the AES key schedule and the GHASH tables, so a
/// message costs no allocation and no setup beyond the nonce. Not thread-safe: one context, one caller at a time.
final class AES256GCM {
    /// Bytes of an AES-256 key.
    static let keyLength = 32
    /// Bytes of a nonce.
    static let nonceLength = 12
    /// Bytes of an authentication tag.
    static let tagLength = 16

    /// Whether the context encrypts or decrypts.
    enum Direction: Sendable {
        /// Encrypt and produce tags.
        case seal
        /// Decrypt and verify tags.
        case open
    }

    /// The direction fixed at creation.
    let direction: Direction
    private let context: OpaquePointer

    /// Creates a context for `key`.
    /// - Parameters:
    ///   - key: 32 bytes.
    ///   - direction: Whether the context seals or opens.
    /// - Throws: ``DatagramError/openSSL(_:)`` if OpenSSL cannot allocate or set up the context.
    init(key: [UInt8], direction: Direction) throws(DatagramError) {
        precondition(key.count == Self.keyLength, "AES-256 needs a 32-byte key")
        OpenSSLErrorQueue.clear()
        guard let context = EVP_CIPHER_CTX_new() else { throw .openSSL(OpenSSLErrorQueue.drain()) }
        self.context = context
        self.direction = direction
        let encrypt: Int32 = direction == .seal ? 1 : 0
        // Choose the cipher, then the nonce length, then the key: the nonce length must be set before a key or
        // nonce is, and the key set now stays for every message (each message passes only its nonce).
        guard EVP_CipherInit_ex(context, EVP_aes_256_gcm(), nil, nil, nil, encrypt) == 1,
            multipeer_aead_set_iv_length(context, Int32(Self.nonceLength)) == 1,
            key.withUnsafeBufferPointer({ EVP_CipherInit_ex(context, nil, nil, $0.baseAddress, nil, encrypt) }) == 1
        else { throw .openSSL(OpenSSLErrorQueue.drain()) }
    }

    deinit {
        EVP_CIPHER_CTX_free(context)
    }

    /// Encrypts `plaintext` into `output` and appends the tag.
    /// - Parameters:
    ///   - nonce: 12 bytes, never used before with this key.
    ///   - aad: Additional authenticated data.
    ///   - plaintext: The message.
    ///   - output: Exactly `plaintext.count + 16` bytes; must not overlap `plaintext`.
    /// - Returns: `false` if OpenSSL failed (its error queue says why).
    func seal(
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer, plaintext: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer
    ) -> Bool {
        precondition(direction == .seal, "sealing with an opening context")
        precondition(nonce.count == Self.nonceLength, "AES-GCM nonce must be 12 bytes")
        precondition(output.count == plaintext.count + Self.tagLength, "output must hold the ciphertext and tag")
        guard let outputBase = output.baseAddress?.assumingMemoryBound(to: UInt8.self),
            EVP_EncryptInit_ex(context, nil, nil, nil, bytes(nonce)) == 1,
            update(aad: aad)
        else { return false }
        var written: Int32 = 0
        if !plaintext.isEmpty {
            guard EVP_EncryptUpdate(context, outputBase, &written, bytes(plaintext), Int32(plaintext.count)) == 1
            else { return false }
        }
        // GCM is a stream mode: Update wrote every byte and Final writes none, but it must run to compute the tag.
        var finalWritten: Int32 = 0
        guard Int(written) == plaintext.count,
            EVP_EncryptFinal_ex(context, outputBase + plaintext.count, &finalWritten) == 1, finalWritten == 0,
            multipeer_aead_get_tag(context, outputBase + plaintext.count, Int32(Self.tagLength)) == 1
        else { return false }
        return true
    }

    /// Decrypts `ciphertext` into `output` and verifies `tag`.
    ///
    /// On failure `output` holds unauthenticated bytes that must be discarded.
    /// - Parameters:
    ///   - nonce: 12 bytes.
    ///   - aad: Additional authenticated data.
    ///   - ciphertext: The encrypted message, without its tag.
    ///   - tag: 16 bytes.
    ///   - output: Exactly `ciphertext.count` bytes; must not overlap `ciphertext`.
    /// - Returns: `true` if the tag is valid for the nonce, data and key, and `output` holds the plaintext.
    func open(
        nonce: UnsafeRawBufferPointer, aad: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
        tag: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) -> Bool {
        precondition(direction == .open, "opening with a sealing context")
        precondition(nonce.count == Self.nonceLength, "AES-GCM nonce must be 12 bytes")
        precondition(tag.count == Self.tagLength, "AES-GCM tag must be 16 bytes")
        precondition(output.count == ciphertext.count, "output must hold the plaintext")
        guard EVP_DecryptInit_ex(context, nil, nil, nil, bytes(nonce)) == 1, update(aad: aad) else { return false }
        var written: Int32 = 0
        if !ciphertext.isEmpty {
            guard let outputBase = output.baseAddress?.assumingMemoryBound(to: UInt8.self),
                EVP_DecryptUpdate(context, outputBase, &written, bytes(ciphertext), Int32(ciphertext.count)) == 1,
                Int(written) == ciphertext.count
            else { return false }
        }
        // Final writes nothing for GCM; a scratch byte keeps its output pointer valid when the message is empty.
        var scratch: UInt8 = 0
        var finalWritten: Int32 = 0
        return multipeer_aead_set_tag(context, bytes(tag), Int32(Self.tagLength)) == 1
            && EVP_DecryptFinal_ex(context, &scratch, &finalWritten) == 1 && finalWritten == 0
    }

    // MARK: - Private

    /// Feeds the additional authenticated data (an Update with no output buffer).
    private func update(aad: UnsafeRawBufferPointer) -> Bool {
        guard !aad.isEmpty else { return true }
        var written: Int32 = 0
        return EVP_CipherUpdate(context, nil, &written, bytes(aad), Int32(aad.count)) == 1
            && Int(written) == aad.count
    }

    private func bytes(_ buffer: UnsafeRawBufferPointer) -> UnsafePointer<UInt8>? {
        buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
    }
}
