/// Why a TURN relay did not give or keep what was asked.
public struct RelayError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: Sendable, Hashable {
        /// The relay settings cannot work (a malformed address, no password).
        case invalidConfiguration
        /// The relay could not be reached, or stopped answering.
        case unreachable
        /// The relay answered with an error (RFC 8656: 401 wrong credentials, 403 forbidden, 437 allocation
        /// mismatch, 441 wrong credentials, 446 connection already exists, 447 connection timeout or failure,
        /// 486 allocation quota reached, 508 insufficient capacity, ...).
        case refused(status: Int)
        /// The allocation ended: the relay closed the control connection or refused a refresh.
        case allocationLost
        /// The relay's answer was malformed or did not verify.
        case badResponse
    }

    /// What kind of failure.
    public var code: Code
    /// What happened, in words.
    public var reason: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: What happened, in words.
    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { reason }
}
