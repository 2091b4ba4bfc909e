public import Foundation
internal import Logging
internal import MultipeerIO
internal import Synchronization

/// A group of peers that all talk to each other: Apple's `MCSession`, as a full mesh with reasons.
///
/// Peers join by invitation (``PeerBrowser/invite(_:into:context:timeout:)`` and
/// ``Invitation/accept(into:)``), with connection data (``connect(_:connectionData:timeout:)``), or through an
/// introduction: when one joins a session that has members, whichever side invited, the members are introduced and
/// connect to it directly (the lower identity dials), proving membership with a secret of the session bound to
/// each connection. ``events`` reports every peer's state with a reason; ``messages`` delivers what members send,
/// holding the senders back when the application reads slowly.
///
/// The rules live in state machines (``MeshStateMachine`` for membership, ``InviterStateMachine`` and
/// ``InviteeStateMachine`` for invitations, ``ReliabilityStateMachine`` for numbered messages); this actor feeds
/// them the links' events with its event loop's time and performs what they decide. Messages do not pass through
/// the actor: ``send(_:to:mode:)`` writes in place on the member's link.
public actor Session {
    /// This side's identity.
    public nonisolated let identity: PeerIdentity
    /// This side as a peer.
    public nonisolated let localPeer: Peer
    /// The settings.
    public nonisolated let configuration: SessionConfiguration
    /// The network the session uses.
    public nonisolated let network: PeerNetwork
    /// The network's logger, for sessions.
    nonisolated let logger: Logger
    /// Peer state changes and incoming streams, in order; ends when the session disconnects. At most
    /// ``SessionConfiguration/eventBufferLimit`` wait unread; later ones are dropped and counted in
    /// ``droppedEvents``.
    public nonisolated let events: AsyncStream<SessionEvent>

    nonisolated let connection: ConnectionConfiguration
    /// The resource transfers, both ways.
    nonisolated let resources: ResourceCenter
    nonisolated let eventSink: AsyncStream<SessionEvent>.Continuation
    nonisolated let inbox: SessionInbox
    nonisolated let dropped = DropCounter()
    /// Every member's and reconnecting peer's conversation, for the send path (which does not enter the actor).
    nonisolated let conversations = ConversationTable()
    let listenPort: UInt16
    /// The membership rules.
    var mesh: MeshStateMachine
    /// The links the mesh knows, by token.
    var links: [Int: Link] = [:]
    /// This side's invitations under way, by waiter: the inviter's state machine, its link once dialed, and who
    /// waits for the outcome.
    var outgoing: [Int: OutgoingInvitation] = [:]
    /// Who waits for an invitation's final outcome (``MeshStateMachine/Action/finishInvitation(waiter:_:)``).
    var outcomeWaiters: [Int: CheckedContinuation<InvitationOutcome, Never>] = [:]
    var nextWaiter = 0
    /// Connection tickets this session issued (``connectionData(for:)``).
    var tickets = ConnectionTickets()
    /// Peers this side waits for after ``connect(_:connectionData:timeout:)`` (the lower fingerprint dials).
    /// Each wait has an id, so a late timer or cancellation of an ended wait cannot end a newer one.
    var directWaiters:
        [PeerFingerprint: (id: Int, continuation: CheckedContinuation<InvitationOutcome, Never>, timer: SessionTimer)] =
            [:]

    /// An invitation this side sends.
    struct OutgoingInvitation {
        var machine: InviterStateMachine
        let peer: Peer
        let serviceType: String
        let context: [UInt8]
        var connection: PeerConnection?
        var link: Link?
        var continuation: CheckedContinuation<InvitationOutcome, Never>?
        var dial: Task<Void, Never>?
    }

    /// Creates a session and starts the network's listener for its identity and security settings.
    /// - Parameters:
    ///   - identity: This side's identity.
    ///   - configuration: Security and limits.
    ///   - network: The process's network.
    /// - Throws: ``SessionError`` with `invalidParameter` for a configuration that breaks a rule, or
    ///   `unavailable` when the listener cannot start.
    public init(
        identity: PeerIdentity, configuration: SessionConfiguration = SessionConfiguration(), network: PeerNetwork
    ) async throws(SessionError) {
        try configuration.validate()
        self.identity = identity
        localPeer = Peer(identity: .proven(identity.fingerprint), displayName: identity.displayName)
        self.configuration = configuration
        self.network = network
        logger = network.configuration.logger.area(.session)
        connection = network.connectionConfiguration(
            identity: identity, encryption: configuration.encryption, groupSecret: configuration.groupSecret)
        (events, eventSink) = AsyncStream<SessionEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(configuration.eventBufferLimit))
        inbox = SessionInbox(
            messageLimit: configuration.receiveBufferMessages, byteLimit: configuration.receiveBufferBytes)
        var rules = MeshStateMachine.Configuration(
            maximumPeers: configuration.maximumPeers, encryption: configuration.encryption,
            requiresGroupProof: configuration.groupSecret != nil, reconnectGrace: configuration.reconnectGrace)
        rules.joinAnswerTimeout = connection.dialTimeout
        mesh = MeshStateMachine(
            local: identity.fingerprint, configuration: rules, sessionID: SecureRandom.bytes(SessionWire.idLength),
            secret: SecureRandom.bytes(SessionWire.secretLength))
        resources = ResourceCenter(
            directory: configuration.resourceDirectory, maximumSize: configuration.maximumResourceSize,
            logger: network.configuration.logger.area(.resources))
        listenPort = try await network.listenPort(for: connection)
        let sink = eventSink
        resources.attach(
            ResourceCenter.Hooks(
                control: { [weak self] fp, message in await self?.control(fp, message) ?? false },
                openStream: { [weak self] (fp: PeerFingerprint, name: String) throws(SessionError) -> PeerStream in
                    guard let self else { throw SessionError(.cancelled, "the session is gone") }
                    return try await self.openStream(named: name, toMember: fp)
                },
                emit: { sink.yield($0) }))
        await network.register(self)
    }

    /// The time on the event loop's clock (a manual clock in tests).
    var now: IOInstant { network.loop.clock.now() }

    /// How many links the session holds (tests check nothing is kept that the mesh let go).
    var linkCount: Int { links.count }

    /// The member link of a peer.
    func memberLink(_ fingerprint: PeerFingerprint) -> Link? { mesh.memberLink(of: fingerprint).flatMap { links[$0] } }

    /// Sends a control message on a member's link; false when it has none.
    private func control(_ fp: PeerFingerprint, _ message: SessionWire.Message) -> Bool {
        memberLink(fp)?.send(message) ?? false
    }

    private func openStream(named name: String, toMember fp: PeerFingerprint) async throws(SessionError) -> PeerStream {
        guard let link = memberLink(fp) else { throw SessionError(.notConnected, "the peer is not connected") }
        do {
            return try await link.connection.openStream(name: name)
        } catch {
            throw SessionError(.notConnected, "cannot open a stream: \(error.reason)", connectionError: error)
        }
    }

    /// Sends a resource to a member (Apple's `sendResource(at:withName:toPeer:)`): a file URL, streamed from
    /// disk, or an `http`/`https` URL, fetched first. The receiver saves it under a sanitized name in its
    /// resource folder after checking its SHA-256; a transfer cut by a dropped link resumes from what the
    /// receiver holds once the link is back.
    /// - Parameters:
    ///   - url: A file URL or an http(s) URL.
    ///   - name: The name the receiver is told (it sanitizes it).
    ///   - peer: A member.
    ///   - progress: A progress object for the transfer to report to (its total becomes the file's size), for
    ///     callers that must hand one out before the file is measured; by default the transfer makes its own.
    /// - Returns: The transfer: its `progress` (cancellable) and `finished()`.
    /// - Throws: ``SessionError``: `notConnected`, `invalidParameter` (not a regular file, another URL scheme),
    ///   `unavailable` (the file cannot be read, the download failed).
    public func sendResource(at url: URL, named name: String, to peer: Peer, progress: Progress? = nil)
        async throws(SessionError) -> ResourceTransfer
    {
        guard let link = memberLink(peer.claimedFingerprint) else { throw Self.notConnected(peer) }
        return try await resources.send(url: url, name: name, to: link.peer, progress: progress)
    }

    /// The outcome of the last invitation to `peer` that did not make it a member (declined, timed out,
    /// unreachable, refused), kept until it becomes one; nil otherwise. It is recorded before the
    /// `notConnected` event that reports it, so an event handler can ask.
    public func invitationOutcome(for peer: Peer) -> InvitationOutcome? { mesh.failure(of: peer.claimedFingerprint) }

    /// The members connected now.
    public var connectedPeers: [Peer] { mesh.members.map(\.0).sorted { $0.displayName < $1.displayName } }

    /// Events dropped because the application did not read ``events``.
    public nonisolated var droppedEvents: Int { dropped.value }

    /// Opens a byte stream to a member; the writer waits while the reader is slow.
    /// - Throws: ``SessionError`` with `notConnected` for a peer that is not a member or a link that ends,
    ///   `unavailable` when the link has no free channel.
    public func openStream(named name: String, to peer: Peer) async throws(SessionError) -> PeerStream {
        guard let link = memberLink(peer.claimedFingerprint) else { throw Self.notConnected(peer) }
        do {
            return try await link.connection.openStream(name: name)
        } catch {
            throw SessionError(
                error.code == .resourceLimit ? .unavailable : .notConnected,
                "cannot open a stream to \(peer.displayName): \(error.reason)", connectionError: error)
        }
    }

    // MARK: Leaving

    /// How long ``disconnect()`` waits for its members' links to close gracefully (the `leave` and the goodbye
    /// delivered), so a process that exits right after it is seen leaving, not lost.
    static let leaveWait: Duration = .seconds(2)

    /// Leaves the session: every member sees this peer `notConnected` with the reason `left`; ``events`` and
    /// ``messages`` end (after what is already queued). Returns once the members' links have closed gracefully
    /// (at most 2 s, or at once when the calling task is cancelled). Idempotent.
    public func disconnect() async {
        guard !mesh.isDisconnected else { return }
        let leaving = links.values.map(\.connection) + outgoing.values.compactMap(\.connection)
        perform(mesh.disconnect())
        for waiter in outgoing.keys.sorted() { performInviter(waiter) { $0.stop(.disconnected) } }
        resources.shutdown(reason: "the session was disconnected")
        for fp in Array(directWaiters.keys) { stopWaiting(for: fp, .refused(reason: "the session was disconnected")) }
        for (waiter, continuation) in outcomeWaiters {
            outcomeWaiters[waiter] = nil
            continuation.resume(returning: .refused(reason: "the session was disconnected"))
        }
        tickets = ConnectionTickets()
        for conversation in conversations.removeAll() {
            _ = conversation.fail(SessionError(.cancelled, "the session was disconnected"))
        }
        await network.unregister(self)
        inbox.finish()
        eventSink.finish()
        await Self.waitUntilClosed(leaving, within: Self.leaveWait, on: network.loop)
    }

    /// Waits until every connection has closed, at most `limit` on the loop's clock, or until the task is cancelled.
    static func waitUntilClosed(_ connections: [PeerConnection], within limit: Duration, on loop: EventLoop) async {
        let open = connections.filter { $0.closeReason == nil }
        guard !open.isEmpty else { return }
        let wait = AllClosed(count: open.count)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                guard wait.start(continuation) else { return }
                for connection in open {
                    Task {
                        _ = await connection.closed()
                        wait.closed()
                    }
                }
                _ = SessionTimer(after: limit, on: loop) { wait.giveUp() }
            }
        } onCancel: {
            wait.giveUp()
        }
    }

    /// A wait for several connections to close, given up at a deadline or on cancellation.
    private final class AllClosed: Sendable {
        private let state: Lock<(continuation: CheckedContinuation<Void, Never>?, finished: Bool, left: Int)>

        init(count: Int) { state = Lock((nil, false, count)) }

        /// Holds the waiter; false (and resumed) when the wait already ended.
        func start(_ continuation: CheckedContinuation<Void, Never>) -> Bool {
            let finished = state.withLock { state -> Bool in
                if !state.finished { state.continuation = continuation }
                return state.finished
            }
            if finished { continuation.resume() }
            return !finished
        }

        func closed() { end(last: false) }

        func giveUp() { end(last: true) }

        private func end(last: Bool) {
            let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if !last { state.left -= 1 }
                guard !state.finished, last || state.left == 0 else { return nil }
                state.finished = true
                defer { state.continuation = nil }
                return state.continuation
            }
            continuation?.resume()
        }
    }

    // MARK: The driver

    /// Performs what the mesh decided.
    func perform(_ actions: [MeshStateMachine.Action]) {
        for action in actions {
            switch action {
            case .report(let peer, let state, let reason):
                report(peer, state, reason)
            case .send(let token, let message):
                links[token]?.send(message)
            case .close(let token, let reason):
                // The mesh is done with it: what comes on it later (its end) needs no map entry.
                links.removeValue(forKey: token)?.close(reason)
            case .adopt(let token, let first):
                guard let link = links[token] else {
                    // Its link ended before it was adopted: there is no member to keep.
                    perform(mesh.linkClosed(token, reason: "the link ended", withdrawn: nil, now: now))
                    continue
                }
                adopt(link, first: first)
            case .watch(let token):
                links[token]?.setHandler { [weak self] link, event in
                    guard let self else { return link.close("the session is gone") }
                    await self.memberEvent(link, event)
                }
            case .endConversation(let peer, let reason):
                endConversation(peer, reason: reason)
            case .dial(let dial):
                startJoinDial(dial)
            case .sendJoin(let token, let session):
                guard let link = links[token] else { continue }
                link.send(
                    .join(
                        linkID: link.linkID, sessionID: session.id,
                        proof: SessionWire.joinProof(
                            secret: session.secret, binding: link.connection.sessionBinding, linkID: link.linkID)))
            case .verify(let token, let incoming):
                guard let link = links[token] else { continue }
                Task {
                    let decision = await self.verify(link.connection)
                    self.verified(link, incoming: incoming, decision: decision)
                }
            case .schedule(let timer, let delay):
                _ = SessionTimer(after: delay, on: network.loop) { [weak self] in
                    Task { await self?.timerFired(timer) }
                }
            case .finishInvitation(let waiter, let outcome):
                outcomeWaiters.removeValue(forKey: waiter)?.resume(returning: outcome)
            case .connected(let fp):
                tickets.withdraw(for: fp)
                if let waiter = directWaiters.removeValue(forKey: fp) {
                    waiter.timer.cancel()
                    perform(mesh.waitForDialEnded(fp, .accepted))
                    waiter.continuation.resume(returning: .accepted)
                }
            }
        }
    }

    private func timerFired(_ timer: MeshStateMachine.Timer) {
        perform(mesh.timerFired(timer, now: now))
    }

    private func verified(_ link: Link, incoming: Bool, decision: VerificationDecision) {
        if incoming {
            perform(mesh.joinVerified(facts(link), decision: decision, now: now))
        } else {
            perform(mesh.joinChecked(link.token, decision: decision))
        }
    }

    /// A link as the mesh sees it.
    func facts(_ link: Link) -> MeshStateMachine.LinkFacts {
        MeshStateMachine.LinkFacts(
            token: link.token, peer: link.peer, isDialer: link.isDialer, linkID: link.linkID,
            remoteAddress: link.connection.remoteAddress, isGroupMember: link.connection.peer.isGroupMember,
            isRelayed: link.connection.isRelayed)
    }

    /// Makes a link the member link for its peer: its conversation switches to it, its events and streams come
    /// here; it hears the answer that admitted the peer (if this side gave one), the session's secrets and where
    /// the conversation stands.
    private func adopt(_ link: Link, first: SessionWire.Message?) {
        let fp = link.fingerprint
        let conversation =
            conversations.get(fp)
            ?? conversations.make(
                fp, Conversation(byteLimit: configuration.replayBufferBytes, peerName: link.peer.displayName))
        link.generation = conversation.switchLink(to: link)
        link.setHandler { [weak self] link, event in
            // Acknowledgements and receipts go straight to the conversation (they are the message path's, and a
            // replaced link's still count); everything else is the mesh's.
            switch event {
            case .message(.ack(let received)):
                if link.generation == conversation.generation { conversation.acknowledge(upTo: received) }
            case .message(.delivered(let epoch, let id)):
                conversation.receipt(id, epoch: epoch)
            default:
                guard let self else { return link.close("the session is gone") }
                await self.memberEvent(link, event)
            }
        }
        if let first { link.send(first) }
        link.send(.sessions(listenPort: listenPort, current: mesh.sessionID, secrets: mesh.secrets))
        link.send(
            .resume(epoch: conversation.myEpoch, peerEpoch: conversation.peerEpoch, received: conversation.received))
        // Incoming streams right away; numbered messages once the peer's resume arrived (startConversation).
        let sink = eventSink
        let dropped = dropped
        let peer = link.peer
        let connection = link.connection
        let resources = resources
        Task { [dropped] in
            for await stream in connection.incomingStreams {
                if stream.name.hasPrefix(ResourceCenter.streamPrefix) {
                    resources.incomingStream(stream, from: peer)
                    continue
                }
                if case .dropped = sink.yield(.stream(stream, from: peer)) {
                    dropped.add()
                    stream.reset()
                }
            }
        }
    }

    /// A member link's events (and those of a link that was replaced and is still open).
    private func memberEvent(_ link: Link, _ event: Link.Event) {
        let fp = link.fingerprint
        let token = link.token
        guard mesh.isMemberLink(token) else {
            // A replaced link: a leave on it still counts (its acknowledgements and receipts went to the
            // conversation already).
            switch event {
            case .message(.leave(let reason)):
                perform(mesh.left(token, reason: .left(reason)))
            case .closed(let reason):
                links[token] = nil
                perform(mesh.linkClosed(token, reason: reason, withdrawn: link.withdrawnReason, now: now))
            default:
                break
            }
            return
        }
        switch event {
        case .message(.sessions(let port, let current, let received)):
            perform(
                mesh.sessionsReceived(
                    token, listenPort: port, current: current, secrets: received, ownListenPort: listenPort))
        case .message(.resume(let epoch, let peerEpoch, let received)):
            guard let conversation = conversations.get(fp), !link.startedConversation else {
                return link.close("a second resume on one link")
            }
            link.startedConversation = true
            logger.debug(
                """
                '\(link.peer.displayName)' resumes: it has our messages up to \(received), we have its up to \
                \(conversation.received)
                """, metadata: link.peer.logMetadata)
            let resumed = conversation.resume(
                epoch: epoch, knowsOurEpoch: peerEpoch == conversation.myEpoch, peerReceived: received,
                generation: link.generation)
            if !resumed.lost.isEmpty {
                let reason = SessionReason(
                    .peerRestarted, "\(Conversation.startedAnew(link.peer.displayName)) and lost them")
                logger.warning(
                    "'\(link.peer.displayName)': \(resumed.lost.count) messages undelivered: \(reason)",
                    metadata: link.peer.logMetadata)
                _ = eventSink.yield(.undelivered(link.peer, resumed.lost, reason: reason))
            }
            if resumed.newIncarnation {
                // What it was sending us died with it: nobody will ever finish those files.
                resources.peerRestarted(
                    fp, reason: "\(Conversation.startedAnew(link.peer.displayName)), and its transfer ended with it")
            }
            startConversation(link, conversation)
            resources.linkResumed(fp)
        case .message(.members(let list)):
            perform(mesh.membersReceived(token, list, now: now))
        case .message(.leave(let reason)):
            perform(mesh.left(token, reason: .left(reason)))
        case .message(.inviteCancel(let id, let reason)) where link.linkID == id && !link.isDialer:
            // The inviter gave up while this side was accepting: it never took this side in, so there is nothing
            // to reconnect to.
            let why = "the inviter withdrew the invitation: \(reason)"
            link.withdrawnReason = why
            perform(mesh.left(token, reason: SessionReason(.invitationWithdrawn, why)))
        case .message(let message) where message.isResourceMessage:
            resources.handle(message, from: link.peer)
        case .message:
            link.close("unexpected control message from a member")
        case .closed(let reason):
            links[token] = nil
            conversations.get(fp)?.linkEnded(generation: link.generation)
            perform(mesh.linkClosed(token, reason: reason, withdrawn: link.withdrawnReason, now: now))
        }
    }

    /// A conversation ended: what it never confirmed is reported undelivered (unless this side left), transfers end.
    private func endConversation(_ peer: Peer, reason: SessionReason) {
        let fp = peer.claimedFingerprint
        resources.peerGone(fp, reason: "\(peer.displayName): \(reason)")
        guard let conversation = conversations.remove(fp) else { return }
        if reason.code == .thisSideLeft {
            _ = conversation.fail(SessionError(.cancelled, "the session was disconnected"))
            return
        }
        let lost = conversation.fail(SessionError(.notConnected, "\(peer.displayName): \(reason)"))
        if !lost.isEmpty {
            logger.warning(
                "'\(peer.displayName)': \(lost.count) messages undelivered: \(reason)", metadata: peer.logMetadata)
            _ = eventSink.yield(.undelivered(peer, lost, reason: reason))
        }
    }

    // MARK: Reports

    func report(_ peer: Peer, _ state: PeerState, _ reason: SessionReason) {
        logger.log(
            level: state == .reconnecting ? .warning : .info,
            "'\(peer.displayName)' \(peer.claimedFingerprint): \(state): \(reason)", metadata: peer.logMetadata)
        if case .dropped = eventSink.yield(.peerChanged(peer, state, reason: reason)) { dropped.add() }
    }

    static func notConnected(_ peer: Peer) -> SessionError {
        SessionError(.notConnected, "\(peer.displayName) is not connected to this session")
    }

    func verify(_ connection: PeerConnection) async -> VerificationDecision {
        guard let hook = configuration.verifyPeer else { return .accept }
        return await hook(
            PeerVerificationRequest(
                peer: Peer(connection.peer), verificationCode: connection.verificationCode,
                protection: connection.peer.protection))
    }

    // MARK: What the network's router and tests ask

    /// The session's current identifier (the lowest of the sessions merged into it).
    var currentSessionID: [UInt8] { mesh.sessionID }

    /// The current identifier and its secret.
    var currentSecret: ([UInt8], [UInt8]) { (mesh.sessionID, mesh.secrets[mesh.sessionID] ?? []) }

    /// Whether this session knows the secret of a session identifier (the router's question).
    func knowsSession(_ id: [UInt8]) -> Bool { !mesh.isDisconnected && mesh.secrets[id] != nil }

    /// Whether the peer is a member.
    func hasMember(_ fingerprint: PeerFingerprint) -> Bool { mesh.isMember(fingerprint) }
}

extension SessionWire.Message {
    /// Whether the message belongs to the resource transfers.
    var isResourceMessage: Bool {
        switch self {
        case .resourceOffer, .resourceProgress, .resourceResult, .resourceCancel, .resourceResume: true
        default: false
        }
    }
}

/// The conversations of a session's members, by fingerprint, for the tasks that send without entering the actor.
final class ConversationTable: Sendable {
    private let table = Lock<[PeerFingerprint: Conversation]>([:])

    func get(_ fingerprint: PeerFingerprint) -> Conversation? { table.withLock { $0[fingerprint] } }

    func make(_ fingerprint: PeerFingerprint, _ conversation: Conversation) -> Conversation {
        table.withLock { table in
            if let existing = table[fingerprint] { return existing }
            table[fingerprint] = conversation
            return conversation
        }
    }

    func remove(_ fingerprint: PeerFingerprint) -> Conversation? {
        table.withLock { $0.removeValue(forKey: fingerprint) }
    }

    func removeAll() -> [Conversation] {
        table.withLock { table in
            defer { table = [:] }
            return Array(table.values)
        }
    }
}

/// A counter any thread can bump.
final class DropCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
