internal import MultipeerIO

/// An invitation a peer sent to an advertiser: who (its identity proven by TLS, or a plaintext claim), the
/// application's context data (at most ``maximumContextLength`` bytes, refused before it reaches anyone
/// when longer), the inviter's deadline, and the connection's verification code.
///
/// Answer with ``accept(into:)`` or ``decline(reason:)`` before the deadline; after it the invitation expires on
/// both sides (the inviter sees `timedOut`) and answering throws.
public final class Invitation: Sendable, CustomStringConvertible {
    /// The longest context data an invitation carries: 8 KiB.
    public static let maximumContextLength = SessionWire.Limits.context

    /// Who invites.
    public let peer: Peer
    /// The inviter's context data (untrusted input, as Apple warns).
    public let context: [UInt8]
    /// How long the inviter waits, from when the invitation arrived.
    public let timeout: Duration
    /// When the invitation expires, on this process's clock.
    public let deadline: ContinuousClock.Instant
    /// The connection's verification code (nil on plaintext), for people to compare before accepting.
    public let verificationCode: VerificationCode?
    /// The service type the inviter found us under.
    public let serviceType: String
    /// The inviting session's encryption preference, as it says.
    public let inviterEncryption: EncryptionPreference

    let link: Link
    let id: [UInt8]
    /// The identity and security of the advertiser's listener the invitation came through.
    let listener: PeerNetwork.ListenerKey
    private let machine = Lock(InviteeStateMachine())
    private let onRelease: @Sendable () -> Void
    private let timer = Lock<SessionTimer?>(nil)

    init(
        link: Link, id: [UInt8], context: [UInt8], timeout: Duration, serviceType: String,
        listener: PeerNetwork.ListenerKey, inviterEncryption: EncryptionPreference,
        onRelease: @escaping @Sendable () -> Void
    ) {
        self.inviterEncryption = inviterEncryption
        self.link = link
        self.listener = listener
        self.id = id
        peer = link.peer
        self.context = context
        self.timeout = timeout
        deadline = .now + timeout
        verificationCode = link.connection.verificationCode
        self.serviceType = serviceType
        self.onRelease = onRelease
    }

    /// Sets the deadline's timer, cancelled when the invitation is answered or closed first.
    func attach(_ timer: SessionTimer) {
        self.timer.withLock { $0 = timer }
        if !isOpen { timer.cancel() }
    }

    /// Whether the invitation can still be answered.
    public var isOpen: Bool { machine.withLock { $0.isOpen } }

    /// Why the inviter withdrew the invitation, once it did (even while it was being accepted).
    var withdrawn: String? { machine.withLock { $0.withdrawn } }

    /// Whether the connection ended.
    var connectionEnded: Bool { machine.withLock { $0.connectionEnded } }

    /// The inviter's display name and context size.
    public var description: String { "invitation from \(peer) with \(context.count) bytes of context" }

    /// Accepts: the inviter joins `session`, and the two see each other connected.
    /// - Throws: ``SessionError``: `invitationClosed` when already answered, expired or withdrawn; `refused`
    ///   when the session's security rules exclude the inviter's connection (plaintext into a `.required` session,
    ///   no group proof into a session with a group secret, a plaintext claim to be a member that proved its key)
    ///   or its verification hook refuses; `sessionFull`.
    public func accept(into session: Session) async throws(SessionError) {
        try claim(accepting: true)
        defer { machine.withLock { $0.answered() } }
        try await session.acceptInvitation(self)
    }

    /// Declines; the inviter sees `declined` with `reason`.
    /// - Parameter reason: Why, for the inviter (at most 512 bytes are sent).
    public func decline(reason: String = "") {
        perform(machine.withLock { $0.decline(reason: reason) })
    }

    /// Marks the invitation answered, or throws why it cannot be.
    func claim(accepting: Bool) throws(SessionError) {
        switch machine.withLock({ $0.claim(accepting: accepting) }) {
        case .success(let actions): perform(actions)
        case .failure(.alreadyAnswered):
            throw SessionError(.invitationClosed, "the invitation from \(peer) was already answered")
        case .failure(.closed(let reason)):
            throw SessionError(.invitationClosed, "the invitation from \(peer) \(reason)")
        }
    }

    /// Feeds an event to the invitation's state machine and performs what it says.
    func handle(_ event: (inout InviteeStateMachine) -> [InviteeStateMachine.Action]) {
        perform(machine.withLock { event(&$0) })
    }

    /// A control message or the connection's end, before the invitation is answered.
    func handle(_ event: Link.Event) {
        switch event {
        case .message(.inviteCancel(_, let reason)):
            link.withdrawnReason = "the inviter withdrew the invitation: \(reason)"
            handle { $0.withdrawnByInviter(reason) }
        case .message(.leave):
            // The inviter left its session before the answer: the same as withdrawing the invitation.
            link.withdrawnReason = "left"
            handle { $0.inviterLeft() }
        case .message:
            handle { $0.unexpectedMessage() }
        case .closed(let reason):
            handle { $0.connectionClosed(reason) }
        }
    }

    private func perform(_ actions: [InviteeStateMachine.Action]) {
        for action in actions {
            switch action {
            case .answer(let answer, let reason): link.send(.inviteAnswer(id: id, answer: answer, reason: reason))
            case .closeLink(let reason): link.close(reason)
            case .release:
                timer.withLock { $0 }?.cancel()
                onRelease()
            }
        }
    }
}
