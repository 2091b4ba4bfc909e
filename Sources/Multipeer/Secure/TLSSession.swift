internal import COpenSSL

/// What ``TLSSession/decrypt(into:maximum:)`` found after the bytes it delivered.
enum TLSReadStatus: Hashable, Sendable {
    /// The stream is open: more data may follow once more ciphertext arrives.
    case ok
    /// The peer sent close_notify: it will send nothing more. Every call from now on returns this.
    case closeNotify
}

/// One TLS 1.3 connection in memory: ciphertext goes in and out as bytes, plaintext in and out of
/// caller-owned buffers. It never touches a socket, never blocks, and never waits.
///
/// The connection layer drives it from its event-loop thread:
/// 1. Feed whatever the socket delivered to ``receivedCiphertext(_:)-([UInt8])``, call
///    ``advanceHandshake()`` until it returns true, and after every call send ``takeCiphertext()``.
/// 2. Then ``encrypt(_:)`` and ``decrypt(into:maximum:)``; after either, send ``takeCiphertext()`` (a
///    decrypt can produce output too, when the peer asks for a key update).
/// 3. ``sendCloseNotify()`` to end gracefully.
///
/// The client (dialer) checks that the server's certificate key has the fingerprint it expects; the server
/// requires a certificate and learns the dialer's identity from it (``peerFingerprint``). Either side
/// accepts exactly one self-signed certificate holding an Ed25519 key, and nothing else. A check that fails
/// aborts the handshake at once with a `bad_certificate` alert, so the peer fails promptly too.
///
/// After a failure every operation throws the same error again; the session cannot recover and the
/// connection should be closed after sending what ``takeCiphertext()`` still holds (usually an alert).
///
/// Not `Sendable`: it belongs to one thread. OpenSSL's callbacks reach it through an unretained pointer in
/// the `SSL`'s ex_data; that is safe because the session owns the `SSL` and frees it in `deinit`.
final class TLSSession {
    /// The largest plaintext one TLS record carries (RFC 8446 section 5.1).
    static let maximumRecordPlaintext = 16_384
    /// The bytes a TLS 1.3 record adds to its plaintext: 5 of header, 1 of inner content type, 16 of AEAD
    /// tag (every cipher suite offered has a 16-byte tag).
    static let recordOverhead = 22

    /// The configuration this session was made from.
    let context: TLSContext
    /// The identity the peer must prove, or nil to accept any identity.
    let expectedPeer: PeerFingerprint?
    /// The `SSL`, owned by this object.
    private let ssl: OpaquePointer
    /// The ciphertext in both directions, which OpenSSL reaches through the `SSL`'s BIO.
    private let buffers: CiphertextBuffers

    /// Whether the handshake has completed on this side (and the peer's certificate passed every check).
    private(set) var isHandshakeComplete = false
    /// The peer's identity: the SHA-256 of its certificate's Ed25519 public key. Set when the handshake
    /// completes; nil before.
    private(set) var peerFingerprint: PeerFingerprint?
    /// The error that ended the session, thrown again by every later call.
    private var failure: ConnectionError?
    /// Whether the peer's close_notify has been read.
    private var closeNotifyReceived = false
    /// Whether this side has sent close_notify.
    private var closeNotifySent = false
    /// Whether any application data has been decrypted; see ``decryptionFailure(_:)``.
    private var receivedApplicationData = false

    /// Whether application data goes through ``TLSRecordProtection`` (this package's record layer) once the
    /// handshake is done, rather than OpenSSL's `SSL_write`/`SSL_read`. Both make the same records; tests turn
    /// it off on one side to check them against each other.
    let usesOwnRecordLayer: Bool
    /// The application traffic secrets, captured by the key-log callback during the handshake and wiped once
    /// the record keys are derived from them.
    var clientTrafficSecret: [UInt8]?
    var serverTrafficSecret: [UInt8]?
    /// This package's record layer, from the end of the handshake (when ``usesOwnRecordLayer``).
    private var protection: TLSRecordProtection?
    /// A decrypted record not yet handed out in full (only when a caller asks for less than a record).
    private var pendingPlaintext: [UInt8] = []
    private var pendingPlaintextOffset = 0

    /// The alerts seen so far, recorded by the info callback for error messages.
    var alerts = TLSAlerts()
    /// The verify callback's verdict on the peer's certificate, kept so it runs its checks once and so a
    /// failed handshake reports why; cleared when the handshake completes.
    var verification: PeerVerification?

    /// A session over `context`, in its role, before any byte has been exchanged.
    ///
    /// - Parameters:
    ///   - context: The configuration, shared by many sessions.
    ///   - expectedPeer: The identity the peer must prove: for the client, the fingerprint discovery
    ///     advertised. nil accepts any Ed25519 identity (the server's usual case).
    /// - Throws: ``ConnectionError`` with code `.internalFailure` if OpenSSL cannot allocate the session.
    init(context: TLSContext, expectedPeer: PeerFingerprint?, ownRecordLayer: Bool = true) throws(ConnectionError) {
        usesOwnRecordLayer = ownRecordLayer
        OpenSSLErrorQueue.clear()
        let index = Self.exDataIndex
        guard index >= 0 else { throw .tlsSetup("reserving an SSL ex_data index") }
        guard let ssl = SSL_new(context.pointer) else { throw .tlsSetup("allocating an SSL session") }
        let buffers = CiphertextBuffers()
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
        switch context.role {
        case .client: SSL_set_connect_state(ssl)
        case .server: SSL_set_accept_state(ssl)
        }
    }

    deinit {
        wipeTrafficSecrets()
        SSL_free(ssl)
    }

    /// The `SSL` ex_data slot holding the unretained pointer back to the session, reserved on first use;
    /// -1 if OpenSSL could not reserve one.
    static let exDataIndex: Int32 = multipeer_ssl_get_ex_new_index()

    /// The session attached to `ssl`, for OpenSSL's callbacks.
    static func session(of ssl: OpaquePointer) -> TLSSession? {
        guard let pointer = SSL_get_ex_data(ssl, exDataIndex) else { return nil }
        return Unmanaged<TLSSession>.fromOpaque(pointer).takeUnretainedValue()
    }

    // MARK: Ciphertext

    /// Queues ciphertext read from the socket. The array is adopted without copying when no earlier
    /// ciphertext is still waiting. Ignored once the session has failed.
    func receivedCiphertext(_ bytes: [UInt8]) {
        guard failure == nil else { return }
        buffers.receive(bytes)
    }

    /// Queues a copy of ciphertext read from the socket. Ignored once the session has failed.
    func receivedCiphertext(_ bytes: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        buffers.receive(bytes)
    }

    /// Test hook: how many records this side seals with one key before it sends a KeyUpdate (our record layer
    /// only; the default updates every 2^23 records).
    func setKeyUpdateInterval(_ records: UInt64) {
        protection?.keyUpdateInterval = records
    }

    /// Test hook: makes OpenSSL's record layer (``usesOwnRecordLayer`` false) send a KeyUpdate that asks the peer
    /// to update too, before its next record.
    func requestKeyUpdateThroughOpenSSL() -> Bool {
        protection == nil && SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1
    }

    /// Whether ``receivedCiphertext(_:decryptingInto:)`` would decrypt (this package's record layer is running,
    /// the session is open, and no record is half handed out), so the caller can lend its output buffer.
    var canDecryptDirectly: Bool {
        protection != nil && failure == nil && !closeNotifyReceived && pendingPlaintextOffset >= pendingPlaintext.count
    }

    /// Opens the whole records in `bytes` straight into `output` (no copy of the ciphertext) and keeps only a
    /// trailing partial record for later; falls back to ``receivedCiphertext(_:)-(UnsafeRawBufferPointer)``
    /// unless ``canDecryptDirectly``. Bytes after the peer's close_notify are ignored.
    /// - Throws: ``ConnectionError`` as ``decrypt(into:maximum:)`` does.
    func receivedCiphertext(_ bytes: UnsafeRawBufferPointer, decryptingInto output: inout [UInt8])
        throws(ConnectionError)
    {
        guard canDecryptDirectly, let protection else {
            receivedCiphertext(bytes)
            return
        }
        var offset = 0
        if buffers.incomingByteCount > 0 {
            // A record cut by the previous read: copy just enough of this one to complete it, open it, and go on
            // straight from the socket's bytes.
            do throws(ConnectionError) {
                offset = try completeBufferedRecord(from: bytes, protection: protection)
            } catch {
                throw fail(ownRecordFailure(error, protection))
            }
            guard offset > 0 else { return }  // still incomplete: everything was buffered
            if try decryptOwn(protection, into: &output, maximum: .max) == .closeNotify { return }
        }
        while offset < bytes.count {
            let next: (length: Int, opened: TLSRecordProtection.Opened)?
            let before = output.count
            do throws(ConnectionError) {
                next = try protection.openNext(in: UnsafeRawBufferPointer(rebasing: bytes[offset...]), into: &output)
            } catch {
                throw fail(ownRecordFailure(error, protection))
            }
            guard let next else { break }
            if output.count > before { receivedApplicationData = true }
            offset += next.length
            if try isEnd(next.opened) { return }
        }
        if offset < bytes.count { buffers.receive(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
    }

    /// Takes note of what a record opened by our record layer held; true at the peer's close_notify.
    private func isEnd(_ opened: TLSRecordProtection.Opened) throws(ConnectionError) -> Bool {
        switch opened {
        case .data, .keyUpdate:
            // A KeyUpdate that asks for ours is answered before our next data record (once however often asked).
            return false
        case .closeNotify:
            closeNotifyReceived = true
            return true
        case .alert(let alert):
            alerts.received = alert
            throw fail(decryptionFailure(detail: "the peer sent a fatal alert"))
        }
    }

    /// Moves from `bytes` into ``buffers`` what the partial record waiting there lacks; returns how many bytes
    /// it took when that record is now whole, else 0 after buffering all of `bytes` (not enough of them, or
    /// whole records were already waiting).
    private func completeBufferedRecord(from bytes: UnsafeRawBufferPointer, protection: TLSRecordProtection)
        throws(ConnectionError) -> Int
    {
        let header = TLSRecordProtection.headerLength
        var taken = 0
        var buffered = buffers.incomingByteCount
        if buffered < header {
            taken = min(header - buffered, bytes.count)
            buffers.receive(UnsafeRawBufferPointer(rebasing: bytes[0..<taken]))
            buffered += taken
            guard buffered == header else { return 0 }
        }
        var body = 0
        try buffers.consumeIncoming { (unread) throws(ConnectionError) -> Int in
            body = try protection.recordBodyLength(header: UnsafeRawBufferPointer(rebasing: unread[0..<header]))
            return 0
        }
        let missing = header + body - buffered
        // More than one record already waits (a read that stopped at its limit): keep to the buffered path.
        guard missing > 0, missing <= bytes.count - taken else {
            buffers.receive(UnsafeRawBufferPointer(rebasing: bytes[taken...]))
            return 0
        }
        buffers.receive(UnsafeRawBufferPointer(rebasing: bytes[taken..<taken + missing]))
        return taken + missing
    }

    /// Everything to send to the peer (handshake records, application data, alerts), in order, handed over
    /// without copying; `[]` when there is nothing.
    func takeCiphertext() -> [UInt8] {
        buffers.takeOutgoing()
    }

    /// Lends everything to send to the peer to `body` (not called when there is nothing), then forgets it; the
    /// memory is kept for the next records until ``releaseIdleBuffers()``.
    func drainCiphertext(_ body: (UnsafeRawBufferPointer) -> Void) {
        buffers.drainOutgoing(body)
    }

    /// Frees the ciphertext memory kept for reuse, where nothing is waiting in it.
    func releaseIdleBuffers() {
        buffers.releaseIdle()
    }

    /// The number of bytes ``takeCiphertext()`` would return.
    var pendingCiphertextByteCount: Int { buffers.outgoingByteCount }

    /// The number of received ciphertext bytes OpenSSL has not read yet (it reads a record when it is asked
    /// for data, not before).
    var unreadCiphertextByteCount: Int { buffers.incomingByteCount }

    // MARK: Handshake

    /// Runs the handshake as far as the received ciphertext allows.
    ///
    /// Bytes that cannot start a TLS 1.3 handshake fail at once. Bytes that look like the start of a record
    /// make the session wait for the rest of that record (at most about 16 KB), as TLS must; the connection
    /// layer's handshake timeout covers a peer that never sends it.
    ///
    /// - Returns: true once the handshake is complete on this side and the peer's certificate passed every
    ///   check; false while more ciphertext from the peer is needed. Send ``takeCiphertext()`` either way.
    /// - Throws: ``ConnectionError`` with code `.identityMismatch(expected:actual:)` if the peer's key is not
    ///   ``expectedPeer``; `.handshakeFailed` for anything else (a TLS alert, a malformed or unexpected
    ///   message, a certificate that is not one self-signed Ed25519 certificate), with OpenSSL's reason and
    ///   the alert.
    func advanceHandshake() throws(ConnectionError) -> Bool {
        if let failure { throw failure }
        if isHandshakeComplete { return true }
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(ssl)
        guard result == 1 else {
            let error = SSL_get_error(ssl, result)
            if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return false }
            throw fail(handshakeFailure(error))
        }
        let fingerprint: PeerFingerprint
        do {
            fingerprint = try checkPeerCertificate()
        } catch {
            throw fail(error)
        }
        peerFingerprint = fingerprint
        verification = nil
        if usesOwnRecordLayer {
            do {
                protection = try takeOverRecordLayer()
            } catch {
                throw fail(error)
            }
        }
        wipeTrafficSecrets()
        isHandshakeComplete = true
        return true
    }

    /// Sets up this package's record layer with the application traffic secrets. OpenSSL must hold no
    /// application data of its own at this point: it reads records one at a time (no read-ahead), so
    /// whatever the peer sent after its last handshake record is still in ``buffers``, and nothing was sent
    /// with the application keys yet.
    private func takeOverRecordLayer() throws(ConnectionError) -> TLSRecordProtection {
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
    private func wipeTrafficSecrets() {
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

    // MARK: Application data

    /// Encrypts all of `plaintext` into TLS records; send them with ``takeCiphertext()``.
    ///
    /// All of it is encrypted at once, so the ciphertext waiting grows by about the plaintext's size: the
    /// caller bounds what it hands over by what it is willing to buffer.
    ///
    /// - Parameter plaintext: The bytes to send, in any size (split into records of at most 16 KB).
    /// - Throws: ``ConnectionError`` with code `.internalFailure` if the handshake is not complete,
    ///   `.closedLocally` after ``sendCloseNotify()``, the session's earlier error after a failure, or
    ///   `.internalFailure` if OpenSSL fails.
    func encrypt(_ plaintext: UnsafeRawBufferPointer) throws(ConnectionError) {
        try checkUsable("encrypt")
        if closeNotifySent {
            throw ConnectionError(code: .closedLocally, reason: "encrypt after this side sent close_notify")
        }
        guard let base = plaintext.baseAddress, !plaintext.isEmpty else { return }
        if let protection {
            do throws(ConnectionError) {
                try buffers.appendOutgoing { (output) throws(ConnectionError) in
                    output.reserveCapacity(output.count + TLSRecordProtection.sealedLength(of: plaintext.count))
                    try protection.seal(plaintext, contentType: TLSRecordProtection.applicationDataType, into: &output)
                }
            } catch {
                throw fail(error)
            }
            return
        }
        let records = (plaintext.count + Self.maximumRecordPlaintext - 1) / Self.maximumRecordPlaintext
        buffers.reserveOutgoing(plaintext.count + records * Self.recordOverhead)
        OpenSSLErrorQueue.clear()
        var written = 0
        guard SSL_write_ex(ssl, base, plaintext.count, &written) == 1, written == plaintext.count else {
            throw fail(
                ConnectionError(
                    code: .internalFailure,
                    reason: "TLS encryption of \(plaintext.count) bytes failed: \(OpenSSLErrorQueue.drain())"
                        + alerts.suffix))
        }
    }

    /// Decrypts received records, appending at most `maximum` plaintext bytes to `output`.
    ///
    /// The plaintext is written straight into `output`'s storage, which grows as needed; nothing is
    /// allocated when nothing can be decrypted. The bytes appended are valid whatever the result, including the
    /// data the peer sent just before its close_notify when the result is `.closeNotify`.
    ///
    /// - Parameters:
    ///   - output: Receives the plaintext after its current contents.
    ///   - maximum: The most bytes to append; what is left stays buffered for the next call.
    /// - Returns: `.ok`, or `.closeNotify` once the peer's close_notify has been read.
    /// - Throws: ``ConnectionError`` with code `.protocolViolation` if a record fails authentication or
    ///   breaks the protocol (OpenSSL's reason and the alert sent); `.handshakeFailed` if, on the client, the
    ///   server's first post-handshake record is an alert (TLS 1.3 servers reject a client certificate only
    ///   after the client completed); `.internalFailure` if the handshake is not complete; the session's
    ///   earlier error after a failure.
    func decrypt(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> TLSReadStatus {
        try checkUsable("decrypt")
        if closeNotifyReceived { return .closeNotify }
        if let protection { return try decryptOwn(protection, into: &output, maximum: maximum) }
        var remaining = maximum
        while remaining > 0 {
            let buffered = Int(SSL_pending(ssl))
            let unread = buffers.incomingByteCount
            // Plaintext can only come from decrypted bytes, unread ciphertext, or a record OpenSSL has read
            // in part (at most one, since read-ahead is off).
            guard buffered > 0 || unread > 0 || SSL_has_pending(ssl) == 1 else { break }
            let chunk = min(remaining, buffered + unread + Self.maximumRecordPlaintext)
            var error: Int32 = 0
            let countBefore = output.count
            OpenSSLErrorQueue.clear()
            output.append(addingCapacity: chunk) { span in
                span.withUnsafeMutableBufferPointer { buffer, initialized in
                    while initialized < buffer.count {
                        var read = 0
                        let result = SSL_read_ex(
                            ssl, buffer.baseAddress! + initialized, buffer.count - initialized, &read)
                        guard result == 1 else {
                            error = SSL_get_error(ssl, result)
                            return
                        }
                        initialized += read
                    }
                }
            }
            remaining -= output.count - countBefore
            if output.count > countBefore { receivedApplicationData = true }
            switch error {
            case 0:
                continue  // Filled the whole chunk; there may be more.
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                return .ok  // The rest needs more ciphertext.
            case SSL_ERROR_ZERO_RETURN:
                closeNotifyReceived = true
                return .closeNotify
            default:
                throw fail(decryptionFailure(error))
            }
        }
        return .ok
    }

    /// ``decrypt(into:maximum:)`` through ``TLSRecordProtection``: whole records straight into `output` while
    /// they fit in `maximum`, else through ``pendingPlaintext``.
    private func decryptOwn(_ protection: TLSRecordProtection, into output: inout [UInt8], maximum: Int)
        throws(ConnectionError) -> TLSReadStatus
    {
        var remaining = maximum
        while remaining > 0 {
            if pendingPlaintextOffset < pendingPlaintext.count {
                let count = min(remaining, pendingPlaintext.count - pendingPlaintextOffset)
                output.append(contentsOf: pendingPlaintext[pendingPlaintextOffset..<pendingPlaintextOffset + count])
                pendingPlaintextOffset += count
                remaining -= count
                if pendingPlaintextOffset == pendingPlaintext.count {
                    pendingPlaintext = []
                    pendingPlaintextOffset = 0
                }
                continue
            }
            var opened: TLSRecordProtection.Opened?
            let before = output.count
            do throws(ConnectionError) {
                try buffers.consumeIncoming { (unread) throws(ConnectionError) -> Int in
                    guard unread.count >= TLSRecordProtection.headerLength else { return 0 }
                    let body = try protection.recordBodyLength(
                        header: UnsafeRawBufferPointer(rebasing: unread[0..<TLSRecordProtection.headerLength]))
                    let length = TLSRecordProtection.headerLength + body
                    guard unread.count >= length else { return 0 }
                    let record = UnsafeRawBufferPointer(rebasing: unread[0..<length])
                    if body - TLSRecordProtection.tagLength - 1 <= remaining {
                        opened = try protection.open(record: record, into: &output)
                    } else {
                        opened = try protection.open(record: record, into: &pendingPlaintext)
                    }
                    return length
                }
            } catch {
                throw fail(ownRecordFailure(error, protection))
            }
            guard let opened else { break }  // no whole record yet
            remaining -= output.count - before
            if output.count > before || !pendingPlaintext.isEmpty { receivedApplicationData = true }
            if try isEnd(opened) { return .closeNotify }
        }
        return .ok
    }

    /// A record this side refused ends the session; the peer is told with a fatal alert naming why
    /// (``TLSRecordProtection/refusalAlert``), sealed with our sending keys.
    private func ownRecordFailure(_ error: ConnectionError, _ protection: TLSRecordProtection) -> ConnectionError {
        let description = protection.refusalAlert
        alerts.sent = 2 << 8 | Int32(description)
        try? buffers.appendOutgoing { (output) throws(ConnectionError) in
            try protection.sealAlert(level: 2, description: description, into: &output)
        }
        closeNotifySent = true  // nothing more goes out after a fatal alert
        return ConnectionError(code: error.code, reason: error.reason + alerts.suffix)
    }

    /// The error for a read OpenSSL ended with `SSL_get_error` code `error`.
    private func decryptionFailure(_ error: Int32) -> ConnectionError {
        let openSSL = OpenSSLErrorQueue.drain()
        return decryptionFailure(detail: error == SSL_ERROR_SSL ? openSSL : "SSL_get_error \(error): \(openSSL)")
    }

    /// The error for a read that failed for `detail`: a handshake failure if this client has had no data yet
    /// and the server sent an alert (TLS 1.3 servers judge the client's certificate after the client is done).
    private func decryptionFailure(detail: String) -> ConnectionError {
        if context.role == .client, !receivedApplicationData, alerts.received != nil {
            return .tlsHandshakeFailed(
                "the server rejected the handshake after the client finished: \(detail)", alerts: alerts)
        }
        return ConnectionError(
            code: .protocolViolation, reason: "a TLS record was rejected: \(detail)\(alerts.suffix)")
    }

    /// Throws unless the handshake is complete and the session has not failed.
    private func checkUsable(_ operation: String) throws(ConnectionError) {
        if let failure { throw failure }
        guard isHandshakeComplete else {
            throw ConnectionError(code: .internalFailure, reason: "\(operation) before the TLS handshake completed")
        }
    }

    /// Records `error` as the session's end and returns it.
    private func fail(_ error: ConnectionError) -> ConnectionError {
        wipeTrafficSecrets()
        failure = error
        return error
    }

    // MARK: Session facts

    /// Keying material derived from the session's secrets with the TLS exporter (RFC 8446 section 7.5);
    /// both sides get the same bytes for the same label and context, and no one else can.
    ///
    /// - Parameters:
    ///   - label: Names the use, e.g. `"EXPORTER-swift-multipeer group secret"`.
    ///   - context: Binds extra data; `[]` is a valid (empty) context.
    ///   - length: The number of bytes, at least 1.
    /// - Throws: ``ConnectionError`` with code `.internalFailure` before the handshake completes, for a length
    ///   below 1, or if OpenSSL refuses (for example a length beyond HKDF's limit).
    func exportKeyingMaterial(label: String, context: [UInt8], length: Int) throws(ConnectionError) -> [UInt8] {
        try checkUsable("exporting keying material")
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

    // MARK: Closing

    /// Sends close_notify (through ``takeCiphertext()``): this side will send nothing more. Does nothing before
    /// the handshake completes, after a failure, or a second time; the connection is then simply closed.
    func sendCloseNotify() {
        guard failure == nil, isHandshakeComplete, !closeNotifySent else { return }
        closeNotifySent = true
        if let protection {
            // A warning-level close_notify alert, as SSL_shutdown would send.
            try? buffers.appendOutgoing { (output) throws(ConnectionError) in
                try protection.sealAlert(level: 1, description: 0, into: &output)
            }
            return
        }
        OpenSSLErrorQueue.clear()
        // 0 (sent, the peer's not yet received) and 1 (both done) both mean success; a failure leaves
        // nothing to recover either.
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
    }
}
