extension PeerIdentity {
    /// A self-signed X.509 version 3 certificate for this identity's key, made in memory for TLS.
    ///
    /// Subject and issuer are `CN=` the fingerprint's readable form; the serial number is random; it is
    /// valid from one hour ago (for peers whose clocks lag) for ten years, and signed with the identity's
    /// Ed25519 key. Peers trust it by checking its key's fingerprint
    /// (``fingerprint(ofCertificateDER:)``), not a chain or a validity period. Each call makes a new
    /// certificate.
    ///
    /// - Returns: The certificate's DER encoding.
    /// - Throws: ``IdentityError`` with code `.certificateFailed` and OpenSSL's reason.
    public func certificateDER() throws(IdentityError) -> [UInt8] {
        try makeCertificate().der()
    }

    /// A new self-signed certificate for this identity (see ``certificateDER()``), for the TLS layer to
    /// install with `SSL_CTX_use_certificate` next to ``key`` (`SSL_CTX_use_PrivateKey`).
    func makeCertificate() throws(IdentityError) -> X509Certificate {
        try X509Certificate.selfSigned(key: key, commonName: fingerprint.description)
    }

    /// The fingerprint of the identity a certificate speaks for: the SHA-256 of its Ed25519 public key.
    ///
    /// The certificate must parse as exactly one DER certificate, hold an Ed25519 key, and carry a valid
    /// signature by that key (it is self-signed). This does not prove that the sender holds the private
    /// key; the TLS handshake's CertificateVerify does that.
    ///
    /// - Parameter der: A certificate's DER encoding, such as the far side's TLS certificate.
    /// - Returns: The fingerprint of the certificate's key.
    /// - Throws: ``IdentityError`` with code `.certificateFailed` if the bytes are not a certificate or its
    ///   self-signature is invalid, `.notEd25519` if its key is of another kind.
    public static func fingerprint(ofCertificateDER der: [UInt8]) throws(IdentityError) -> PeerFingerprint {
        try fingerprint(of: X509Certificate.parse(der: der))
    }

    /// The fingerprint of the identity `certificate` speaks for, with the checks of
    /// ``fingerprint(ofCertificateDER:)``; the TLS layer calls it with the far side's certificate.
    static func fingerprint(of certificate: X509Certificate) throws(IdentityError) -> PeerFingerprint {
        let key = try certificate.publicKey()
        guard key.isEd25519 else { throw .notEd25519("the certificate") }
        guard certificate.isSigned(by: key) else {
            throw IdentityError(
                code: .certificateFailed, reason: "the certificate is not validly signed by its own key")
        }
        return PeerFingerprint(publicKey: try key.rawPublicKey())
    }
}
