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
/// 2. Export what needs the TLS exporter (``exportKeyingMaterial(label:context:length:)``), then
///    ``releaseHandshakeState()`` so OpenSSL's copies of the session's secrets are freed.
/// 3. Then ``encrypt(_:)`` and ``decrypt(into:maximum:)``; after either, send ``takeCiphertext()`` (a
///    decrypt can produce output too, when the peer asks for a key update).
/// 4. ``sendCloseNotify()`` to end gracefully.
///
/// OpenSSL runs the handshake (``TLSHandshake``, which checks the peer's certificate); from its end on, this
/// package's record layer (``TLSRecordProtection``) protects every record, in both directions.
///
/// After a failure every operation throws the same error again; the session cannot recover and the
/// connection should be closed after sending what ``takeCiphertext()`` still holds (usually an alert).
///
/// Not `Sendable`: it belongs to one thread.
final class TLSSession {
    /// Which end of the connection this is.
    let role: TLSRole
    /// The identity the peer must prove, or nil to accept any identity.
    let expectedPeer: PeerFingerprint?
    /// OpenSSL's part: the handshake, then the exporter; nil once released (``releaseHandshakeState()``).
    private(set) var handshake: TLSHandshake?
    /// The ciphertext in both directions: OpenSSL's through its BIO during the handshake, ours afterwards.
    private let buffers: CiphertextBuffers

    /// Whether the handshake has completed on this side (and the peer's certificate passed every check).
    private(set) var isHandshakeComplete = false
    /// The peer's identity: the SHA-256 of its certificate's Ed25519 public key. Set when the handshake
    /// completes; nil before.
    private(set) var peerFingerprint: PeerFingerprint?
    /// The negotiated cipher suite's IANA name, e.g. `TLS_AES_128_GCM_SHA256`; "" before the handshake.
    private(set) var negotiatedCipherSuite = ""
    /// The negotiated protocol version, `TLSv1.3`; "" before the handshake.
    private(set) var negotiatedProtocol = ""
    /// The error that ended the session, thrown again by every later call.
    private var failure: ConnectionError?
    /// Whether the peer's close_notify has been read.
    private var closeNotifyReceived = false
    /// Whether this side has sent close_notify.
    private var closeNotifySent = false
    /// Whether any application data has been decrypted; see ``decryptionFailure(detail:)``.
    private var receivedApplicationData = false

    /// This package's record layer, from the end of the handshake.
    private var protection: TLSRecordProtection?
    /// A decrypted record not yet handed out in full (only when a caller asks for less than a record).
    private var pendingPlaintext: [UInt8] = []
    private var pendingPlaintextOffset = 0

    /// The alerts of the record phase (the handshake's are in its errors), for error messages.
    private var alerts = TLSAlerts()

    /// A session over `context`, in its role, before any byte has been exchanged.
    ///
    /// - Parameters:
    ///   - context: The configuration, shared by many sessions.
    ///   - expectedPeer: The identity the peer must prove: for the client, the fingerprint discovery
    ///     advertised. nil accepts any Ed25519 identity (the server's usual case).
    /// - Throws: ``ConnectionError`` with code `.internalFailure` if OpenSSL cannot allocate the session.
    init(context: TLSContext, expectedPeer: PeerFingerprint?) throws(ConnectionError) {
        let buffers = CiphertextBuffers()
        handshake = try TLSHandshake(context: context, expectedPeer: expectedPeer, buffers: buffers)
        self.buffers = buffers
        role = context.role
        self.expectedPeer = expectedPeer
    }

    /// Frees OpenSSL's state for this connection: the `SSL` with its BIO, and with them OpenSSL's copies of the
    /// handshake, traffic, resumption and exporter secrets. The record layer keeps only the current traffic
    /// keys of its own, so data, key updates (ours and the peer's) and close_notify go on as before; what needs
    /// OpenSSL afterwards fails clearly: ``exportKeyingMaterial(label:context:length:)``, and a handshake not yet
    /// complete (which this ends). Idempotent.
    func releaseHandshakeState() {
        handshake = nil
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

    /// Whether ``receivedCiphertext(_:decryptingInto:)`` would decrypt (the handshake is complete, the session is
    /// open, and no record is half handed out), so the caller can lend its output buffer.
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

    /// The number of received ciphertext bytes not read yet (during the handshake OpenSSL reads a record when it
    /// is asked for data, not before; afterwards a record is opened once it is whole).
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
    ///   the alert; `.internalFailure` if OpenSSL wrote records our record layer cannot follow
    ///   (``TLSHandshake/handOver()``) or the handshake state was released before it completed.
    func advanceHandshake() throws(ConnectionError) -> Bool {
        if let failure { throw failure }
        if isHandshakeComplete { return true }
        guard let handshake else {
            throw fail(
                ConnectionError(
                    code: .internalFailure,
                    reason: "the TLS handshake state was released before the handshake completed"))
        }
        do throws(ConnectionError) {
            guard try handshake.advance() else { return false }
            protection = try handshake.handOver()
        } catch {
            throw fail(error)
        }
        peerFingerprint = handshake.peerFingerprint
        negotiatedCipherSuite = handshake.negotiatedCipherSuite
        negotiatedProtocol = handshake.negotiatedProtocol
        isHandshakeComplete = true
        return true
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
    ///   `.internalFailure` if the cipher fails.
    func encrypt(_ plaintext: UnsafeRawBufferPointer) throws(ConnectionError) {
        try checkUsable("encrypt")
        if closeNotifySent {
            throw ConnectionError(code: .closedLocally, reason: "encrypt after this side sent close_notify")
        }
        guard !plaintext.isEmpty, let protection else { return }
        do throws(ConnectionError) {
            try buffers.appendOutgoing { (output) throws(ConnectionError) in
                output.reserveCapacity(output.count + TLSRecordProtection.sealedLength(of: plaintext.count))
                try protection.seal(plaintext, contentType: TLSRecordProtection.applicationDataType, into: &output)
            }
        } catch {
            throw fail(error)
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
    ///   breaks the protocol (the reason and the alert sent); `.handshakeFailed` if, on the client, the
    ///   server's first post-handshake record is an alert (TLS 1.3 servers reject a client certificate only
    ///   after the client completed); `.internalFailure` if the handshake is not complete; the session's
    ///   earlier error after a failure.
    func decrypt(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> TLSReadStatus {
        try checkUsable("decrypt")
        if closeNotifyReceived { return .closeNotify }
        guard let protection else { return .ok }
        return try decryptOwn(protection, into: &output, maximum: maximum)
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

    /// The error for a read that failed for `detail`: a handshake failure if this client has had no data yet
    /// and the server sent an alert (TLS 1.3 servers judge the client's certificate after the client is done).
    private func decryptionFailure(detail: String) -> ConnectionError {
        if role == .client, !receivedApplicationData, alerts.received != nil {
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
        handshake?.wipeTrafficSecrets()
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
    /// - Throws: ``ConnectionError`` with code `.internalFailure` before the handshake completes, after
    ///   ``releaseHandshakeState()``, for a length below 1, or if OpenSSL refuses (for example a length beyond
    ///   HKDF's limit).
    func exportKeyingMaterial(label: String, context: [UInt8], length: Int) throws(ConnectionError) -> [UInt8] {
        try checkUsable("exporting keying material")
        guard let handshake else {
            throw ConnectionError(
                code: .internalFailure,
                reason: "exporting keying material for '\(label)' after the TLS handshake state was released: "
                    + "OpenSSL's exporter secret is gone; export what a connection needs before releasing it")
        }
        return try handshake.exportKeyingMaterial(label: label, context: context, length: length)
    }

    // MARK: Closing

    /// Sends close_notify (through ``takeCiphertext()``): this side will send nothing more. Does nothing before
    /// the handshake completes, after a failure, or a second time; the connection is then simply closed.
    func sendCloseNotify() {
        guard failure == nil, isHandshakeComplete, !closeNotifySent else { return }
        closeNotifySent = true
        // A warning-level close_notify alert, as SSL_shutdown would send.
        try? buffers.appendOutgoing { (output) throws(ConnectionError) in
            try protection?.sealAlert(level: 1, description: 0, into: &output)
        }
    }
}
