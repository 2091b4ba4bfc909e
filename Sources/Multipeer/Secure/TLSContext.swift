internal import COpenSSL

/// Which end of a TCP connection a TLS session is.
enum TLSRole: Hashable, Sendable, CustomStringConvertible {
    /// The dialer, which opened the connection and knows from discovery which identity it expects.
    case client
    /// The acceptor, which learns the dialer's identity from the dialer's certificate.
    case server

    /// "client" or "server".
    var description: String {
        switch self {
        case .client: "client"
        case .server: "server"
        }
    }
}

/// Ways a context can break the rules, so tests can play a peer that is not a swift-multipeer peer.
/// Production code never sets them.
struct TLSContextTestHooks {
    /// Speak TLS 1.2 only (minimum and maximum version), like an old TLS stack.
    var onlyTLS12 = false
    /// Install no certificate and no key, so the side presents an empty Certificate message.
    var omitsCertificate = false
    /// Present a second certificate after the identity's, for an unrelated key.
    var presentsSecondCertificate = false
    /// Offer only these TLS 1.3 cipher suites (an OpenSSL list such as "TLS_CHACHA20_POLY1305_SHA256").
    var cipherSuites: String?
    /// As a server, send a session ticket after the handshake, which our record layer could not follow.
    var sendsSessionTicket = false
}

/// The TLS configuration of one identity in one role: an OpenSSL `SSL_CTX` that many ``TLSSession``s share.
///
/// The configuration is fixed here for every connection:
/// - TLS 1.3 only; cipher suites AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 (in that order, the server's
///   order wins); key exchange X25519, then P-256; signatures Ed25519 only, since every identity is an
///   Ed25519 key.
/// - Mutual authentication: each side presents a self-signed certificate for its identity key
///   (``PeerIdentity/makeCertificate()``), and the server requires one from the client. There is no CA:
///   ``TLSHandshake`` accepts exactly one self-signed Ed25519 certificate and checks its key's fingerprint.
/// - No session tickets, no session cache, no resumption, no compression, no renegotiation. Without
///   resumption every handshake proves possession of the identity key again.
/// - `SSL_MODE_RELEASE_BUFFERS`, so an idle session gives its record buffers back.
/// - No middlebox-compatibility mode: both ends are swift-multipeer peers on a port of their own, so the
///   dummy ChangeCipherSpec records and legacy session id it adds would only cost bytes.
///
/// Not `Sendable`: it belongs to the connection layer's event-loop thread, like the sessions made from it.
final class TLSContext {
    /// The TLS 1.3 cipher suites, in preference order.
    static let cipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
    /// The key exchange groups, in preference order.
    static let groups = "X25519:P-256"
    /// The only signature algorithm, for certificates and CertificateVerify, in both directions.
    static let signatureAlgorithms = "ed25519"

    /// The `SSL_CTX`, owned by this object.
    let pointer: OpaquePointer
    /// Whether the sessions made from this context dial or accept.
    let role: TLSRole
    /// The identity whose key and certificate the sessions present.
    let identity: PeerIdentity

    /// A context presenting `identity` in `role`.
    ///
    /// - Parameters:
    ///   - identity: The local identity: its Ed25519 key signs the handshake, and a new self-signed
    ///     certificate carries its public key.
    ///   - role: `.client` for dialed connections, `.server` for accepted ones.
    /// - Throws: ``ConnectionError`` with code `.internalFailure` and OpenSSL's reason if OpenSSL refuses
    ///   any part of the configuration.
    convenience init(identity: PeerIdentity, role: TLSRole) throws(ConnectionError) {
        try self.init(identity: identity, role: role, testHooks: TLSContextTestHooks())
    }

    /// A context presenting `identity` in `role`, with the rule-breaking changes in `testHooks`; tests only.
    init(identity: PeerIdentity, role: TLSRole, testHooks: TLSContextTestHooks) throws(ConnectionError) {
        OpenSSLErrorQueue.clear()
        guard let method = role == .client ? TLS_client_method() : TLS_server_method(),
            let context = SSL_CTX_new(method)
        else { throw .tlsSetup("allocating an SSL_CTX") }
        pointer = context
        self.role = role
        self.identity = identity
        // From here on `deinit` frees the context if a step below throws.
        try configureProtocol(testHooks: testHooks)
        if !testHooks.omitsCertificate { try installIdentity() }
        if testHooks.presentsSecondCertificate { try addSecondCertificate() }
        configureVerification()
    }

    deinit {
        SSL_CTX_free(pointer)
    }

    /// Versions, cipher suites, groups, signature algorithms, options and modes.
    private func configureProtocol(testHooks: TLSContextTestHooks) throws(ConnectionError) {
        let version = testHooks.onlyTLS12 ? TLS1_2_VERSION : TLS1_3_VERSION
        guard multipeer_ssl_ctx_set_proto_versions(pointer, version, version) == 1 else {
            throw .tlsSetup("restricting the protocol version")
        }
        let suites = testHooks.cipherSuites ?? Self.cipherSuites
        guard SSL_CTX_set_ciphersuites(pointer, suites) == 1 else {
            throw .tlsSetup("setting the cipher suites \(suites)")
        }
        guard multipeer_ssl_ctx_set1_groups_list(pointer, Self.groups) == 1 else {
            throw .tlsSetup("setting the key exchange groups \(Self.groups)")
        }
        // The signature algorithms this side accepts in the peer's CertificateVerify; the server also lists
        // them in its CertificateRequest. A peer with any other kind of key fails the handshake early.
        guard multipeer_ssl_ctx_set1_sigalgs_list(pointer, Self.signatureAlgorithms) == 1,
            multipeer_ssl_ctx_set1_client_sigalgs_list(pointer, Self.signatureAlgorithms) == 1
        else { throw .tlsSetup("restricting the signature algorithms to \(Self.signatureAlgorithms)") }

        let tickets = testHooks.sendsSessionTicket ? 0 : multipeer_ssl_op_no_ticket()
        _ = SSL_CTX_set_options(
            pointer,
            multipeer_ssl_op_no_compression() | multipeer_ssl_op_no_renegotiation() | tickets
                | multipeer_ssl_op_cipher_server_preference())
        _ = SSL_CTX_clear_options(pointer, multipeer_ssl_op_enable_middlebox_compat())
        // TLS 1.3 servers send session tickets after the handshake unless told not to; nobody would use them, and
        // our record layer takes over right after the handshake (TLSHandshake.handOver() refuses if one was sent).
        guard SSL_CTX_set_num_tickets(pointer, testHooks.sendsSessionTicket ? 1 : 0) == 1 else {
            throw .tlsSetup("disabling session tickets")
        }
        _ = multipeer_ssl_ctx_set_session_cache_mode(pointer, Int(SSL_SESS_CACHE_OFF))
        // Record buffers (about 17 KB each way) are freed whenever they are empty, so an idle session does
        // not hold them. Partial writes and moving write buffers are not needed: the ciphertext BIO accepts
        // every write in full, so SSL_write never has to be retried.
        _ = multipeer_ssl_ctx_set_mode(pointer, Int(SSL_MODE_RELEASE_BUFFERS))
    }

    /// The identity's key and a fresh self-signed certificate for it.
    private func installIdentity() throws(ConnectionError) {
        let certificate: X509Certificate
        do {
            certificate = try identity.makeCertificate()
        } catch {
            throw ConnectionError(
                code: .internalFailure, reason: "setting up TLS: making the certificate failed: \(error.reason)")
        }
        // Both calls take references of their own; `certificate` and the identity's key may go away.
        guard SSL_CTX_use_certificate(pointer, certificate.pointer) == 1 else {
            throw .tlsSetup("installing the certificate")
        }
        guard SSL_CTX_use_PrivateKey(pointer, identity.key.pointer) == 1, SSL_CTX_check_private_key(pointer) == 1
        else { throw .tlsSetup("installing the identity key") }
    }

    /// A certificate for a new, unrelated identity, added to the chain this side presents; tests only.
    private func addSecondCertificate() throws(ConnectionError) {
        let certificate: X509Certificate
        do {
            certificate = try PeerIdentity.generate(displayName: "second").makeCertificate()
        } catch {
            throw ConnectionError(code: .internalFailure, reason: error.reason)
        }
        guard multipeer_ssl_ctx_add1_chain_cert(pointer, certificate.pointer) == 1 else {
            throw .tlsSetup("adding a second certificate")
        }
    }

    /// Certificate verification by ``TLSHandshake``'s callback instead of a chain to a CA, the info callback
    /// that records alerts, and the key-log callback that captures the traffic secrets. All find their handshake
    /// through `SSL` ex_data.
    private func configureVerification() {
        var mode = SSL_VERIFY_PEER
        if role == .server { mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT }
        SSL_CTX_set_verify(pointer, mode) { preverified, store in
            TLSHandshake.verifyCallback(preverified: preverified, store: store)
        }
        SSL_CTX_set_info_callback(pointer) { ssl, location, value in
            TLSHandshake.infoCallback(ssl: ssl, location: location, value: value)
        }
        // The application traffic secrets go to the session's own record layer (TLSRecordProtection).
        SSL_CTX_set_keylog_callback(pointer) { ssl, line in
            TLSHandshake.keyLogCallback(ssl: ssl, line: line)
        }
    }
}
