// Apple's module re-exports Foundation: files that import only MultipeerConnectivity use `Data`, `NSObject`, `UUID`...
@_exported public import Foundation
internal import Multipeer

/// The fewest peers a session holds, the local peer included (Apple's value).
public let kMCSessionMinimumNumberOfPeers: Int = 2
/// The most peers a session holds by default, the local peer included: Apple's 8. Sessions here can be larger:
/// pass `maximumNumberOfPeers` to ``MCSession/init(peer:securityIdentity:encryptionPreference:maximumNumberOfPeers:)``.
public let kMCSessionMaximumNumberOfPeers: Int = 8

/// The error domain of ``MCError``.
public let MCErrorDomain: String = "MCErrorDomain"

/// A peer's state in a session, with Apple's raw values.
public enum MCSessionState: Int, Sendable, Hashable, CustomStringConvertible {
    /// Not (or no longer) in the session.
    case notConnected = 0
    /// Being invited or introduced.
    case connecting = 1
    /// A member.
    case connected = 2

    /// The case's name.
    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected: "connected"
        }
    }
}

/// How a message is sent, with Apple's raw values.
public enum MCSessionSendDataMode: Int, Sendable, Hashable {
    /// Delivered exactly once and in order, also across a brief outage of the link.
    case reliable = 0
    /// Sent at once as a datagram; may be lost or reordered.
    case unreliable = 1

    /// The native mode.
    var native: SendMode { self == .reliable ? .reliable : .unreliable }
}

/// Whether a session encrypts, with Apple's raw values; a connection is encrypted unless either side says
/// `.none`, and `.required` never talks to `.none`.
public enum MCEncryptionPreference: Int, Sendable, Hashable {
    /// Encrypt when the other side allows it.
    case optional = 0
    /// Always encrypt (TLS 1.3, identities proven).
    case required = 1
    /// Never encrypt (plaintext TCP; identities are only claimed).
    case none = 2

    var native: EncryptionPreference {
        switch self {
        case .optional: .optional
        case .required: .required
        case .none: .none
        }
    }
}

/// An error of the Multipeer Connectivity API, with Apple's codes and domain, and a sentence saying why
/// (`localizedDescription`), which Apple's errors rarely have.
public struct MCError: CustomNSError, Hashable, Sendable {
    /// Apple's error codes.
    public enum Code: Int, Sendable, Hashable {
        /// An unknown error.
        case unknown = 0
        /// A peer is not connected.
        case notConnected = 1
        /// A parameter is not valid.
        case invalidParameter = 2
        /// The operation is not supported (for example a URL that is neither a file nor http(s)).
        case unsupported = 3
        /// A connection attempt timed out.
        case timedOut = 4
        /// The operation was cancelled.
        case cancelled = 5
        /// Multipeer connectivity is unavailable.
        case unavailable = 6
    }

    /// The code.
    public let code: Code
    /// Why, in one sentence.
    public let reason: String

    /// An error with `code`; a `NSLocalizedDescriptionKey` string in `userInfo` becomes its reason.
    public init(_ code: Code, userInfo: [String: Any] = [:]) {
        self.code = code
        reason = userInfo[NSLocalizedDescriptionKey] as? String ?? "\(code)"
    }

    /// An error with `code` and a reason.
    public init(_ code: Code, reason: String) {
        self.code = code
        self.reason = reason
    }

    /// `MCErrorDomain`.
    public static var errorDomain: String { MCErrorDomain }
    /// The code's raw value.
    public var errorCode: Int { code.rawValue }
    /// The reason under `NSLocalizedDescriptionKey`.
    public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: reason] }
    /// The reason (also `localizedDescription`).
    public var userInfo: [String: Any] { errorUserInfo }

    /// ``Code/unknown``.
    public static var unknown: Code { .unknown }
    /// ``Code/notConnected``.
    public static var notConnected: Code { .notConnected }
    /// ``Code/invalidParameter``.
    public static var invalidParameter: Code { .invalidParameter }
    /// ``Code/unsupported``.
    public static var unsupported: Code { .unsupported }
    /// ``Code/timedOut``.
    public static var timedOut: Code { .timedOut }
    /// ``Code/cancelled``.
    public static var cancelled: Code { .cancelled }
    /// ``Code/unavailable``.
    public static var unavailable: Code { .unavailable }

    /// Errors are equal by code.
    public static func == (a: MCError, b: MCError) -> Bool { a.code == b.code }
    /// Hashes the code.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// The facade's error for a native session error.
    init(_ error: SessionError) {
        let code: Code =
            switch error.code {
            case .notConnected: .notConnected
            case .invalidParameter: .invalidParameter
            case .cancelled: .cancelled
            case .timedOut: .timedOut
            case .unavailable: .unavailable
            default: .unknown
            }
        self.init(code, reason: error.reason)
    }
}

/// Lets `catch MCError.notConnected` match, as with Apple's error structs.
public func ~= (code: MCError.Code, error: any Error) -> Bool {
    (error as? MCError)?.code == code
}

/// Why a peer went `.notConnected`, which Apple's API cannot tell (an addition: ask
/// ``MCSession/disconnectReason(for:)`` in `session(_:peer:didChange:)`).
public enum MCDisconnectReason: Sendable, Hashable, CustomStringConvertible {
    /// The invited peer's application declined, with the reason it gave (may be empty).
    case declined(String)
    /// The invitation was not answered in time.
    case timedOut
    /// No address of the peer could be reached; the reason lists the attempts.
    case unreachable(String)
    /// A security rule or a limit refused the peer: identities, encryption preferences that exclude each other,
    /// a group secret, the certificate handler, a full session.
    case security(String)
    /// The peer left, or the link was lost and not back within the reconnection grace, or another reason given.
    case disconnected(String)

    init(_ outcome: InvitationOutcome) {
        switch outcome {
        case .declined(let reason): self = .declined(reason)
        case .timedOut: self = .timedOut
        case .unreachable(let error): self = .unreachable(error.reason)
        case .refused(let reason): self = .security(reason)
        case .accepted: self = .disconnected("accepted")
        }
    }

    /// The reason in words.
    public var description: String {
        switch self {
        case .declined(let reason): reason.isEmpty ? "declined" : "declined: \(reason)"
        case .timedOut: "timed out"
        case .unreachable(let reason): "unreachable: \(reason)"
        case .security(let reason): "refused: \(reason)"
        case .disconnected(let reason): reason
        }
    }
}
