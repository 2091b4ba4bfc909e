internal import MultipeerIO
internal import Synchronization

/// One connection as the session layer uses it: a single reader of its control messages that hands each, in
/// order, to the current owner (the network's router, an invitation, then a session), and the link's
/// identifiers for the duplicate-link rule.
final class Link: Sendable {
    /// What the reader hands to the owner.
    enum Event: Sendable {
        case message(SessionWire.Message)
        /// The connection ended (or was refused for a malformed control message), and why.
        case closed(reason: String)
    }

    typealias Handler = @Sendable (Link, Event) async -> Void

    let connection: PeerConnection
    /// The link's handle in the session's state machines (unique in the process).
    let token: Int
    /// The peer as the session layer shows it.
    let peer: Peer
    /// Whether this side dialed the connection.
    let isDialer: Bool
    private let state: Lock<State>

    private struct State {
        var handler: Handler?
        var started = false
        var linkID: [UInt8] = []
        /// Why the connection ended, once the reader saw it end.
        var closedReason: String?
        var generation = 0
        var startedConversation = false
        var withdrawnReason: String?
    }

    private static let tokens = Atomic<Int>(0)

    init(connection: PeerConnection, isDialer: Bool, linkID: [UInt8] = []) {
        self.connection = connection
        token = Self.tokens.add(1, ordering: .relaxed).newValue
        peer = Peer(connection.peer)
        self.isDialer = isDialer
        state = Lock(State(linkID: linkID))
    }

    var fingerprint: PeerFingerprint { peer.claimedFingerprint }

    /// The identifier the dialer chose for this link (its invitation or join), for the duplicate-link rule.
    var linkID: [UInt8] {
        get { state.withLock { $0.linkID } }
        set { state.withLock { $0.linkID = newValue } }
    }

    /// Why the inviter withdrew the invitation this link carried (an `inviteCancel`, or it left its session),
    /// even while the invitee was accepting it, as the reason to report: such a link is never reconnected.
    var withdrawnReason: String? {
        get { state.withLock { $0.withdrawnReason } }
        set { state.withLock { $0.withdrawnReason = newValue } }
    }

    /// The conversation generation this link carries, once it is a member link.
    var generation: Int {
        get { state.withLock { $0.generation } }
        set { state.withLock { $0.generation = newValue } }
    }

    /// Whether the peer's `resume` arrived on this link (numbered messages flow from then on).
    var startedConversation: Bool {
        get { state.withLock { $0.startedConversation } }
        set { state.withLock { $0.startedConversation = newValue } }
    }

    /// The fingerprint of the side that dialed.
    func dialerFingerprint(local: PeerFingerprint) -> PeerFingerprint { isDialer ? local : fingerprint }

    /// Hands events to `handler` from now on; starts the reader the first time. A handler installed after the
    /// connection ended is told so at once, so no owner waits for an end that already happened.
    func setHandler(_ handler: @escaping Handler) {
        let (start, closed) = state.withLock { state -> (Bool, String?) in
            state.handler = handler
            defer { state.started = true }
            return (!state.started, state.started ? state.closedReason : nil)
        }
        if let closed {
            Task { await handler(self, .closed(reason: closed)) }
            return
        }
        guard start else { return }
        let connection = connection
        // On the connection's loop: a control message is handled where it was read (acknowledgements and receipts
        // entirely), and only the rest hops to its owner.
        Task(executorPreference: connection.eventLoop) { [self] in
            for await raw in connection.sessionMessages {
                let message: SessionWire.Message?
                do {
                    message = try SessionWire.decode(raw)
                } catch {
                    _ = await connection.close(code: 2, reason: "malformed session message: \(error)")
                    break
                }
                guard let message else { continue }
                await currentHandler()(self, .message(message))
            }
            let reason = Link.describe(await connection.closed())
            // Recorded together with the handler it goes to: a handler set later gets it from setHandler.
            let handler = state.withLock { state -> Handler in
                state.closedReason = reason
                return state.handler ?? Link.ignore
            }
            await handler(self, .closed(reason: reason))
        }
    }

    /// Whether the reader saw the connection end.
    var isClosed: Bool { state.withLock { $0.closedReason != nil } }

    private func currentHandler() -> Handler {
        state.withLock { $0.handler } ?? Link.ignore
    }

    private static let ignore: Handler = { _, _ in }

    /// Queues a control message; false when the connection is closing or closed.
    @discardableResult
    func send(_ message: SessionWire.Message) -> Bool {
        do {
            try connection.sendSessionMessage(SessionWire.encode(message))
            return true
        } catch {
            return false
        }
    }

    /// Closes gracefully with a reason the peer sees (after what is queued).
    func close(_ reason: String, code: UInt32 = 0) {
        let connection = connection
        Task { _ = await connection.close(code: code, reason: reason) }
    }

    /// A connection's end as a reason a person reads: the peer's own words for a graceful close.
    static func describe(_ error: ConnectionError) -> String {
        switch error.code {
        case .closedByPeer(_, let text): text
        default: "connection lost: \(error.reason)"
        }
    }
}
