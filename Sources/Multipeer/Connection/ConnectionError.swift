/// Why a connection could not be set up, or why it ended.
///
/// `code` says which kind of failure it was, for code to switch on; `reason` explains it to a person (with
/// OpenSSL's or the system's own text where they were involved); `file` and `line` say where in this library
/// the error was raised. Every way a connection can fail or end has its own code: nothing is reported as a bare
/// "not connected".
public struct ConnectionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Hashable, Sendable {
        /// The far side's certificate key is not the identity the dialer expected (from discovery).
        /// `actual` is nil when the far side presented no usable Ed25519 certificate.
        case identityMismatch(expected: PeerFingerprint, actual: PeerFingerprint?)
        /// The preamble, TLS handshake and hello exchange did not finish within `limit`. For one attempt of a
        /// dial to several addresses, `limit` is the dial's whole timeout, which passed before the attempt ended.
        case handshakeTimedOut(limit: Duration)
        /// The TLS handshake failed: a TLS alert, a protocol error, or a certificate OpenSSL refused.
        case handshakeFailed
        /// The peer does not know this side's group secret, or this side does not know the peer's.
        case groupSecretMismatch
        /// The two sides' encryption preferences exclude each other (`.required` against `.none`).
        case encryptionMismatch(local: EncryptionPreference, remote: EncryptionPreference)
        /// This side needs TLS for this connection, because it expects a particular peer (only TLS proves an
        /// identity) or has a group secret, and plaintext was offered or chosen.
        case plaintextRefused
        /// The dialer went away during the verification-code exchange, after it saw this side's nonce and before it
        /// revealed its own: a peer that crashed, or a man in the middle trying for a matching code. A listener
        /// counts these and limits them (``ConnectionConfiguration/maximumAbandonedVerificationsPerMinute``).
        case verificationAbandoned
        /// The peer speaks a protocol (or preamble) version this implementation does not.
        case unsupportedVersion(major: UInt8)
        /// The peer is not a swift-multipeer peer: its first bytes were not the protocol's preamble (or, dialing
        /// a discovered service, its TXT record is not a ``PeerAdvertisement``).
        case notAPeer
        /// The peer broke the wire protocol: a malformed frame, or a frame out of place.
        case protocolViolation
        /// The peer sent more than the credit it was given.
        case flowControlViolation
        /// The peer answered no ping for `limit`: it crashed, lost its link, or stopped reading.
        case peerWentSilent(limit: Duration)
        /// The peer closed the connection gracefully with a goodbye frame.
        case closedByPeer(code: UInt32, text: String)
        /// The peer reported an error frame and closed.
        case peerReportedError(code: UInt32, text: String)
        /// The TCP connection ended without a goodbye (reset, or closed mid-stream).
        case connectionLost
        /// The TCP connection could not be made or broke; `errno` is the system's error number.
        case socket(call: String, errno: Int32)
        /// The acceptor already has its maximum number of handshakes in progress (in all, or from this host).
        case tooManyPendingHandshakes
        /// The acceptor already has its maximum number of connections.
        case tooManyConnections
        /// A message is longer than the peer accepts (`limit`, from its hello); send it as a stream instead.
        case messageTooLarge(length: Int, limit: Int)
        /// `trySend` found `limit` bytes already waiting to be sent: the peer is behind.
        case sendBufferFull(limit: Int)
        /// The peer made this side reach one of its bounds (for example on queued session messages).
        case resourceLimit
        /// This side closed the connection.
        case closedLocally
        /// A configuration value breaks a rule (for example a group secret shorter than 32 bytes).
        case invalidConfiguration
        /// A local resource limit or an OpenSSL failure unrelated to the peer.
        case internalFailure
        /// No address of the peer led to a connection: ``ConnectionError/attempts`` says, address by address,
        /// what each attempt ran into. A dial in which some address reached a peer that refused it for security
        /// (wrong identity, group secret or encryption, plaintext refused) reports that refusal's code instead.
        case unreachable
    }

    /// The kind of failure.
    public let code: Code
    /// When a dial to several addresses failed: every attempt, in the order they started, with its address and
    /// why it failed. Empty for every other error.
    public var attempts: [ConnectionAttempt] = []
    /// A sentence explaining what failed and why, for people.
    public let reason: String
    /// The source file in this library that raised the error.
    public let file: String
    /// The line in `file` that raised the error.
    public let line: Int

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: A sentence explaining it.
    ///   - file: The source file raising the error.
    ///   - line: The line raising the error.
    public init(code: Code, reason: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    /// The code's case name (such as `identityMismatch`), for scripts and logs that match on the kind of
    /// failure.
    public var name: String { code.name }

    /// The reason, followed by where the error was raised.
    public var description: String {
        "ConnectionError.\(code): \(reason) (\(file):\(line))"
    }
}

extension ConnectionError.Code {
    /// The case name, without its values (such as `identityMismatch` or `closedByPeer`).
    public var name: String {
        switch self {
        case .identityMismatch: "identityMismatch"
        case .handshakeTimedOut: "handshakeTimedOut"
        case .handshakeFailed: "handshakeFailed"
        case .groupSecretMismatch: "groupSecretMismatch"
        case .encryptionMismatch: "encryptionMismatch"
        case .plaintextRefused: "plaintextRefused"
        case .verificationAbandoned: "verificationAbandoned"
        case .unsupportedVersion: "unsupportedVersion"
        case .notAPeer: "notAPeer"
        case .protocolViolation: "protocolViolation"
        case .flowControlViolation: "flowControlViolation"
        case .peerWentSilent: "peerWentSilent"
        case .closedByPeer: "closedByPeer"
        case .peerReportedError: "peerReportedError"
        case .connectionLost: "connectionLost"
        case .socket: "socket"
        case .tooManyPendingHandshakes: "tooManyPendingHandshakes"
        case .tooManyConnections: "tooManyConnections"
        case .messageTooLarge: "messageTooLarge"
        case .sendBufferFull: "sendBufferFull"
        case .resourceLimit: "resourceLimit"
        case .closedLocally: "closedLocally"
        case .invalidConfiguration: "invalidConfiguration"
        case .internalFailure: "internalFailure"
        case .unreachable: "unreachable"
        }
    }
}
