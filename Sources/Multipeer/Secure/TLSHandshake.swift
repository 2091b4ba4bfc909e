internal import COpenSSL

/// OpenSSL's part of one TLS 1.3 connection: the `SSL` object that runs the handshake over a
/// ``CiphertextBuffers`` and, once it is done, hands the application traffic secrets to this package's record
/// layer (``handOver()``) and answers exporter requests until it is released.
///
/// The client (dialer) checks that the server's certificate key has the fingerprint it expects; the server
/// requires a certificate and learns the dialer's identity from it (``peerFingerprint``). Either side accepts
/// exactly one self-signed certificate holding an Ed25519 key, and nothing else. A check that fails aborts the
/// handshake at once with a `bad_certificate` alert, so the peer fails promptly too.
///
/// Freeing this object frees the `SSL` with its BIO and with them OpenSSL's copies of the handshake, traffic and
/// exporter secrets; ``TLSSession/releaseHandshakeState()`` does that once nothing needs the exporter any more.
///
/// Not `Sendable`: it belongs to one thread. OpenSSL's callbacks reach it through an unretained pointer in the
/// `SSL`'s ex_data; that is safe because this object owns the `SSL` and frees it in `deinit`.
final class TLSHandshake {
    /// The configuration the `SSL` was made from.
    let context: TLSContext
    /// The identity the peer must prove, or nil to accept any identity.
    let expectedPeer: PeerFingerprint?
    /// The `SSL`, owned by this object; OpenSSL's own record layer is reachable through it, which only tests use
    /// (to check this package's record layer against it).
    let ssl: OpaquePointer
    /// Kept alive for as long as the `SSL`, whose BIO holds an unretained pointer to it.
    private let buffers: CiphertextBuffers

    /// The peer's identity: the SHA-256 of its certificate's Ed25519 public key. Set when the handshake
    /// completes; nil before.
    private(set) var peerFingerprint: PeerFingerprint?
    /// The alerts seen so far, recorded by the info callback for error messages.
    var alerts = TLSAlerts()
    /// The verify callback's verdict on the peer's certificate, kept so it runs its checks once and so a
    /// failed handshake reports why; cleared when the handshake completes.
    var verification: PeerVerification?
    /// The application traffic secrets, captured by the key-log callback during the handshake; handed over
    /// (and wiped here) by ``handOver()``.
    var clientTrafficSecret: [UInt8]?
    var serverTrafficSecret: [UInt8]?
    /// The first thing OpenSSL wrote that belongs after the handshake (application data, a NewSessionTicket, a
    /// KeyUpdate), seen by the message callback; ``handOver()`` refuses to go on if it is set, because the
    /// peer's record sequence numbers and keys would no longer match ours.
    var writtenPastHandshake: String?

    /// An `SSL` over `buffers` for `context`, before any byte has been exchanged.
    ///
    /// - Parameters:
    ///   - context: The configuration, shared by many sessions.
    ///   - expectedPeer: The identity the peer must prove: for the client, the fingerprint discovery
    ///     advertised. nil accepts any Ed25519 identity (the server's usual case).
    ///   - buffers: The ciphertext in both directions, which OpenSSL reaches through its BIO.
    /// - Throws: ``ConnectionError`` with code `.internalFailure` if OpenSSL cannot allocate the session.
    init(context: TLSContext, expectedPeer: PeerFingerprint?, buffers: CiphertextBuffers) throws(ConnectionError) {
        OpenSSLErrorQueue.clear()
        let index = Self.exDataIndex
        guard index >= 0 else { throw .tlsSetup("reserving an SSL ex_data index") }
        guard let ssl = SSL_new(context.pointer) else { throw .tlsSetup("allocating an SSL session") }
        guard let bio = CiphertextBIO.make(buffers: buffers) else {
            SSL_free(ssl)
            throw .tlsSetup("allocating the ciphertext BIO")
        }
        // With the same BIO for reading and writing, the SSL takes over the one reference.
        SSL_set_bio(ssl, bio, bio)
        self.ssl = ssl
        self.buffers = buffers
        self.context = context
        self.expectedPeer = expectedPeer
        // From here on `deinit` frees the SSL if a step below throws.
        guard SSL_set_ex_data(ssl, index, Unmanaged.passUnretained(self).toOpaque()) == 1 else {
            throw .tlsSetup("attaching the session to its SSL")
        }
        SSL_set_msg_callback(ssl) { writing, _, contentType, bytes, count, ssl, _ in
            TLSHandshake.messageCallback(
                writing: writing, contentType: contentType, bytes: bytes, count: count, ssl: ssl)
        }
        switch context.role {
        case .client: SSL_set_connect_state(ssl)
        case .server: SSL_set_accept_state(ssl)
        }
    }

    deinit {
        wipeTrafficSecrets()
        SSL_free(ssl)
    }

    /// The `SSL` ex_data slot holding the unretained pointer back to the handshake, reserved on first use;
    /// -1 if OpenSSL could not reserve one.
    static let exDataIndex: Int32 = multipeer_ssl_get_ex_new_index()

    /// The handshake attached to `ssl`, for OpenSSL's callbacks.
    static func handshake(of ssl: OpaquePointer) -> TLSHandshake? {
        guard let pointer = SSL_get_ex_data(ssl, exDataIndex) else { return nil }
        return Unmanaged<TLSHandshake>.fromOpaque(pointer).takeUnretainedValue()
    }

    // MARK: Handshake

    /// Runs the handshake as far as the received ciphertext allows; the caller sends what it wrote.
    ///
    /// - Returns: true once the handshake is complete on this side and the peer's certificate passed every
    ///   check; false while more ciphertext from the peer is needed.
    /// - Throws: ``ConnectionError`` with code `.identityMismatch(expected:actual:)` if the peer's key is not
    ///   ``expectedPeer``; `.handshakeFailed` for anything else, with OpenSSL's reason and the alert.
    func advance() throws(ConnectionError) -> Bool {
        if peerFingerprint != nil { return true }
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(ssl)
        guard result == 1 else {
            let error = SSL_get_error(ssl, result)
            if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return false }
            throw handshakeFailure(error)
        }
        peerFingerprint = try checkPeerCertificate()
        verification = nil
        return true
    }

    /// Ends OpenSSL's part in the records: sets up this package's record layer with the application traffic
    /// secrets (wiped here in every case), after checking that OpenSSL holds no application data of its own and
    /// wrote nothing that belongs after the handshake. OpenSSL reads records one at a time (no read-ahead), so
    /// whatever the peer sent after its last handshake record is still in the buffers; and had OpenSSL written
    /// a record with the application keys (data, a NewSessionTicket, a KeyUpdate), the peer would expect the
    /// next record at a sequence number or key ours does not use.
    ///
    /// - Throws: ``ConnectionError`` with code `.internalFailure` naming what was wrong.
    func handOver() throws(ConnectionError) -> TLSRecordProtection {
        defer { wipeTrafficSecrets() }
        guard peerFingerprint != nil else {
            throw ConnectionError(
                code: .internalFailure, reason: "the record layer was taken over before the handshake completed")
        }
        if let writtenPastHandshake {
            throw ConnectionError(
                code: .internalFailure,
                reason: "OpenSSL wrote \(writtenPastHandshake) before this package's record layer took over; the "
                    + "peer would expect the next record with other keys or another sequence number")
        }
        guard SSL_pending(ssl) == 0, SSL_has_pending(ssl) == 0 else {
            throw ConnectionError(code: .internalFailure, reason: "OpenSSL buffered data during the handshake")
        }
        guard let suite = TLSRecordProtection.Suite(name: negotiatedCipherSuite) else {
            throw ConnectionError(
                code: .internalFailure, reason: "no record layer for the cipher suite \(negotiatedCipherSuite)")
        }
        guard let client = clientTrafficSecret, let server = serverTrafficSecret,
            client.count == suite.hashLength, server.count == suite.hashLength
        else {
            throw ConnectionError(code: .internalFailure, reason: "the application traffic secrets were not captured")
        }
        let isClient = context.role == .client
        return try TLSRecordProtection(
            suite: suite, sendingSecret: isClient ? client : server, receivingSecret: isClient ? server : client)
    }

    /// Overwrites the captured secrets in place (the record layer keeps copies of its own) and forgets them.
    func wipeTrafficSecrets() {
        clientTrafficSecret?.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        serverTrafficSecret?.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        clientTrafficSecret = nil
        serverTrafficSecret = nil
    }

    /// The error for a handshake OpenSSL ended with `SSL_get_error` code `error`: the verify callback's verdict
    /// if it rejected the certificate, otherwise OpenSSL's reason.
    private func handshakeFailure(_ error: Int32) -> ConnectionError {
        let openSSL = OpenSSLErrorQueue.drain()
        if case .rejected(let rejection)? = verification {
            return ConnectionError(code: rejection.code, reason: rejection.reason + alerts.suffix)
        }
        let detail = error == SSL_ERROR_SSL ? openSSL : "SSL_get_error \(error): \(openSSL)"
        return .tlsHandshakeFailed(detail, alerts: alerts)
    }

    /// Checks the peer's certificate again after the handshake, independently of the verify callback, so that
    /// no path through OpenSSL can skip the checks: one certificate, holding an Ed25519 key, the expected one
    /// if one is expected, and the same key the callback accepted (the callback also checked the
    /// self-signature; the handshake's CertificateVerify proved the peer holds the private key).
    private func checkPeerCertificate() throws(ConnectionError) -> PeerFingerprint {
        guard let leaf = SSL_get0_peer_certificate(ssl), let certificate = X509Certificate.sharing(leaf) else {
            if let expectedPeer { throw .tlsIdentityMismatch(expected: expectedPeer, actual: nil) }
            throw .tlsHandshakeFailed("the peer presented no certificate", alerts: alerts)
        }
        // OpenSSL keeps the certificates after the leaf here on a server, and all of them on a client.
        let leafInChain: Int32 = context.role == .client ? 1 : 0
        let extraCertificates = multipeer_sk_x509_num(SSL_get_peer_cert_chain(ssl)) - leafInChain
        guard extraCertificates <= 0 else {
            throw .tlsHandshakeFailed(
                "the peer presented \(extraCertificates + 1) certificates; a peer presents exactly one",
                alerts: alerts)
        }
        let fingerprint: PeerFingerprint
        do throws(IdentityError) {
            let key = try certificate.publicKey()
            guard key.isEd25519 else { throw .notEd25519("the peer's certificate") }
            fingerprint = PeerFingerprint(publicKey: try key.rawPublicKey())
        } catch {
            if let expectedPeer {
                throw .tlsIdentityMismatch(expected: expectedPeer, actual: nil, detail: " (\(error.reason))")
            }
            throw .tlsHandshakeFailed("the peer's certificate is unusable: \(error.reason)", alerts: alerts)
        }
        if let expectedPeer, fingerprint != expectedPeer {
            throw .tlsIdentityMismatch(expected: expectedPeer, actual: fingerprint)
        }
        guard case .accepted(_, let verified)? = verification, verified == fingerprint else {
            throw .tlsHandshakeFailed(
                "the peer's certificate was not the one the verify callback accepted", alerts: alerts)
        }
        return fingerprint
    }

    // MARK: Session facts

    /// Keying material derived from the session's secrets with the TLS exporter (RFC 8446 section 7.5);
    /// both sides get the same bytes for the same label and context, and no one else can.
    ///
    /// - Parameters:
    ///   - label: Names the use, e.g. `"EXPORTER-swift-multipeer group secret"`.
    ///   - context: Binds extra data; `[]` is a valid (empty) context.
    ///   - length: The number of bytes, at least 1.
    /// - Throws: ``ConnectionError`` with code `.internalFailure` for a length below 1, or if OpenSSL refuses
    ///   (for example before the handshake completes, or for a length beyond HKDF's limit).
    func exportKeyingMaterial(label: String, context: [UInt8], length: Int) throws(ConnectionError) -> [UInt8] {
        guard length > 0 else {
            throw ConnectionError(code: .internalFailure, reason: "exporting \(length) bytes of keying material")
        }
        OpenSSLErrorQueue.clear()
        let labelBytes = Array(label.utf8)
        var material = [UInt8](repeating: 0, count: length)
        let result = labelBytes.withUnsafeBufferPointer { labelBuffer in
            context.withUnsafeBufferPointer { contextBuffer in
                labelBuffer.withMemoryRebound(to: CChar.self) { labelCharacters in
                    SSL_export_keying_material(
                        ssl, &material, length, labelCharacters.baseAddress, labelCharacters.count,
                        contextBuffer.baseAddress, contextBuffer.count, 1)
                }
            }
        }
        guard result == 1 else {
            throw ConnectionError(
                code: .internalFailure,
                reason: "exporting \(length) bytes of keying material for '\(label)' failed: "
                    + OpenSSLErrorQueue.drain())
        }
        return material
    }

    /// The negotiated cipher suite's IANA name, e.g. `TLS_AES_128_GCM_SHA256`; "" before the handshake.
    var negotiatedCipherSuite: String {
        guard let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_standard_name(cipher) else {
            return ""
        }
        return String(cString: name)
    }

    /// The negotiated protocol version, `TLSv1.3` after the handshake.
    var negotiatedProtocol: String {
        String(cString: SSL_get_version(ssl))
    }
}
