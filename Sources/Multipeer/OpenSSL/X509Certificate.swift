internal import COpenSSL

/// Owns an OpenSSL `X509` certificate: either a self-signed certificate for an identity key, made in memory,
/// or one parsed from DER (the far side's certificate in the TLS handshake).
final class X509Certificate {
    /// How long before "now" a new certificate becomes valid, so a peer whose clock is somewhat behind
    /// still accepts it.
    static let backdatingSeconds = 3_600
    /// How long a new certificate stays valid. Certificates are bound to the identity key, not to a
    /// validity period (the fingerprint is what peers check), so this is long enough never to matter.
    static let validitySeconds = 10 * 365 * 24 * 3_600

    let pointer: OpaquePointer

    private init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        X509_free(pointer)
    }

    /// Shares a certificate that `pointer` does not own (for example `SSL_get0_peer_certificate`'s result):
    /// takes a reference of its own, so the result stays valid after the original owner is gone.
    static func sharing(_ pointer: OpaquePointer) -> X509Certificate? {
        guard X509_up_ref(pointer) == 1 else { return nil }
        return X509Certificate(taking: pointer)
    }

    /// A version 3 certificate whose subject and issuer are `CN=commonName`, holding `key`'s public key,
    /// with a random serial number, valid from an hour ago for ten years, signed by `key` itself.
    static func selfSigned(key: EVPKey, commonName: String) throws(IdentityError) -> X509Certificate {
        OpenSSLErrorQueue.clear()
        guard let raw = X509_new() else { throw .certificateFailed("allocating a certificate") }
        let certificate = X509Certificate(taking: raw)
        // Version numbers are zero-based: 2 means X.509 version 3.
        guard X509_set_version(raw, 2) == 1 else { throw .certificateFailed("setting the certificate version") }

        var serialBytes = [UInt8](repeating: 0, count: 8)
        guard RAND_bytes(&serialBytes, Int32(serialBytes.count)) == 1 else {
            throw .certificateFailed("drawing a random serial number")
        }
        // RFC 5280 serials are positive and non-zero; 63 random bits keep them unique in practice.
        let serial = serialBytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } & (UInt64.max >> 1) | 1
        guard ASN1_INTEGER_set_uint64(X509_get_serialNumber(raw), serial) == 1 else {
            throw .certificateFailed("setting the serial number")
        }

        guard X509_gmtime_adj(X509_getm_notBefore(raw), -backdatingSeconds) != nil,
            X509_gmtime_adj(X509_getm_notAfter(raw), validitySeconds) != nil
        else { throw .certificateFailed("setting the validity period") }

        guard let name = X509_get_subject_name(raw),
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, commonName, -1, -1, 0) == 1,
            X509_set_issuer_name(raw, name) == 1
        else { throw .certificateFailed("setting the subject and issuer name CN=\(commonName)") }

        guard X509_set_pubkey(raw, key.pointer) == 1 else { throw .certificateFailed("setting the public key") }
        // Ed25519 signs the message itself, so no digest is named.
        guard X509_sign(raw, key.pointer, nil) > 0 else { throw .certificateFailed("signing the certificate") }
        return certificate
    }

    /// A certificate parsed from its DER encoding; fails if the bytes are not exactly one certificate.
    static func parse(der: [UInt8]) throws(IdentityError) -> X509Certificate {
        OpenSSLErrorQueue.clear()
        let parsed: OpaquePointer?
        var consumed = 0
        parsed = der.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            guard let base = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = base
            let result = d2i_X509(nil, &cursor, buffer.count)
            consumed = cursor.map { $0 - base } ?? 0
            return result
        }
        guard let parsed else { throw .certificateFailed("parsing the certificate DER (\(der.count) bytes)") }
        let certificate = X509Certificate(taking: parsed)
        guard consumed == der.count else {
            throw IdentityError(
                code: .certificateFailed,
                reason: "the certificate DER has \(der.count - consumed) bytes after the certificate")
        }
        return certificate
    }

    /// The certificate's DER encoding.
    func der() throws(IdentityError) -> [UInt8] {
        OpenSSLErrorQueue.clear()
        let length = i2d_X509(pointer, nil)
        guard length > 0 else { throw .certificateFailed("measuring the certificate's DER encoding") }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_X509(pointer, &cursor)
        }
        guard written == length else { throw .certificateFailed("encoding the certificate as DER") }
        return bytes
    }

    /// The certificate's public key, sharing OpenSSL's reference count.
    func publicKey() throws(IdentityError) -> EVPKey {
        OpenSSLErrorQueue.clear()
        guard let key = X509_get0_pubkey(pointer), let owner = EVPKey.sharing(key) else {
            throw .certificateFailed("reading the certificate's public key")
        }
        return owner
    }

    /// Whether the certificate's signature verifies with `key` (for a self-signed certificate, its own key).
    func isSigned(by key: EVPKey) -> Bool {
        defer { OpenSSLErrorQueue.clear() }
        return X509_verify(pointer, key.pointer) == 1
    }
}
