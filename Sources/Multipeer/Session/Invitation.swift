internal import Synchronization

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
    private let state = Mutex<State>(.pending)
    private let onEnd: @Sendable () -> Void
    private let timer = Mutex<SessionTimer?>(nil)

    enum State: Equatable {
        case pending
        case answered
        case closed(String)
    }

    init(
        link: Link, id: [UInt8], context: [UInt8], timeout: Duration, serviceType: String,
        listener: PeerNetwork.ListenerKey, inviterEncryption: EncryptionPreference,
        onEnd: @escaping @Sendable () -> Void
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
        self.onEnd = onEnd
    }

    /// Sets the deadline's timer, cancelled when the invitation is answered or closed first.
    func attach(_ timer: SessionTimer) {
        self.timer.withLock { $0 = timer }
        if !isOpen { timer.cancel() }
    }

    /// Whether the invitation can still be answered.
    public var isOpen: Bool { state.withLock { $0 == .pending } }

    /// The inviter's display name and context size.
    public var description: String { "invitation from \(peer) with \(context.count) bytes of context" }

    /// Accepts: the inviter joins `session`, and the two see each other connected.
    /// - Throws: ``SessionError``: `invitationClosed` when already answered, expired or withdrawn; `refused`
    ///   when the session's security rules exclude the inviter's connection (plaintext into a `.required` session,
    ///   no group proof into a session with a group secret) or its verification hook refuses; `sessionFull`.
    public func accept(into session: Session) async throws(SessionError) {
        try claim()
        try await session.acceptInvitation(self)
    }

    /// Declines; the inviter sees `declined` with `reason`.
    /// - Parameter reason: Why, for the inviter (at most 512 bytes are sent).
    public func decline(reason: String = "") {
        guard (try? claim()) != nil else { return }
        link.send(.inviteAnswer(id: id, answer: .declined, reason: reason))
        link.close("invitation declined")
    }

    /// Marks the invitation answered, or throws why it cannot be.
    func claim() throws(SessionError) {
        let previous = state.withLock { state -> State in
            defer { if state == .pending { state = .answered } }
            return state
        }
        switch previous {
        case .pending:
            timer.withLock { $0 }?.cancel()
            onEnd()
        case .answered: throw SessionError(.invitationClosed, "the invitation from \(peer) was already answered")
        case .closed(let reason): throw SessionError(.invitationClosed, "the invitation from \(peer) \(reason)")
        }
    }

    /// Ends an unanswered invitation (deadline, withdrawal, lost connection); false if it was answered.
    @discardableResult
    func close(_ reason: String) -> Bool {
        let closed = state.withLock { state -> Bool in
            guard state == .pending else { return false }
            state = .closed(reason)
            return true
        }
        if closed {
            timer.withLock { $0 }?.cancel()
            onEnd()
        }
        return closed
    }
}
