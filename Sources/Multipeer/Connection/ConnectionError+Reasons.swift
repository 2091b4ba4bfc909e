internal import MultipeerIO

/// Every failure the connection core reports, with its code and its sentence, in one place: the core names
/// what happened, this file says it to people.
extension ConnectionError {
    // MARK: Setup

    static func badPreamble(_ error: Preamble.DecodingError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        switch error {
        case .notAPeer:
            ConnectionError(
                code: .notAPeer, reason: "the far side's first bytes are not the swift-multipeer preamble",
                file: file, line: line)
        case .unsupportedVersion(let version):
            ConnectionError(
                code: .unsupportedVersion(major: version),
                reason: "the peer uses preamble version \(version); this side speaks \(Preamble.version)", file: file,
                line: line)
        case .malformed(let detail):
            ConnectionError(code: .protocolViolation, reason: "malformed preamble: \(detail)", file: file, line: line)
        }
    }

    static func encryptionMismatch(
        local: EncryptionPreference, remote: EncryptionPreference, isDialer: Bool, file: String = #fileID,
        line: Int = #line
    ) -> ConnectionError {
        let (dialer, acceptor) = isDialer ? (local, remote) : (remote, local)
        return ConnectionError(
            code: .encryptionMismatch(local: local, remote: remote),
            reason: "encryption preferences exclude each other: the dialer's is .\(dialer), the acceptor's is "
                + ".\(acceptor); .required and .none never connect", file: file, line: line)
    }

    static func plaintextRefused(
        peer: EncryptionPreference, isDialer: Bool, requirement: String, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .plaintextRefused,
            reason: "the \(isDialer ? "acceptor" : "dialer") allows only plaintext (its preference is .\(peer)), "
                + "and this side requires TLS for this connection because \(requirement)", file: file, line: line)
    }

    static func plaintextChosenAnyway(requirement: String, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .plaintextRefused,
            reason: "the acceptor chose plaintext although this side offered only TLS, because \(requirement); "
                + "a man in the middle rewrote the preamble, or the peer is faulty", file: file, line: line)
    }

    static func plaintextClaim(
        expected: PeerFingerprint, claimed: PeerFingerprint, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .plaintextRefused,
            reason: "expected peer \(expected), but the connection is plaintext and the far side only claims to be "
                + "\(claimed); only TLS proves an identity", file: file, line: line)
    }

    static func peerBusy(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .tooManyPendingHandshakes,
            reason: "the peer refused the connection: it has too many handshakes in progress (in all, or from this "
                + "host), or too many verification codes were abandoned there lately", file: file, line: line)
    }

    static func peerFull(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .tooManyConnections,
            reason: "the peer refused the connection: it already has as many connections as it accepts", file: file,
            line: line)
    }

    static func preambleVersionRefused(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .unsupportedVersion(major: Preamble.version),
            reason: "the peer does not speak preamble version \(Preamble.version)", file: file, line: line)
    }

    static func unexpectedOutcome(
        _ outcome: Preamble.Outcome, local: EncryptionPreference, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation,
            reason: "the acceptor chose \(outcome), which this side's preference .\(local) did not offer", file: file,
            line: line)
    }

    static func outOfPlace(
        _ type: FrameType, phase: ConnectionCore.Phase, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        let expected =
            switch phase {
            case .hello: "its hello"
            case .confirming: "its verification-code nonce"
            default: "nothing of the kind"
            }
        return ConnectionError(
            code: .protocolViolation,
            reason: phase.isSetup
                ? "the peer sent a \(type) frame where \(expected) was due"
                : "the peer sent a \(type) frame after the connection was set up", file: file, line: line)
    }

    static func badHelloFingerprint(length: Int, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer's hello has a \(length)-byte fingerprint", file: file,
            line: line)
    }

    static func badHelloDisplayName(_ problem: IdentityError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .protocolViolation, reason: "the peer's hello has a display name that breaks the rules: \(problem)",
            file: file, line: line)
    }

    static func helloContradictsCertificate(
        claimed: PeerFingerprint, proven: PeerFingerprint, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer's hello names \(claimed) but its certificate proves \(proven)",
            file: file, line: line)
    }

    static func helloWithoutMessageLimit(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer's hello does not say how long a message it accepts",
            file: file, line: line)
    }

    static func groupSecretWithoutTLS(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .plaintextRefused, reason: "a group secret requires TLS, and this connection is plaintext",
            file: file, line: line)
    }

    static func groupProofRefused(sent: Bool, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .groupSecretMismatch,
            reason: sent
                ? "the peer's group proof is wrong; it knows a different group secret"
                : "the peer sent no group proof; it does not know the group secret", file: file, line: line)
    }

    static func unexpectedGroupProof(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .groupSecretMismatch,
            reason: "the peer proves membership of a group, but this side has no group secret", file: file, line: line)
    }

    static func missingCodeField(_ field: String, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation,
            reason: "the peer's hello over TLS carries no verification-code \(field)", file: file, line: line)
    }

    static func codeRevealMismatch(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation,
            reason: "the peer's verification-code nonce does not match the commitment in its hello", file: file,
            line: line)
    }

    static func verificationAbandoned(after cause: ConnectionError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .verificationAbandoned,
            reason: "the dialer went away after it saw this side's verification-code nonce and before it revealed its "
                + "own (\(cause.reason)): a peer that crashed, or a man in the middle trying for a matching code",
            file: file, line: line)
    }

    static func handshakeTimedOut(
        _ limit: Duration, phase: ConnectionCore.Phase, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .handshakeTimedOut(limit: limit),
            reason: "the handshake did not finish within \(limit) (stuck in the \(phase) phase)", file: file,
            line: line)
    }

    // MARK: Frames

    static func badFrame(_ error: FrameDecodingError, file: String = #fileID, line: Int = #line) -> ConnectionError {
        if case .unsupportedVersion(let major, _) = error {
            return ConnectionError(
                code: .unsupportedVersion(major: major), reason: error.description, file: file, line: line)
        }
        return ConnectionError(
            code: .protocolViolation, reason: "the peer sent a bad frame: \(error)", file: file, line: line)
    }

    static func peerError(code: UInt32, text: String, file: String = #fileID, line: Int = #line) -> ConnectionError {
        if code == WireErrorCode.groupSecretMismatch.rawValue {
            return ConnectionError(
                code: .groupSecretMismatch, reason: "the peer refused the group proof: \(text)", file: file, line: line)
        }
        return ConnectionError(
            code: .peerReportedError(code: code, text: text), reason: "the peer reported error \(code): \(text)",
            file: file, line: line)
    }

    static func flowControl(_ error: FlowControlError, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(code: .flowControlViolation, reason: "\(error)", file: file, line: line)
    }

    static func sentBeforeOpen(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer sent on channel \(channel) before opening it", file: file,
            line: line)
    }

    static func sentAfterClose(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer sent on channel \(channel) after closing it", file: file,
            line: line)
    }

    static func wrongChannelKind(
        _ channel: UInt32, sent: Frame.ChannelKind, open: Frame.ChannelKind, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer sent \(sent) data on \(open) channel \(channel)", file: file,
            line: line)
    }

    static func notPeersChannel(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer opened channel \(channel), which is not its to open",
            file: file, line: line)
    }

    static func channelOpenRefused(_ error: FlowControlError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .protocolViolation, reason: "the peer opened a channel: \(error)", file: file, line: line)
    }

    static func closeOnUnwritable(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation, reason: "the peer closed channel \(channel), which it cannot send on",
            file: file, line: line)
    }

    static func messageChannelReset(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .protocolViolation,
            reason: "the peer reset message channel \(channel); messages cannot be refused one channel at a time",
            file: file, line: line)
    }

    static func announcedLimitExceeded(declared: UInt64, limit: Int, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .protocolViolation,
            reason: "the peer started a \(declared)-byte message; this side accepts at most \(limit) bytes, as its "
                + "hello announced", file: file, line: line)
    }

    static func badFragment(_ error: MessageReassemblyError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(code: .protocolViolation, reason: "bad message fragment: \(error)", file: file, line: line)
    }

    static func sessionQueueFull(messages: Int, bytes: Int, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .resourceLimit,
            reason: "the peer sent session messages faster than this side handles them (\(messages) messages or "
                + "\(bytes) bytes waiting at most)", file: file, line: line)
    }

    // MARK: Commands

    static func notEstablished(phase: ConnectionCore.Phase, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .closedLocally, reason: "the connection is \(phase), not established", file: file, line: line)
    }

    static func channelNumbersUsedUp(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .internalFailure, reason: "this connection has used up its channel numbers", file: file, line: line)
    }

    static func cannotOpenChannel(_ error: FlowControlError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(code: .internalFailure, reason: "cannot open a channel: \(error)", file: file, line: line)
    }

    static func messageTooLarge(length: Int, limit: Int, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .messageTooLarge(length: length, limit: limit),
            reason: "a \(length)-byte message is longer than the \(limit) bytes the peer accepts (its hello says so); "
                + "send larger data as a stream (openStream), which has no size limit", file: file, line: line)
    }

    static func sendBufferFull(limit: Int, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .sendBufferFull(limit: limit),
            reason: "the peer is behind: \(limit) bytes already wait to be sent; try again later, or use send, "
                + "which waits for room", file: file, line: line)
    }

    static func sessionMessageTooLarge(_ length: Int, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .invalidConfiguration,
            reason: "a session message body of \(length) bytes exceeds \(SessionMessage.maximumBodyLength)",
            file: file, line: line)
    }

    static func schedulerRefused(_ error: FrameSchedulerError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(code: .internalFailure, reason: "\(error)", file: file, line: line)
    }

    static func controlQueueFull(_ error: FrameSchedulerError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .resourceLimit, reason: "the peer made this side queue too many control frames: \(error)",
            file: file, line: line)
    }

    static func channelGone(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .closedLocally, reason: "channel \(channel) was reset or is finished", file: file, line: line)
    }

    static func channelFinished(_ channel: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .closedLocally, reason: "channel \(channel) was already finished by this side", file: file,
            line: line)
    }

    /// What the reader of a stream the peer reset learns (its unread bytes are dropped).
    static func streamResetByPeer(code: UInt32, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .peerReportedError(code: code, text: "stream reset"),
            reason: "the peer reset the stream (code \(code))", file: file, line: line)
    }

    /// What the reader and writers of a stream this side reset learn (its unread bytes are dropped).
    static func streamResetLocally(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(code: .closedLocally, reason: "the stream was reset by this side", file: file, line: line)
    }

    static func encodingFailed(_ error: FrameEncodingError, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(code: .internalFailure, reason: "could not encode a frame: \(error)", file: file, line: line)
    }

    static func streamDropped(file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .closedLocally, reason: "the application dropped the stream before reading all of it", file: file,
            line: line)
    }

    // MARK: Ends

    static func closedLocally(_ text: String, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(code: .closedLocally, reason: text, file: file, line: line)
    }

    static func closedByPeer(code: UInt32, text: String, file: String = #fileID, line: Int = #line)
        -> ConnectionError
    {
        ConnectionError(
            code: .closedByPeer(code: code, text: text),
            reason: "the peer closed the connection (goodbye \(code): \(text))", file: file, line: line)
    }

    static func connectionLost(
        duringPhase phase: ConnectionCore.Phase, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        let during = phase == .established ? "" : " during the \(phase) phase"
        return ConnectionError(
            code: .connectionLost, reason: "the peer closed the TCP connection without a goodbye\(during)",
            file: file, line: line)
    }

    static func socketFailed(
        _ error: SystemCallError, afterGoodbye: Bool, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        if error.errno == 104 /* ECONNRESET */ && !afterGoodbye {
            return ConnectionError(
                code: .connectionLost, reason: "the peer reset the TCP connection (\(error))", file: file, line: line)
        }
        return ConnectionError(
            code: .socket(call: error.call, errno: error.errno), reason: "\(error)", file: file, line: line)
    }

    static func peerWentSilent(_ limit: Duration, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .peerWentSilent(limit: limit),
            reason: "nothing arrived from the peer for \(limit), not even a pong: it crashed, lost its link, or "
                + "stopped running", file: file, line: line)
    }

    static func invalidConfiguration(_ reason: String, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(code: .invalidConfiguration, reason: reason, file: file, line: line)
    }
}
