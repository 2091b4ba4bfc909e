internal import COpenSSL

/// Owns an Ed25519 `EVP_PKEY`: a key pair (or, for verification, a public key alone).
///
/// `@unchecked Sendable`: the key is never modified after `init` (no method calls an OpenSSL function that
/// changes it), and openssl-threads(7) states that an `EVP_PKEY` may be used from several threads at once
/// while nobody modifies it. Each signing gets a context of its own.
final class EVPKey: @unchecked Sendable {
    /// The size of a raw Ed25519 public key in bytes.
    static let publicKeyByteCount = 32
    /// The size of an Ed25519 signature in bytes.
    static let signatureByteCount = 64

    let pointer: OpaquePointer

    /// Takes ownership of `pointer`, which must hold an Ed25519 key.
    private init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        EVP_PKEY_free(pointer)
    }

    /// A new random Ed25519 key pair.
    static func generateEd25519() throws(IdentityError) -> EVPKey {
        OpenSSLErrorQueue.clear()
        guard let key = multipeer_ed25519_keygen() else { throw .keyGenerationFailed() }
        return EVPKey(taking: key)
    }

    /// The key pair in an unencrypted PEM "PRIVATE KEY" (PKCS#8) block.
    ///
    /// - Parameter what: Names the source in errors, e.g. the file it came from.
    static func ed25519(privateKeyPEM pem: [UInt8], describedAs what: String) throws(IdentityError) -> EVPKey {
        OpenSSLErrorQueue.clear()
        guard let bio = MemoryBIO(copying: pem) else { throw .openSSL("allocating a memory BIO") }
        // Without a callback OpenSSL would prompt on the terminal for an encrypted key's passphrase and
        // block; identity files are never encrypted, so refuse instead.
        let refusePassphrase:
            @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?)
                -> Int32 = { _, _, _, _ in -1 }
        guard let key = PEM_read_bio_PrivateKey(bio.pointer, nil, refusePassphrase, nil) else {
            throw .openSSL("reading the private key in \(what)")
        }
        let owner = EVPKey(taking: key)
        guard owner.isEd25519 else { throw .notEd25519(what) }
        return owner
    }

    /// A public-key-only Ed25519 key from its raw 32 bytes, or nil if they are not a valid key.
    static func ed25519(rawPublicKey: [UInt8]) -> EVPKey? {
        guard rawPublicKey.count == publicKeyByteCount else { return nil }
        OpenSSLErrorQueue.clear()
        let key = rawPublicKey.withUnsafeBufferPointer {
            EVP_PKEY_new_raw_public_key(multipeer_evp_pkey_ed25519(), nil, $0.baseAddress, $0.count)
        }
        guard let key else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return EVPKey(taking: key)
    }

    /// Shares a key that `pointer` does not own (for example `X509_get0_pubkey`'s result): takes a
    /// reference of its own, so the result stays valid after the original owner is gone.
    static func sharing(_ pointer: OpaquePointer) -> EVPKey? {
        guard EVP_PKEY_up_ref(pointer) == 1 else { return nil }
        return EVPKey(taking: pointer)
    }

    /// Whether the key is an Ed25519 key.
    var isEd25519: Bool {
        EVP_PKEY_get_id(pointer) == multipeer_evp_pkey_ed25519()
    }

    /// The raw 32-byte public key.
    func rawPublicKey() throws(IdentityError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        var bytes = [UInt8](repeating: 0, count: Self.publicKeyByteCount)
        var length = bytes.count
        guard EVP_PKEY_get_raw_public_key(pointer, &bytes, &length) == 1, length == Self.publicKeyByteCount else {
            throw .openSSL("reading the raw Ed25519 public key")
        }
        return bytes
    }

    /// The private key as an unencrypted PEM "PRIVATE KEY" (PKCS#8) block.
    func privateKeyPEM() throws(IdentityError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let bio = MemoryBIO() else { throw .openSSL("allocating a memory BIO") }
        guard PEM_write_bio_PrivateKey(bio.pointer, pointer, nil, nil, 0, nil, nil) == 1 else {
            throw .openSSL("encoding the private key as PEM")
        }
        return bio.readAll()
    }

    /// The Ed25519 signature (64 bytes) of `data`. Ed25519 hashes internally, so no digest is named.
    func sign(_ data: [UInt8]) throws(IdentityError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let context = DigestContext() else { throw .openSSL("allocating a signing context") }
        guard EVP_DigestSignInit(context.pointer, nil, nil, nil, pointer) == 1 else {
            throw .openSSL("starting an Ed25519 signature")
        }
        var signature = [UInt8](repeating: 0, count: Self.signatureByteCount)
        var length = signature.count
        let status = data.withUnsafeBufferPointer {
            EVP_DigestSign(context.pointer, &signature, &length, $0.baseAddress, $0.count)
        }
        guard status == 1, length == Self.signatureByteCount else { throw .openSSL("Ed25519 signing") }
        return signature
    }

    /// Whether `signature` is this key's valid Ed25519 signature of `data`.
    func verify(signature: [UInt8], data: [UInt8]) -> Bool {
        defer { OpenSSLErrorQueue.clear() }
        guard signature.count == Self.signatureByteCount, let context = DigestContext() else { return false }
        guard EVP_DigestVerifyInit(context.pointer, nil, nil, nil, pointer) == 1 else { return false }
        let status = signature.withUnsafeBufferPointer { signatureBytes in
            data.withUnsafeBufferPointer { dataBytes in
                EVP_DigestVerify(
                    context.pointer, signatureBytes.baseAddress, signatureBytes.count, dataBytes.baseAddress,
                    dataBytes.count)
            }
        }
        return status == 1
    }
}
