/// Why a session operation failed, with the code Apple's `MCError` would give and a reason a person can act on.
public struct SessionError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Sendable, Hashable {
        /// The peer is not connected to the session (Apple's `notConnected`).
        case notConnected
        /// An argument breaks a rule (Apple's `invalidParameter`).
        case invalidParameter
        /// A deadline passed (Apple's `timedOut`).
        case timedOut
        /// The operation was cancelled or the session ended (Apple's `cancelled`).
        case cancelled
        /// A network resource could not be had (Apple's `unavailable`).
        case unavailable
        /// A security rule refused the peer: identity, group secret, encryption, the verification hook.
        case refused
        /// The session has ``SessionConfiguration/maximumPeers`` members.
        case sessionFull
        /// The invitation was already answered, expired or was cancelled by the inviter.
        case invitationClosed
    }

    /// The kind of failure.
    public let code: Code
    /// What happened and why, for people.
    public let reason: String
    /// The connection-layer error behind it, when there is one.
    public let connectionError: ConnectionError?

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: What happened and why.
    ///   - connectionError: The connection-layer error behind it.
    public init(_ code: Code, _ reason: String, connectionError: ConnectionError? = nil) {
        self.code = code
        self.reason = reason
        self.connectionError = connectionError
    }

    /// `code: reason`.
    public var description: String { "\(code): \(reason)" }
}
