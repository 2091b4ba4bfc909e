/// How an invitation ended, as the inviter and its session see it.
public enum InvitationOutcome: Sendable, Hashable, CustomStringConvertible {
    /// The peer accepted and is connected to the session (also when a crossing invitation or an introduction
    /// linked the two first).
    case accepted
    /// The peer's application declined, with the reason it gave (empty when it gave none).
    case declined(reason: String)
    /// Nobody answered before the deadline; the invitation was withdrawn on both sides.
    case timedOut
    /// No address of the peer could be reached; the error lists every attempt's failure.
    case unreachable(ConnectionError)
    /// A security rule or a limit refused the link: an identity mismatch, a group secret, encryption
    /// preferences that exclude each other, the verification hook, a full session, too many invitations.
    case refused(reason: String)

    /// A short word for the outcome, as `multipeer chat` prints it.
    public var name: String {
        switch self {
        case .accepted: "accepted"
        case .declined: "declined"
        case .timedOut: "timed out"
        case .unreachable: "unreachable"
        case .refused: "refused"
        }
    }

    /// The outcome with its reason.
    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .declined(let reason): reason.isEmpty ? "declined" : "declined: \(reason)"
        case .timedOut: "timed out"
        case .unreachable(let error): "unreachable: \(error.reason)"
        case .refused(let reason): "refused: \(reason)"
        }
    }
}
