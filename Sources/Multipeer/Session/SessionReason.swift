/// Why a peer's state changed, or why messages were not delivered: a ``Code`` a program can switch on, and a
/// sentence for people (``description``) with the details (who introduced whom, the peer's own words, the
/// connection's error).
public struct SessionReason: Sendable, Hashable, CustomStringConvertible {
    /// The kind of reason.
    public enum Code: Sendable, Hashable {
        /// `connecting`: this side invites the peer.
        case inviting
        /// `connecting`: this side accepts the peer's invitation (the verification hook is asked).
        case acceptingInvitation
        /// `connecting`: a member introduced the peer and the two are linking.
        case introduced
        /// `connecting`: waiting for the peer to dial with this session's connection data.
        case waitingForConnection
        /// `connected`: the peer accepted this side's invitation (or connected with connection data).
        case acceptedInvitation
        /// `connected`: this side accepted the peer's invitation.
        case acceptedTheirInvitation
        /// `connected`: linked through an introduction.
        case joinedThroughIntroduction
        /// `connected`: the peer is back after an outage.
        case reconnected
        /// `reconnecting`: the link dropped without a goodbye; both sides redial for the reconnection grace.
        case linkLost
        /// `notConnected`: an invitation (or a connection with connection data) did not make the peer a member;
        /// the outcome says how.
        case invitationFailed(InvitationOutcome)
        /// `notConnected`: the peer left the session (the sentence has its words).
        case left
        /// `notConnected`: the inviter withdrew the invitation while this side was accepting it.
        case invitationWithdrawn
        /// `notConnected`: the peer was not back within the reconnection grace.
        case notBackInTime
        /// `notConnected`: the link ended and the peer is not waited for (no reconnection grace).
        case connectionLost
        /// `notConnected`: linking through an introduction failed (refused, unreachable, no answer).
        case joinFailed
        /// `notConnected`: this side's verification hook refused the peer.
        case refusedByVerificationHook
        /// `notConnected`: the session is full.
        case sessionFull
        /// `notConnected`: this side left the session.
        case thisSideLeft
        /// Messages undelivered: the peer is a new incarnation and never had them. It restarted, or it ended its side
        /// of the conversation (it gave up on this side after the reconnection grace) and began another.
        case peerRestarted
    }

    /// The kind of reason.
    public let code: Code
    /// What happened, for people.
    public let description: String

    /// Creates a reason.
    /// - Parameters:
    ///   - code: The kind of reason.
    ///   - description: The sentence for people.
    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }

    static let inviting = SessionReason(.inviting, "inviting")
    static let acceptingInvitation = SessionReason(.acceptingInvitation, "accepting an invitation")
    static let acceptedInvitation = SessionReason(.acceptedInvitation, "accepted the invitation")
    static let acceptedTheirInvitation = SessionReason(.acceptedTheirInvitation, "accepted an invitation")
    static let joinedThroughIntroduction = SessionReason(.joinedThroughIntroduction, "joined through an introduction")
    static let thisSideLeft = SessionReason(.thisSideLeft, "this side left the session")

    static func invitationFailed(_ outcome: InvitationOutcome) -> SessionReason {
        SessionReason(.invitationFailed(outcome), outcome.description)
    }

    static func left(_ words: String) -> SessionReason { SessionReason(.left, words.isEmpty ? "left" : words) }
}
