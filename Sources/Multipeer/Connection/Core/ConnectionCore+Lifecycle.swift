internal import MultipeerIO

/// Timers (handshake deadline, keepalive, silence, close deadline) and the ways a connection ends.
extension ConnectionCore {
    // MARK: - Timers

    /// The next time ``tick(now:)`` has work to do.
    var nextDeadline: IOInstant? {
        switch phase {
        case .preamble, .handshake, .hello, .confirming:
            return handshakeDeadline
        case .established, .closing:
            let deadline = keepalive.nextDeadline
            guard let closeDeadline = ending.deadline else { return deadline }
            return min(deadline, closeDeadline)
        case .closed:
            return nil
        }
    }

    /// Runs the timers due at `now`: the handshake deadline, keepalive pings, the silence timeout and the
    /// graceful-close timeout.
    func tick(now: IOInstant) {
        switch phase {
        case .preamble, .handshake, .hello, .confirming:
            if now >= handshakeDeadline { fail(.handshakeTimedOut(configuration.handshakeTimeout, phase: phase)) }
        case .established, .closing:
            if keepalive.isSilent(at: now) {
                fail(.peerWentSilent(configuration.silenceTimeout), notifyPeer: false)
                return
            }
            if let deadline = ending.deadline, now >= deadline {
                finish(ending.reason ?? .closedLocally("closed by this side"))
                return
            }
            if now >= keepalive.pingDue { sendPing(now: now) }
        case .closed:
            break
        }
    }

    /// Sends a ping now; its pong reports the round-trip time.
    /// - Returns: The ping's token, or nil when the connection cannot send one.
    @discardableResult
    func sendPing(now: IOInstant) -> UInt64? {
        guard phase == .established || (phase == .closing && !ending.goodbyeSent) else { return nil }
        let (token, abandoned) = keepalive.startPing(at: now)
        if let abandoned { events.append(.pingAbandoned(token: abandoned)) }
        do {
            try enqueueControl(.ping(token: token))
        } catch {
            fail(error)
            return nil
        }
        return token
    }

    /// The most recent round-trip time measured by a ping.
    var lastRoundTrip: Duration? { keepalive.lastRoundTrip }

    // MARK: - Failure and close

    /// Ends the connection with `error`; tells the peer why with an error frame when the secure channel is up.
    func fail(_ error: ConnectionError, notifyPeer: Bool = true) {
        guard phase != .closed else { return }
        if notifyPeer, let record, phase != .preamble && phase != .handshake, let code = WireErrorCode(error.code) {
            sealFinalFrame(.error(code: code.rawValue, text: validUTF8Prefix(error.reason)), into: record)
        }
        finish(error)
    }

    /// The longest prefix of `text`, in whole characters, that fits a goodbye or error frame's text.
    func validUTF8Prefix(_ text: String) -> String {
        var result = ""
        var length = 0
        for character in text {
            length += character.utf8.count
            if length > configuration.frameLimits.maximumTextLength { break }
            result.append(character)
        }
        return result
    }

    /// Seals `frame` straight into the record layer, ahead of anything still queued, and ends this side's output
    /// (TLS close_notify): the last frame of a connection that is ending now.
    func sealFinalFrame(_ frame: Frame, into record: (any RecordLayer)?) {
        guard let record else { return }
        var bytes: [UInt8] = []
        guard (try? encoder.encode(frame, into: &bytes)) != nil else { return }
        try? record.seal(bytes)
        record.closeOutput()
    }

    /// Marks the connection closed and reports it once. An acceptor that ends while it waits for the dialer's
    /// code nonce (for any reason but its own close) records that it did: a listener limits those.
    func finish(_ error: ConnectionError) {
        guard phase != .closed else { return }
        var error = error
        if phase == .confirming && error.code != .closedLocally {
            endedWhileConfirming = true
            if error.code != .protocolViolation { error = .verificationAbandoned(after: error) }
        }
        ending.reason = error
        phase = .closed
        finished = true
        events.append(.closed(error))
    }

    /// Starts a graceful close: queued data is sent, then a goodbye; the connection ends when the peer
    /// answers or after ``ConnectionConfiguration/closeTimeout``.
    func close(now: IOInstant, code: UInt32 = 0, text: String = "closed", holdGoodbye: @escaping () -> Bool = { false })
    {
        switch phase {
        case .closed, .closing:
            return
        case .preamble, .handshake, .hello, .confirming:
            finish(.closedLocally("closed by this side before the handshake finished"))
        case .established:
            ending.request(
                code: code, text: text, now: now, timeout: configuration.closeTimeout, holdGoodbye: holdGoodbye)
            phase = .closing
        }
    }
}

extension WireErrorCode {
    /// The code an `error` frame carries for a failure this side found, or nil for failures the peer is not
    /// told about (timeouts, local closes, socket errors).
    init?(_ code: ConnectionError.Code) {
        switch code {
        case .protocolViolation, .notAPeer: self = .protocolViolation
        case .flowControlViolation: self = .flowControlViolation
        case .groupSecretMismatch: self = .groupSecretMismatch
        case .identityMismatch: self = .identityMismatch
        case .unsupportedVersion: self = .unsupportedVersion
        case .internalFailure: self = .internalFailure
        case .resourceLimit: self = .resourceLimit
        default: return nil
        }
    }
}
