public import Foundation
internal import MultipeerIO
internal import Synchronization

/// A group of peers that all talk to each other: Apple's `MCSession`, as a full mesh with reasons.
///
/// Peers join by invitation (``PeerBrowser/invite(_:into:context:timeout:)`` and
/// ``Invitation/accept(into:)``); when one joins a session that has members, the members are introduced and
/// connect to it directly (the lower identity dials), proving membership with a secret of the session bound
/// to each connection. ``events`` reports every peer's state with a reason; ``messages`` delivers what
/// members send, holding the senders back when the application reads slowly.
public actor Session {
    /// This side's identity.
    public nonisolated let identity: PeerIdentity
    /// This side as a peer.
    public nonisolated let localPeer: Peer
    /// The settings.
    public nonisolated let configuration: SessionConfiguration
    /// The network the session uses.
    public nonisolated let network: PeerNetwork
    /// Peer state changes and incoming streams, in order; ends when the session disconnects. At most
    /// ``SessionConfiguration/eventBufferLimit`` wait unread; later ones are dropped and counted in
    /// ``droppedEvents``.
    public nonisolated let events: AsyncStream<SessionEvent>

    nonisolated let connection: ConnectionConfiguration
    /// The resource transfers, both ways.
    nonisolated let resources: ResourceCenter
    private nonisolated let eventSink: AsyncStream<SessionEvent>.Continuation
    private nonisolated let inbox: SessionInbox
    private nonisolated let dropped = DropCounter()
    private let listenPort: UInt16
    private var currentID: [UInt8]
    private var secrets: [[UInt8]: [UInt8]]
    private var members: [PeerFingerprint: Link] = [:]
    private var joining: Set<PeerFingerprint> = []
    private var inviting: [PeerFingerprint: Int] = [:]
    private var known: [PeerFingerprint: SessionWire.Member] = [:]
    private var states: [PeerFingerprint: (peer: Peer, state: PeerState)] = [:]
    /// Invitations waiting for their answer, by invitation id: who waits, and the link (the invitee may have
    /// adopted it already: leaving says so on it).
    private var answers: [[UInt8]: (continuation: CheckedContinuation<InvitationOutcome, Never>, link: Link)] = [:]
    /// Acknowledged sends waiting for their receipt, by peer and message number.
    private var pendingAcks: [AckKey: CheckedContinuation<SessionError?, Never>] = [:]
    /// Receipts that came before their sender started waiting (the message was read at once).
    private var earlyReceipts: Set<AckKey> = []
    /// Messages queued by ``sendExpectingReceipt(_:to:)`` whose sender has not started waiting: their receipts
    /// are kept whenever they come (at most 65,536 such messages; beyond, only recent receipts are kept).
    private var expectingReceipts: Set<AckKey> = []
    /// What each member and reconnecting peer is owed and has sent: numbered messages across links.
    private var conversations: [PeerFingerprint: Conversation] = [:]
    /// The longest message each peer accepts, as its last link announced.
    private var messageLimits: [PeerFingerprint: Int] = [:]
    /// Peers whose link dropped and who are being reconnected, with what is needed to redial them.
    private var reconnecting: [PeerFingerprint: Reconnection] = [:]
    /// The last address each member was reached at, for a reconnection whose link dropped before it said.
    private var lastAddresses: [PeerFingerprint: SocketAddress] = [:]
    /// Receipts sent recently, per peer, sent again on a new link (a receipt lost with a link is not lost).
    private var recentReceipts: [PeerFingerprint: [UInt64]] = [:]
    /// Links being dialed for a join, so disconnecting can close them.
    private var joinLinks: [PeerFingerprint: Link] = [:]
    private var isDisconnected = false
    /// Connection tickets this session issued (``connectionData(for:)``), each for one peer, used once.
    private var tickets: [[UInt8]: PeerFingerprint] = [:]
    /// The tickets in the order they were issued, so the oldest goes first when there are too many.
    private var ticketOrder: [[UInt8]] = []
    /// Peers this side waits for after ``connect(_:connectionData:timeout:)`` (the lower fingerprint dials).
    private var directWaiters:
        [PeerFingerprint: (continuation: CheckedContinuation<InvitationOutcome, Never>, timer: SessionTimer)] = [:]
    /// The last failed invitation per peer, until the peer becomes a member (bounded by the peers invited).
    private var failedInvitations: [PeerFingerprint: InvitationOutcome] = [:]

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
        connection = network.connectionConfiguration(
            identity: identity, encryption: configuration.encryption, groupSecret: configuration.groupSecret)
        (events, eventSink) = AsyncStream<SessionEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(configuration.eventBufferLimit))
        inbox = SessionInbox(
            messageLimit: configuration.receiveBufferMessages, byteLimit: configuration.receiveBufferBytes)
        currentID = SecureRandom.bytes(SessionWire.idLength)
        secrets = [currentID: SecureRandom.bytes(SessionWire.secretLength)]
        resources = ResourceCenter(
            directory: configuration.resourceDirectory, maximumSize: configuration.maximumResourceSize)
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

    /// Sends a control message on a member's link; false when it has none.
    private func control(_ fp: PeerFingerprint, _ message: SessionWire.Message) -> Bool {
        members[fp]?.send(message) ?? false
    }

    private func openStream(named name: String, toMember fp: PeerFingerprint) async throws(SessionError) -> PeerStream {
        guard let link = members[fp] else { throw SessionError(.notConnected, "the peer is not connected") }
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
        guard members[peer.claimedFingerprint] != nil else { throw notConnected(peer) }
        let linked = members[peer.claimedFingerprint]?.peer ?? peer
        return try await resources.send(url: url, name: name, to: linked, progress: progress)
    }

    /// The outcome of the last invitation to `peer` that did not make it a member (declined, timed out,
    /// unreachable, refused), kept until it becomes one; nil otherwise. It is recorded before the
    /// `notConnected` event that reports it, so an event handler can ask.
    public func invitationOutcome(for peer: Peer) -> InvitationOutcome? {
        failedInvitations[peer.claimedFingerprint]
    }

    /// The members connected now.
    public var connectedPeers: [Peer] { members.values.map(\.peer).sorted { $0.displayName < $1.displayName } }

    /// Events dropped because the application did not read ``events``.
    public nonisolated var droppedEvents: Int { dropped.value }

    /// The messages members send, in each sender's order; ends when the session disconnects. Several readers
    /// share them (each message goes to one).
    public nonisolated var messages: Messages { Messages(inbox: inbox) }

    /// The received messages as an `AsyncSequence`.
    public struct Messages: AsyncSequence, Sendable {
        let inbox: SessionInbox

        /// Makes the iterator.
        public func makeAsyncIterator() -> Iterator { Iterator(inbox: inbox) }

        /// Takes messages from the session.
        public struct Iterator: AsyncIteratorProtocol {
            let inbox: SessionInbox

            /// The next message, or nil once the session disconnected and every message was read.
            public mutating func next() async -> ReceivedMessage? {
                guard let entry = await inbox.next() else { return nil }
                entry.onTaken?()
                return entry.message
            }
        }
    }

    // MARK: Sending

    /// Sends a message to each of `peers`.
    ///
    /// `.reliable` messages are numbered per peer and kept until the peer confirms it has them: they arrive
    /// exactly once and in order, across a dropped and re-established link too, or are reported
    /// ``SessionEvent/undelivered(_:_:reason:)`` by the numbers returned here. The call waits while
    /// ``SessionConfiguration/replayBufferBytes`` of a peer's messages are unconfirmed. A peer that is
    /// `reconnecting` still takes reliable messages. `.unreliable` ones go only to connected peers and may be
    /// dropped.
    /// - Returns: For every peer, `enqueued` with the message's number or why not (`notConnected` for a peer
    ///   that is not a member, `invalidParameter` for a message longer than the peer accepts).
    public func send(_ data: [UInt8], to peers: [Peer], mode: SendMode = .reliable) async -> [Peer: SendResult] {
        var results: [Peer: SendResult] = [:]
        var waiting: [(Peer, Conversation)] = []
        let unnumbered = mode == .unreliable ? [Conversation.Tag.unnumbered] + data : []
        for peer in peers {
            let fp = peer.claimedFingerprint
            guard let conversation = conversations[fp] else {
                results[peer] = .failed(notConnected(peer))
                continue
            }
            if let limit = messageLimits[fp], data.count + 9 > limit {
                results[peer] = .failed(
                    SessionError(
                        .invalidParameter,
                        "a message of \(data.count) bytes is longer than \(peer.displayName) accepts (\(limit - 9)); "
                            + "send larger data as a stream or a resource"))
                continue
            }
            switch mode {
            case .reliable:
                // Queued at once where there is room; a peer whose replay buffer is full waits below, without
                // holding the others back.
                switch conversation.tryEnqueue(data, receipt: false) {
                case .success(let sequence): results[peer] = .enqueued(sequence)
                case .failure(let error): results[peer] = .failed(error)
                case nil: waiting.append((peer, conversation))
                }
            case .unreliable:
                guard let link = members[fp] else {
                    results[peer] = .failed(SessionError(.notConnected, "\(peer.displayName) is reconnecting"))
                    continue
                }
                do {
                    try await link.connection.sendUnreliable(unnumbered)
                    results[peer] = .enqueued(0)
                } catch {
                    results[peer] = .failed(Self.sendError(error, peer: link.peer))
                }
            }
        }
        guard !waiting.isEmpty else { return results }
        await withTaskGroup(of: (Peer, SendResult).self) { group in
            for (peer, conversation) in waiting {
                group.addTask {
                    switch await conversation.enqueue(data, receipt: false) {
                    case .success(let sequence): (peer, .enqueued(sequence))
                    case .failure(let error): (peer, .failed(error))
                    }
                }
            }
            for await (peer, result) in group { results[peer] = result }
        }
        return results
    }

    /// Sends a message reliably and returns once the peer's application has taken it from its
    /// ``messages``.
    /// - Throws: ``SessionError``: `notConnected` when the peer is not a member, or leaves (or is not back
    ///   within the reconnection grace) before the receipt arrives; `invalidParameter` when it is too long.
    public func sendAcknowledged(_ data: [UInt8], to peer: Peer) async throws(SessionError) {
        try await sendExpectingReceipt(data, to: peer).delivered()
    }

    /// Queues a reliable message like ``send(_:to:mode:)`` (in order with every other message to `peer`) and
    /// returns at once a ``PendingDelivery`` whose `delivered()` waits for the peer's receipt, as
    /// ``sendAcknowledged(_:to:)`` does: for callers that must queue in order and learn each outcome later.
    /// - Throws: ``SessionError`` as ``sendAcknowledged(_:to:)`` does when the message cannot be queued.
    public func sendExpectingReceipt(_ data: [UInt8], to peer: Peer) async throws(SessionError) -> PendingDelivery {
        let fp = peer.claimedFingerprint
        guard let conversation = conversations[fp] else { throw notConnected(peer) }
        if let limit = messageLimits[fp], data.count + 9 > limit {
            throw SessionError(
                .invalidParameter, "a message of \(data.count) bytes is longer than \(peer.displayName) accepts")
        }
        switch await conversation.enqueue(data, receipt: true) {
        case .success(let sequence):
            if expectingReceipts.count < 65_536 {
                expectingReceipts.insert(AckKey(fingerprint: fp, sequence: sequence))
            }
            return PendingDelivery(
                session: self, peer: peer, key: AckKey(fingerprint: fp, sequence: sequence), conversation: conversation)
        case .failure(let error):
            throw error
        }
    }

    /// Waits for the receipt of a message queued by ``sendExpectingReceipt(_:to:)``.
    func awaitReceipt(_ key: AckKey, peer: Peer, conversation: Conversation) async throws(SessionError) {
        expectingReceipts.remove(key)
        if earlyReceipts.remove(key) != nil { return }
        guard pendingAcks[key] == nil else {
            throw SessionError(.invalidParameter, "already waiting for the receipt of message \(key.sequence)")
        }
        guard conversations[key.fingerprint] === conversation else {
            throw SessionError(.notConnected, "\(peer.displayName) left before the message was delivered")
        }
        let failure = await withCheckedContinuation { (continuation: CheckedContinuation<SessionError?, Never>) in
            pendingAcks[key] = continuation
        }
        if let failure { throw failure }
    }

    /// An acknowledged send: the peer and the message's number.
    struct AckKey: Hashable, Sendable {
        let fingerprint: PeerFingerprint
        let sequence: UInt64
    }

    /// Fails the acknowledged sends to a peer whose conversation ended.
    private func failAcks(to fp: PeerFingerprint, _ failure: SessionError) {
        for (key, waiter) in pendingAcks where key.fingerprint == fp {
            pendingAcks[key] = nil
            waiter.resume(returning: failure)
        }
        earlyReceipts = earlyReceipts.filter { $0.fingerprint != fp }
        expectingReceipts = expectingReceipts.filter { $0.fingerprint != fp }
    }

    /// Opens a byte stream to a member; the writer waits while the reader is slow.
    /// - Throws: ``SessionError`` with `notConnected` for a peer that is not a member or a link that ends,
    ///   `unavailable` when the link has no free channel.
    public func openStream(named name: String, to peer: Peer) async throws(SessionError) -> PeerStream {
        guard let link = members[peer.claimedFingerprint] else { throw notConnected(peer) }
        do {
            return try await link.connection.openStream(name: name)
        } catch {
            throw SessionError(
                error.code == .resourceLimit ? .unavailable : .notConnected,
                "cannot open a stream to \(peer.displayName): \(error.reason)", connectionError: error)
        }
    }

    /// How long ``disconnect()`` waits for its members' links to close gracefully (the `leave` and the goodbye
    /// delivered), so a process that exits right after it is seen leaving, not lost.
    static let leaveWait: Duration = .seconds(2)

    /// Leaves the session: every member sees this peer `notConnected` with the reason `left`; ``events`` and
    /// ``messages`` end (after what is already queued). Returns once the members' links have closed gracefully
    /// (at most 2 s). Idempotent.
    public func disconnect() async {
        guard !isDisconnected else { return }
        isDisconnected = true
        // Links the peer may count as member links while this side does not yet (an invitation whose acceptance
        // is on its way, a join being answered) hear the leave too.
        let pending = answers.values.map(\.link) + Array(joinLinks.values)
        let leaving = (Array(members.values) + pending).map(\.connection)
        for link in pending { link.send(.leave(reason: "left")) }
        for link in members.values {
            link.send(.leave(reason: "left"))
            link.close("left the session")
            report(link.peer, .notConnected, "this side left the session")
        }
        members = [:]
        resources.shutdown(reason: "the session was disconnected")
        for (_, waiter) in pendingAcks {
            waiter.resume(returning: SessionError(.cancelled, "the session was disconnected"))
        }
        pendingAcks = [:]
        for conversation in conversations.values {
            _ = conversation.fail(SessionError(.cancelled, "the session was disconnected"))
        }
        conversations = [:]
        for reconnection in reconnecting.values {
            reconnection.timer.cancel()
            _ = eventSink.yield(.peerChanged(reconnection.peer, .notConnected, reason: "this side left the session"))
        }
        reconnecting = [:]
        for (id, answer) in answers {
            answer.continuation.resume(returning: .refused(reason: "the session was disconnected"))
            answers[id] = nil
        }
        for link in joinLinks.values { link.close("left the session") }
        joinLinks = [:]
        for fp in Array(directWaiters.keys) { stopWaiting(for: fp, .refused(reason: "the session was disconnected")) }
        tickets = [:]
        ticketOrder = []
        for (peer, state) in states.values where state == .connecting {
            _ = eventSink.yield(.peerChanged(peer, .notConnected, reason: "this side left the session"))
        }
        states = [:]
        await network.unregister(self)
        inbox.finish()
        eventSink.finish()
        // Polled with sleeps in a task of their own, which a cancelled caller cannot cut short (its own
        // Task.sleep would return at once and spin).
        let deadline = ContinuousClock.now + Self.leaveWait
        while leaving.contains(where: { $0.closeReason == nil }), ContinuousClock.now < deadline {
            await Task.detached { try? await Task.sleep(for: .milliseconds(5)) }.value
        }
    }

    // MARK: Inviting

    /// Invites a peer at these addresses (the browser's discovered addresses); see
    /// ``PeerBrowser/invite(_:into:context:timeout:)``.
    func invite(
        _ peer: Peer, addresses: [SocketAddress], serviceType: String, context: [UInt8], timeout: Duration
    ) async -> InvitationOutcome {
        let fp = peer.claimedFingerprint
        if isDisconnected { return .refused(reason: "the session was disconnected") }
        if members[fp] != nil { return .accepted }
        if fp == identity.fingerprint { return .refused(reason: "that is this peer") }
        guard context.count <= Invitation.maximumContextLength else {
            return refusedAtOnce(
                peer,
                "the context is \(context.count) bytes; an invitation carries at most "
                    + "\(Invitation.maximumContextLength) (send more once connected)")
        }
        guard members.count + 1 < configuration.maximumPeers else {
            return refusedAtOnce(peer, "this session is full (\(configuration.maximumPeers) peers)")
        }
        let timeout = timeout <= .zero ? Duration.seconds(30) : timeout
        Log.write(
            .debug, "session", "inviting '\(peer.displayName)' at \(addresses.map { "\($0)" }.joined(separator: " "))")
        report(peer, .connecting, "inviting")
        inviting[fp, default: 0] += 1
        await network.beginOutgoing(from: identity.fingerprint, to: fp)
        var outcome = await runInvitation(
            peer, addresses: addresses, serviceType: serviceType, context: context, timeout: timeout)
        if outcome == .accepted, members[fp] == nil, reconnecting[fp] == nil {
            // "Already connected": the link the peer means is being adopted here right now (a crossing
            // invitation), or it is a stale one the peer has not noticed is gone.
            let deadline = ContinuousClock.now + .seconds(2)
            while members[fp] == nil, reconnecting[fp] == nil, !isDisconnected, ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(5))
            }
            if members[fp] == nil, reconnecting[fp] == nil {
                outcome = .refused(reason: "the peer says it is already connected, but this session has no link to it")
            }
        }
        Log.write(.info, "session", "invitation to '\(peer.displayName)': \(outcome)")
        await network.endOutgoing(from: identity.fingerprint, to: fp)
        inviting[fp] = inviting[fp, default: 1] > 1 ? inviting[fp]! - 1 : nil
        // The link dropped while the invitation ran: redialing waited for it to end.
        if inviting[fp] == nil, reconnecting[fp] != nil { redial(fp) }
        // A member whose link dropped right after it was adopted is reconnecting, not gone.
        if members[fp] == nil, reconnecting[fp] == nil, !joining.contains(fp), inviting[fp] == nil {
            if outcome != .accepted {
                // Bounded: an application inviting every peer a flood of advertisements shows keeps 1,024.
                if failedInvitations.count >= 1_024, let any = failedInvitations.keys.first {
                    failedInvitations[any] = nil
                }
                failedInvitations[fp] = outcome
            }
            report(peer, .notConnected, outcome.description)
        }
        return outcome
    }

    /// An invitation refused before it is sent: reported like one that failed (`connecting`, then `notConnected`
    /// with the reason), so an application that only watches states learns of it too.
    private func refusedAtOnce(_ peer: Peer, _ reason: String) -> InvitationOutcome {
        let outcome = InvitationOutcome.refused(reason: reason)
        let fp = peer.claimedFingerprint
        guard inviting[fp] == nil, !joining.contains(fp), states[fp] == nil else { return outcome }
        report(peer, .connecting, "inviting")
        failedInvitations[fp] = outcome
        report(peer, .notConnected, outcome.description)
        return outcome
    }

    /// An invitation that cannot even be tried (the browser does not know the peer): reported as one that failed.
    func inviteUnreachable(_ peer: Peer, _ error: ConnectionError) -> InvitationOutcome {
        let fp = peer.claimedFingerprint
        if members[fp] != nil { return .accepted }
        let outcome = InvitationOutcome.unreachable(error)
        guard !isDisconnected, inviting[fp] == nil, !joining.contains(fp) else { return outcome }
        report(peer, .connecting, "inviting")
        failedInvitations[fp] = outcome
        report(peer, .notConnected, outcome.description)
        return outcome
    }

    private func runInvitation(
        _ peer: Peer, addresses: [SocketAddress], serviceType: String, context: [UInt8], timeout: Duration
    ) async -> InvitationOutcome {
        let fp = peer.claimedFingerprint
        let loop = network.loop
        let started = loop.clock.now()
        let connection = connection
        let expecting: PeerFingerprint? = configuration.encryption == .required ? fp : nil
        let dial = Task {
            await Self.dial(addresses, expecting: expecting, configuration: connection, loop: loop)
        }
        let dialTimer = SessionTimer(after: timeout, on: loop) { dial.cancel() }
        let dialed = await dial.value
        let timedOut = !dialTimer.cancel()
        let conn: PeerConnection
        switch dialed {
        case .failure(let error):
            if timedOut { return .timedOut }
            return Self.isSecurityRefusal(error) ? .refused(reason: error.reason) : .unreachable(error)
        case .success(let made):
            conn = made
        }
        if let refusal = identityRefusal(conn, expected: fp) ?? securityRefusal(conn) {
            _ = await conn.close(code: 3, reason: refusal)
            return .refused(reason: refusal)
        }
        if case .refuse(let reason) = await verify(conn) {
            _ = await conn.close(code: 3, reason: "refused by the verification hook: \(reason)")
            return .refused(reason: "refused by this side's verification hook: \(reason)")
        }
        if members[fp] != nil {
            _ = await conn.close(code: 0, reason: "already connected")
            return .accepted
        }
        let remaining = timeout - (loop.clock.now() - started)
        guard remaining > .zero, !isDisconnected else {
            _ = await conn.close(code: 0, reason: "invitation timed out")
            return isDisconnected ? .refused(reason: "the session was disconnected") : .timedOut
        }
        let id = SecureRandom.bytes(SessionWire.idLength)
        let link = Link(connection: conn, isDialer: true, linkID: id)
        let answerTimer = SessionTimer(after: remaining, on: loop) { [weak self] in
            Task { await self?.invitationTimedOut(link, id: id, after: timeout) }
        }
        let capped = min(remaining, .seconds(3_600_000))
        let milliseconds = UInt32(
            clamping: capped.components.seconds * 1000 + capped.components.attoseconds / 1_000_000_000_000_000)
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<InvitationOutcome, Never>) in
            answers[id] = (continuation, link)
            link.setHandler { [weak self] link, event in
                guard let self else { return link.close("the session is gone") }
                await self.inviterEvent(link, event, id: id)
            }
            link.send(
                .invite(
                    id: id, timeoutMilliseconds: max(1, milliseconds), serviceType: serviceType, context: context,
                    encryption: configuration.encryption))
        }
        answerTimer.cancel()
        return outcome
    }

    private func invitationTimedOut(_ link: Link, id: [UInt8], after timeout: Duration) {
        guard let continuation = answers.removeValue(forKey: id)?.continuation else { return }
        link.send(.inviteCancel(id: id, reason: "no answer within \(timeout)"))
        link.close("invitation timed out")
        continuation.resume(returning: .timedOut)
    }

    private func inviterEvent(_ link: Link, _ event: Link.Event, id: [UInt8]) {
        guard let continuation = answers.removeValue(forKey: id)?.continuation else { return }
        switch event {
        case .message(.inviteAnswer(let answerID, let answer, let reason)) where answerID == id:
            switch answer {
            case .accepted:
                if isDisconnected {
                    link.send(.leave(reason: "left"))
                    link.close("left the session")
                    return continuation.resume(returning: .refused(reason: "the session was disconnected"))
                }
                let kept = adopt(link, first: nil, reason: "accepted the invitation")
                continuation.resume(
                    returning: kept || members[link.fingerprint] != nil
                        ? .accepted : .refused(reason: "this session is full (\(configuration.maximumPeers) peers)"))
            case .alreadyConnected:
                link.close("already connected")
                continuation.resume(returning: .accepted)
            case .declined:
                link.close("declined")
                continuation.resume(returning: .declined(reason: reason))
            case .timedOut:
                link.close("invitation timed out")
                continuation.resume(returning: .timedOut)
            case .refused:
                link.close("refused")
                continuation.resume(returning: .refused(reason: reason))
            }
        case .message:
            link.close("expected an answer to the invitation")
            continuation.resume(
                returning: .refused(reason: "the peer broke the protocol (no answer to the invitation)"))
        case .closed(let reason):
            let error =
                link.connection.closeReason
                ?? ConnectionError(code: .connectionLost, reason: reason)
            continuation.resume(
                returning: .unreachable(
                    ConnectionError(code: error.code, reason: "the connection ended before an answer: \(reason)")))
        }
    }

    // MARK: Being invited, being joined

    /// Accepts an invitation into this session (called by ``Invitation/accept(into:)``, after it claimed it).
    func acceptInvitation(_ invitation: Invitation) async throws(SessionError) {
        let link = invitation.link
        let fp = link.fingerprint
        func refuse(_ code: SessionError.Code, _ reason: String) -> SessionError {
            link.send(.inviteAnswer(id: invitation.id, answer: .refused, reason: reason))
            link.close("invitation refused")
            return SessionError(code, reason)
        }
        if isDisconnected { throw refuse(.cancelled, "the session was disconnected") }
        // The invitation came through a listener with the advertiser's identity and group secret: admitting it
        // into a session with others would let the advertiser's group feed this session, and members would later
        // find this session's listener presenting another identity than the one they were introduced to.
        if invitation.listener.fingerprint != identity.fingerprint {
            throw refuse(.invalidParameter, "the advertiser's identity differs from the session's")
        }
        if invitation.listener.groupSecret != configuration.groupSecret {
            throw refuse(.refused, "group secret: the advertiser's group secret differs from the session's")
        }
        if let refusal = securityRefusal(link.connection) { throw refuse(.refused, refusal) }
        if configuration.encryption == .none, invitation.inviterEncryption == .required {
            // The link may well be TLS (the inviter dialed a known identity), but the two sessions' rules exclude
            // each other: a `.required` peer must never be a member of a session that admits plaintext links.
            throw refuse(
                .refused, "encryption: the inviter requires encryption and this session never encrypts (.none)")
        }
        if members[fp] != nil {
            link.send(.inviteAnswer(id: invitation.id, answer: .alreadyConnected, reason: "already connected"))
            return link.close("already connected")
        }
        guard members.count + 1 < configuration.maximumPeers else {
            throw refuse(.sessionFull, "the session is full (\(configuration.maximumPeers) peers)")
        }
        report(link.peer, .connecting, "accepting an invitation")
        if case .refuse(let reason) = await verify(link.connection) {
            if members[fp] == nil { report(link.peer, .notConnected, "refused by the verification hook: \(reason)") }
            throw refuse(.refused, "refused by the invitee's verification hook: \(reason)")
        }
        if isDisconnected { throw refuse(.cancelled, "the session was disconnected") }
        if let reason = link.withdrawnReason {
            // The inviter gave up while this side's hook was thinking: it will never take this side in.
            if members[fp] == nil { report(link.peer, .notConnected, reason) }
            throw SessionError(.invitationClosed, "the invitation from \(link.peer) ended: \(reason)")
        }
        if link.isClosed {
            if members[fp] == nil { report(link.peer, .notConnected, "the inviter went away before the answer") }
            throw SessionError(.invitationClosed, "the invitation from \(link.peer) ended before it was accepted")
        }
        if members[fp] != nil {
            link.send(.inviteAnswer(id: invitation.id, answer: .alreadyConnected, reason: "already connected"))
            return link.close("already connected")
        }
        adopt(
            link, first: .inviteAnswer(id: invitation.id, answer: .accepted, reason: ""),
            reason: "accepted an invitation")
    }

    /// The session's current identifier (the lowest of the sessions merged into it).
    var currentSessionID: [UInt8] { currentID }

    /// The current identifier and its secret.
    var currentSecret: ([UInt8], [UInt8]) { (currentID, secrets[currentID] ?? []) }

    /// The member link to a peer (tests cut it to simulate an outage).
    func memberLink(_ fingerprint: PeerFingerprint) -> Link? { members[fingerprint] }

    /// Whether this session knows the secret of a session identifier (the router's question).
    func knowsSession(_ id: [UInt8]) -> Bool { !isDisconnected && secrets[id] != nil }

    /// Whether the peer is a member.
    func hasMember(_ fingerprint: PeerFingerprint) -> Bool { members[fingerprint] != nil }

    /// A member introduced to us dialed and proves membership (called by the network's router).
    ///
    /// Admitted only with a valid proof for a secret this session knows **and** once a current member has
    /// introduced the peer (its `members` gossip named it): knowing a secret alone (a former member, an
    /// eavesdropper on a plaintext link) is not enough. The gossip and the join race, so the join waits up to
    /// ``introductionWait`` for the introduction.
    func acceptJoin(_ link: Link, sessionID: [UInt8], proof: [UInt8]) async {
        func refuse(_ reason: String) {
            link.send(.joinAnswer(accepted: false, reason: reason))
            link.close("join refused")
        }
        let fp = link.fingerprint
        guard let secret = secrets[sessionID],
            HMACSHA256.constantTimeEqual(
                proof,
                SessionWire.joinProof(secret: secret, binding: link.connection.sessionBinding, linkID: link.linkID))
        else {
            return refuse("the membership proof is wrong: only members of this session can join it this way")
        }
        if let refusal = securityRefusal(link.connection) { return refuse(refusal) }
        let deadline = ContinuousClock.now + Self.introductionWait
        if let reconnection = reconnecting[fp] {
            // A member coming back: it proved the same identity as before (or, if it was a plaintext claim, still
            // is one); the verification hook already admitted it.
            if reconnection.peer.isAuthenticated, !link.peer.isAuthenticated {
                return refuse("a proven member cannot come back as a plaintext claim")
            }
            guard !isDisconnected else { return refuse("the member left the session") }
            adopt(link, first: .joinAnswer(accepted: true, reason: ""), reason: "reconnected")
            return
        }
        while known[fp] == nil, members[fp] == nil, reconnecting[fp] == nil, !isDisconnected,
            ContinuousClock.now < deadline
        {
            try? await Task.sleep(for: .milliseconds(10))
        }
        guard known[fp] != nil || members[fp] != nil || reconnecting[fp] != nil else {
            return refuse("no member of this session introduced you")
        }
        if members[fp] == nil, reconnecting[fp] == nil, members.count + 1 >= configuration.maximumPeers {
            return refuse("the session is full (\(configuration.maximumPeers) peers)")
        }
        if reconnecting[fp] == nil, case .refuse(let reason) = await verify(link.connection) {
            return refuse("refused by the verification hook: \(reason)")
        }
        guard !isDisconnected else { return refuse("the member left the session") }
        adopt(link, first: .joinAnswer(accepted: true, reason: ""), reason: "joined through an introduction")
    }

    /// How long a join waits for the introduction that names its dialer.
    static let introductionWait: Duration = .seconds(5)

    /// The reason a duplicate join or invitation is turned away: the two are linked already, so the other end
    /// reports nothing.
    static let alreadyLinked = "already connected through another link"

    /// Why a join is dialed.
    enum JoinPurpose {
        /// A member told us about the peer (the lower identity dials).
        case introduction(by: String)
        /// The peer's link dropped; both sides redial it until the grace ends.
        case reconnection
    }

    /// Dials a member we were told about, or a member we lost, to join it.
    private func dialJoin(_ member: SessionWire.Member, purpose: JoinPurpose) {
        let fp = member.fingerprint
        let isReconnection: Bool
        if case .reconnection = purpose { isReconnection = true } else { isReconnection = false }
        guard !isDisconnected, members[fp] == nil, !joining.contains(fp), inviting[fp] == nil,
            let secret = secrets[member.sessionID], !member.addresses.isEmpty,
            isReconnection || members.count + joining.count + 1 < configuration.maximumPeers
        else { return }
        joining.insert(fp)
        Log.write(
            .debug, "session",
            "dialing '\(member.displayName)' at \(member.addresses.map { "\($0)" }.joined(separator: " ")) to join "
                + (isReconnection ? "(reconnection)" : "(introduced)"))
        let peer = Peer(identity: .advertised(fp), displayName: member.displayName)
        if case .introduction(let by) = purpose { report(peer, .connecting, "introduced by \(by)") }
        let connection = connection
        let loop = network.loop
        let expecting: PeerFingerprint? = configuration.encryption == .required ? fp : nil
        Task { [weak self] in
            let dial = Task {
                await Self.dial(member.addresses, expecting: expecting, configuration: connection, loop: loop)
            }
            let timer = SessionTimer(after: connection.dialTimeout, on: loop) { dial.cancel() }
            let result = await dial.value
            timer.cancel()
            guard let self else { return }
            await self.joinDialed(result, member: member, peer: peer, secret: secret)
        }
    }

    private func joinDialed(
        _ result: Result<PeerConnection, ConnectionError>, member: SessionWire.Member, peer: Peer, secret: [UInt8]
    ) async {
        let fp = member.fingerprint
        func fail(_ reason: String) {
            joining.remove(fp)
            if reconnecting[fp] != nil { return retryReconnection(fp) }
            if members[fp] == nil, inviting[fp] == nil { report(peer, .notConnected, reason) }
        }
        let conn: PeerConnection
        switch result {
        case .failure(let error): return fail("could not reach the introduced member: \(error.reason)")
        case .success(let made): conn = made
        }
        if let refusal = identityRefusal(conn, expected: fp) ?? securityRefusal(conn) {
            _ = await conn.close(code: 3, reason: refusal)
            return fail(refusal)
        }
        if reconnecting[fp] == nil, case .refuse(let reason) = await verify(conn) {
            _ = await conn.close(code: 3, reason: "refused by the verification hook: \(reason)")
            return fail("refused by this side's verification hook: \(reason)")
        }
        if isDisconnected || members[fp] != nil {
            joining.remove(fp)
            _ = await conn.close(code: 0, reason: Self.alreadyLinked)
            return
        }
        let linkID = SecureRandom.bytes(SessionWire.idLength)
        let link = Link(connection: conn, isDialer: true, linkID: linkID)
        joinLinks[fp] = link
        // No answer within the dial timeout (the member's hook may never return): give up with a reason.
        let timer = SessionTimer(after: connection.dialTimeout, on: network.loop) { [weak self] in
            Task { await self?.joinTimedOut(link) }
        }
        link.setHandler { [weak self] link, event in
            timer.cancel()
            guard let self else { return link.close("the session is gone") }
            await self.joinerEvent(link, event)
        }
        link.send(
            .join(
                linkID: linkID, sessionID: member.sessionID,
                proof: SessionWire.joinProof(secret: secret, binding: conn.sessionBinding, linkID: linkID)))
    }

    private func joinTimedOut(_ link: Link) {
        let fp = link.fingerprint
        guard joinLinks[fp] === link else { return }
        joinLinks[fp] = nil
        joining.remove(fp)
        link.close("no answer to the join")
        if reconnecting[fp] != nil { return retryReconnection(fp) }
        if members[fp] == nil, inviting[fp] == nil {
            report(link.peer, .notConnected, "the introduced member did not answer within \(connection.dialTimeout)")
        }
    }

    private func joinerEvent(_ link: Link, _ event: Link.Event) {
        let fp = link.fingerprint
        guard joinLinks[fp] === link else {
            if case .message(.joinAnswer(true, _)) = event {
                adopt(link, first: nil, reason: "joined through an introduction")
            }
            return
        }
        joinLinks[fp] = nil
        joining.remove(fp)
        if reconnecting[fp] != nil {
            if case .message(.joinAnswer(true, _)) = event, !isDisconnected {
                adopt(link, first: nil, reason: "reconnected")
            } else {
                link.close("reconnection attempt ended")
                retryReconnection(fp)
            }
            return
        }
        switch event {
        case .message(.joinAnswer(true, _)):
            if isDisconnected {
                link.send(.leave(reason: "left"))
                return link.close("left the session")
            }
            // Whatever else happened meanwhile (an invitation linked us too), the duplicate rule decides.
            adopt(link, first: nil, reason: "joined through an introduction")
        case .message(.joinAnswer(false, let reason)):
            link.close("join refused")
            if members[fp] == nil, inviting[fp] == nil, reason != Self.alreadyLinked {
                report(link.peer, .notConnected, "join refused: \(reason)")
            }
        case .message:
            link.close("expected an answer to the join")
            if members[fp] == nil, inviting[fp] == nil {
                report(link.peer, .notConnected, "the peer broke the protocol")
            }
        case .closed(let reason):
            if members[fp] == nil, inviting[fp] == nil { report(link.peer, .notConnected, reason) }
        }
    }

    // MARK: Members

    /// How long a link that lost the duplicate-link rule stays open before it is closed, so the other end has
    /// switched to the kept link first (and reports nothing) and what was already sent on it still arrives.
    static let duplicateGrace: Duration = .seconds(2)

    /// Makes a link the member link for its peer (or turns it away, when the peer already has the better link
    /// or the session is full), sends `first` (the answer that admits the peer), and shares what this side
    /// knows. A peer that was `reconnecting` is connected again. Returns whether the link was kept.
    @discardableResult
    private func adopt(_ link: Link, first: SessionWire.Message?, reason: String) -> Bool {
        let fp = link.fingerprint
        joining.remove(fp)
        func turnAway(_ why: String, closeAfterGrace: Bool) {
            if case .inviteAnswer(let id, _, _) = first {
                link.send(
                    .inviteAnswer(
                        id: id, answer: why == Self.alreadyLinked ? .alreadyConnected : .refused, reason: why))
            } else if first != nil {
                link.send(.joinAnswer(accepted: false, reason: why))
            }
            if closeAfterGrace { closeLater(link, why) } else { link.close(why) }
        }
        if let existing = members[fp], existing !== link {
            if Self.prefers(existing, over: link, local: identity.fingerprint) {
                Log.write(
                    .debug, "session",
                    "'\(link.peer.displayName)': a duplicate link (\(reason)) loses to the existing one")
                turnAway(Self.alreadyLinked, closeAfterGrace: true)
                return false
            }
            Log.write(
                .debug, "session", "'\(link.peer.displayName)': a duplicate link (\(reason)) replaces the existing one")
            members[fp] = link
            closeLater(existing, "replaced by a duplicate link")
        } else {
            guard members.count + 1 < configuration.maximumPeers || reconnecting[fp] != nil else {
                turnAway("the session is full (\(configuration.maximumPeers) peers)", closeAfterGrace: false)
                if first == nil { report(link.peer, .notConnected, "this session is full") }
                return false
            }
            members[fp] = link
            if let reconnection = reconnecting.removeValue(forKey: fp) {
                reconnection.timer.cancel()
                report(link.peer, .connected, "reconnected after \(ContinuousClock.now - reconnection.since)")
            } else {
                report(link.peer, .connected, reason)
            }
        }
        let conversation = conversations[fp] ?? Conversation(byteLimit: configuration.replayBufferBytes)
        conversations[fp] = conversation
        messageLimits[fp] = link.connection.peer.maximumMessageLength
        link.generation = conversation.switchLink()
        link.setHandler { [weak self] link, event in
            guard let self else { return link.close("the session is gone") }
            await self.memberEvent(link, event)
        }
        if let first { link.send(first) }
        link.send(.sessions(listenPort: listenPort, current: currentID, secrets: secrets))
        link.send(
            .resume(epoch: conversation.myEpoch, peerEpoch: conversation.peerEpoch, received: conversation.received))
        for receipt in recentReceipts[fp] ?? [] { link.send(.delivered(messageID: receipt)) }
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
        return true
    }

    /// Closes a link that is no longer the member link after ``duplicateGrace``, unless it became the member
    /// link again meanwhile (the other one failed).
    private func closeLater(_ link: Link, _ reason: String) {
        _ = SessionTimer(after: Self.duplicateGrace, on: network.loop) { [weak self] in
            Task {
                guard let self, await !self.isMemberLink(link) else { return }
                link.close(reason)
            }
        }
    }

    private func isMemberLink(_ link: Link) -> Bool { members[link.fingerprint] === link }

    /// The duplicate-link rule both ends apply alike: an authenticated link beats a plaintext one (a claim
    /// never replaces a proof); then the link dialed by the lower identity; then, between two links one side
    /// dialed, the lower link identifier; when everything is equal, the existing link (`a`) stays.
    static func prefers(_ a: Link, over b: Link, local: PeerFingerprint) -> Bool {
        if a.peer.isAuthenticated != b.peer.isAuthenticated { return a.peer.isAuthenticated }
        let dialerA = a.dialerFingerprint(local: local)
        let dialerB = b.dialerFingerprint(local: local)
        if dialerA != dialerB { return dialerA.bytes.lexicographicallyPrecedes(dialerB.bytes) }
        return !b.linkID.lexicographicallyPrecedes(a.linkID)
    }

    private func memberEvent(_ link: Link, _ event: Link.Event) {
        let fp = link.fingerprint
        guard members[fp] === link else {
            // A replaced link: receipts and acknowledgements on it still count.
            switch event {
            case .message(.delivered(let id)): receipt(id, from: fp)
            case .message(.ack(let received)) where link.generation == conversations[fp]?.generation:
                conversations[fp]?.acknowledge(upTo: received)
            case .message(.leave(let reason)):
                // The peer left through the link it kept while this side had not switched to it yet (two links
                // crossed): it is gone all the same. A plaintext claim cannot end a proven member's stay.
                link.close("left")
                let why = reason.isEmpty ? "left" : reason
                if let member = members[fp], link.peer.isAuthenticated || !member.peer.isAuthenticated {
                    depart(member, reason: why)
                    member.close("left")
                } else if let reconnection = reconnecting[fp],
                    link.peer.isAuthenticated || !reconnection.peer.isAuthenticated
                {
                    reconnection.timer.cancel()
                    reconnecting[fp] = nil
                    known[fp] = nil
                    endConversation(fp, peer: reconnection.peer, reason: why)
                    report(reconnection.peer, .notConnected, why)
                }
            default: break
            }
            return
        }
        switch event {
        case .message(.sessions(let port, let current, let received)):
            let first = link.listenPort == nil
            link.listenPort = port
            link.sessionID = current
            if let address = link.announcedAddress { lastAddresses[fp] = address }
            var added = false
            for (id, secret) in received where secrets[id] == nil && secrets.count < SessionWire.Limits.sessions {
                secrets[id] = secret
                added = true
            }
            if current.lexicographicallyPrecedes(currentID), secrets[current] != nil { currentID = current }
            if added {
                for other in members.values where other !== link {
                    other.send(.sessions(listenPort: listenPort, current: currentID, secrets: secrets))
                }
            }
            if first, let info = memberInfo(link) {
                let others = members.values.filter { $0 !== link }.compactMap(memberInfo)
                for chunk in stride(from: 0, to: others.count, by: SessionWire.Limits.membersPerMessage) {
                    link.send(
                        .members(Array(others[chunk..<min(chunk + SessionWire.Limits.membersPerMessage, others.count)]))
                    )
                }
                for other in members.values where other !== link { other.send(.members([info])) }
            }
        case .message(.resume(let epoch, let peerEpoch, let received)):
            guard let conversation = conversations[fp], link.startedConversation == false else {
                return link.close("a second resume on one link")
            }
            link.startedConversation = true
            Log.write(
                .debug, "session",
                "'\(link.peer.displayName)' resumes: it has our messages up to \(received), we have its up to "
                    + "\(conversation.received)")
            let lost = conversation.resume(
                peerEpoch: epoch, knowsOurEpoch: peerEpoch == conversation.myEpoch, peerReceived: received,
                generation: link.generation)
            if !lost.isEmpty {
                let reason = "\(link.peer.displayName) restarted and lost them"
                Log.write(
                    .warning, "session", "'\(link.peer.displayName)': \(lost.count) messages undelivered: \(reason)")
                _ = eventSink.yield(.undelivered(link.peer, lost, reason: reason))
                failAcks(to: fp, SessionError(.notConnected, reason))
            }
            startConversation(link, conversation)
            resources.linkResumed(fp)
        case .message(.ack(let received)):
            conversations[fp]?.acknowledge(upTo: received)
        case .message(.members(let list)):
            var fresh: [SessionWire.Member] = []
            for member in list where member.fingerprint != identity.fingerprint && members[member.fingerprint] == nil {
                if known[member.fingerprint] == nil {
                    // Bounded: a member cannot make us remember (or dial) more peers than a session can hold.
                    guard known.count < configuration.maximumPeers * 4 else { continue }
                    fresh.append(member)
                }
                known[member.fingerprint] = member
                if identity.fingerprint.bytes.lexicographicallyPrecedes(member.fingerprint.bytes) {
                    dialJoin(member, purpose: .introduction(by: link.peer.displayName))
                }
            }
            if !fresh.isEmpty {
                for other in members.values where other !== link { other.send(.members(fresh)) }
            }
        case .message(.leave(let reason)):
            depart(link, reason: reason.isEmpty ? "left" : reason)
            link.close("left")
        case .message(.inviteCancel(let id, let reason)) where link.linkID == id && !link.isDialer:
            // The inviter gave up while this side was accepting: it never took this side in, so there is nothing
            // to reconnect to.
            link.withdrawnReason = "the inviter withdrew the invitation: \(reason)"
            depart(link, reason: "the inviter withdrew the invitation: \(reason)")
            link.close("invitation withdrawn")
        case .message(.delivered(let id)):
            receipt(id, from: fp)
        case .message(let message)
        where {
            switch message {
            case .resourceOffer, .resourceProgress, .resourceResult, .resourceCancel, .resourceResume: true
            default: false
            }
        }():
            resources.handle(message, from: link.peer)
        case .message:
            link.close("unexpected control message from a member")
        case .closed(let reason):
            lost(link, reason: reason)
        }
    }

    /// A member left for good: its conversation ends and what it never confirmed is reported undelivered.
    private func depart(_ link: Link, reason: String) {
        let fp = link.fingerprint
        guard members[fp] === link else { return }
        members[fp] = nil
        known[fp] = nil
        endConversation(fp, peer: link.peer, reason: reason)
        report(link.peer, .notConnected, reason)
    }

    private func endConversation(_ fp: PeerFingerprint, peer: Peer, reason: String) {
        resources.peerGone(fp, reason: "\(peer.displayName): \(reason)")
        lastAddresses[fp] = nil
        earlyReceipts = earlyReceipts.filter { $0.fingerprint != fp }
        messageLimits[fp] = nil
        recentReceipts[fp] = nil
        guard let conversation = conversations.removeValue(forKey: fp) else { return }
        let failure = SessionError(.notConnected, "\(peer.displayName): \(reason)")
        let lost = conversation.fail(failure)
        if !lost.isEmpty {
            Log.write(.warning, "session", "'\(peer.displayName)': \(lost.count) messages undelivered: \(reason)")
            _ = eventSink.yield(.undelivered(peer, lost, reason: reason))
        }
        failAcks(to: fp, failure)
    }

    /// A member's link dropped without a goodbye: the peer is `reconnecting` for the grace period while both
    /// sides redial it; then it is gone.
    private func lost(_ link: Link, reason: String) {
        let fp = link.fingerprint
        guard members[fp] === link else { return }
        if let withdrawn = link.withdrawnReason {
            // Withdrawn by the inviter as it was being accepted (the cancel was read before this side's member
            // handler took over): there is no member to wait for.
            return depart(link, reason: withdrawn)
        }
        members[fp] = nil
        guard !isDisconnected, configuration.reconnectGrace > .zero else {
            known[fp] = nil
            endConversation(fp, peer: link.peer, reason: reason)
            return report(link.peer, .notConnected, reason)
        }
        // Where to redial: where the peer said it listens, or the address this side dialed. A link that ended
        // before either was known (the peer's `sessions` never came) is still waited for: the peer may know
        // where this side listens and redial it, and ending the conversation here alone would make the peer's
        // messages of the outage look like a restart's (reported lost) instead of being delivered.
        let address =
            link.announcedAddress ?? lastAddresses[fp] ?? (link.isDialer ? link.connection.remoteAddress : nil)
        let grace = configuration.reconnectGrace
        let member = SessionWire.Member(
            fingerprint: fp, displayName: link.peer.displayName, sessionID: link.sessionID ?? currentID,
            addresses: address.map { [$0] } ?? [])
        let timer = SessionTimer(after: grace, on: network.loop) { [weak self] in
            Task { await self?.reconnectionExpired(fp, reason: reason) }
        }
        reconnecting[fp] = Reconnection(peer: link.peer, member: member, since: .now, timer: timer)
        report(link.peer, .reconnecting, "\(reason); reconnecting for up to \(grace)")
        dialJoin(member, purpose: .reconnection)
    }

    /// What redialing a lost member needs.
    struct Reconnection {
        let peer: Peer
        let member: SessionWire.Member
        let since: ContinuousClock.Instant
        let timer: SessionTimer
    }

    private func reconnectionExpired(_ fp: PeerFingerprint, reason: String) {
        guard let reconnection = reconnecting.removeValue(forKey: fp) else { return }
        known[fp] = nil
        let why = "\(reason); not back within \(configuration.reconnectGrace)"
        endConversation(fp, peer: reconnection.peer, reason: why)
        report(reconnection.peer, .notConnected, why)
    }

    /// A redial of a reconnecting peer failed: try again shortly while the grace lasts.
    private func retryReconnection(_ fp: PeerFingerprint) {
        guard reconnecting[fp] != nil else { return }
        _ = SessionTimer(after: .milliseconds(250), on: network.loop) { [weak self] in
            Task { await self?.redial(fp) }
        }
    }

    private func redial(_ fp: PeerFingerprint) {
        guard let reconnection = reconnecting[fp], members[fp] == nil else { return }
        dialJoin(reconnection.member, purpose: .reconnection)
    }

    private func receipt(_ id: UInt64, from fp: PeerFingerprint) {
        let key = AckKey(fingerprint: fp, sequence: id)
        if let waiter = pendingAcks.removeValue(forKey: key) {
            waiter.resume(returning: nil)
        } else if expectingReceipts.remove(key) != nil {
            earlyReceipts.insert(key)  // its sender will ask
        } else if let conversation = conversations[fp], id < conversation.nextSequenceNumber,
            id + 64 >= conversation.nextSequenceNumber, earlyReceipts.count < 4_096
        {
            // Only a receipt for one of the last numbers handed out can be early (its sender has not started
            // waiting yet); older ones are repeats sent after a reconnection.
            earlyReceipts.insert(key)
        }
    }

    /// The receiving application took a message that asked for a receipt.
    private func sendReceipt(_ id: UInt64, to fp: PeerFingerprint) {
        var recent = recentReceipts[fp] ?? []
        recent.append(id)
        if recent.count > 256 { recent.removeFirst(recent.count - 256) }
        recentReceipts[fp] = recent
        members[fp]?.send(.delivered(messageID: id))
    }

    private func memberInfo(_ link: Link) -> SessionWire.Member? {
        guard let address = link.announcedAddress else { return nil }
        return SessionWire.Member(
            fingerprint: link.fingerprint, displayName: link.peer.displayName,
            sessionID: link.sessionID ?? currentID, addresses: [address])
    }

    /// The peer's `resume` arrived: write our numbered messages from where it is, read its.
    private func startConversation(_ link: Link, _ conversation: Conversation) {
        let generation = link.generation
        let connection = link.connection
        Task {
            while let entry = await conversation.nextToWrite(generation: generation) {
                do {
                    try await connection.send(entry.frame)
                } catch {
                    break
                }
            }
        }
        let inbox = inbox
        let fp = link.fingerprint
        let loop = network.loop
        let receipt: @Sendable (UInt64) -> Void = { [weak self] sequence in
            Task { await self?.sendReceipt(sequence, to: fp) }
        }
        Task {
            await Self.read(
                link, conversation: conversation, generation: generation, inbox: inbox, loop: loop, receipt: receipt)
        }
    }

    /// Reads a member link's messages into the inbox: numbered ones once each and in order, acknowledging
    /// every 32 messages or 256 KiB, and within 20 ms of the last.
    private nonisolated static func read(
        _ link: Link, conversation: Conversation, generation: Int, inbox: SessionInbox, loop: EventLoop,
        receipt: @escaping @Sendable (UInt64) -> Void
    ) async {
        let connection = link.connection
        let peer = link.peer
        let flush = AckFlush()
        await conversation.waitForOlderDeliveries(generation: generation)
        for await data in connection.messages {
            guard let tag = data.first else {
                _ = await connection.close(code: 2, reason: "an empty message without a session tag")
                return
            }
            if tag == Conversation.Tag.unnumbered {
                await inbox.push(
                    SessionInbox.Entry(
                        message: ReceivedMessage(peer: peer, data: Array(data.dropFirst())), onTaken: nil))
                continue
            }
            guard tag == Conversation.Tag.numbered || tag == Conversation.Tag.numberedWithReceipt, data.count >= 9
            else {
                _ = await connection.close(code: 2, reason: "a message without a valid session tag")
                return
            }
            var sequence: UInt64 = 0
            for byte in data[1..<9] { sequence = sequence << 8 | UInt64(byte) }
            switch conversation.arrival(of: sequence, generation: generation) {
            case .drop:
                continue
            case .gap:
                _ = await connection.close(code: 2, reason: "message \(sequence) skips a sequence number")
                return
            case .deliver:
                let number = sequence
                var onTaken: (@Sendable () -> Void)?
                if tag == Conversation.Tag.numberedWithReceipt { onTaken = { @Sendable in receipt(number) } }
                await inbox.push(
                    SessionInbox.Entry(
                        message: ReceivedMessage(peer: peer, data: Array(data.dropFirst(9))), onTaken: onTaken))
                if let ack = conversation.delivered(generation: generation, bytes: data.count - 9) {
                    link.send(.ack(received: ack))
                } else if flush.arm() {
                    // Confirm stragglers within 20 ms, so a quiet peer does not keep them in our replay buffer.
                    _ = SessionTimer(after: .milliseconds(20), on: loop) {
                        flush.disarm()
                        guard conversation.generation == generation else { return }  // the new link acknowledges
                        if let ack = conversation.pendingAcknowledgement() { link.send(.ack(received: ack)) }
                    }
                }
            }
        }
    }

    // MARK: Connecting without discovery (Apple's nearbyConnectionData and connectPeer)

    /// The most tickets a session holds; issuing more forgets the oldest.
    static let ticketLimit = 64

    /// Data for `peer` to connect to this session without discovery (Apple's `nearbyConnectionData`): this
    /// peer's fingerprint and name, where the session listens, and a ticket for `peer` only, good once. Carry it
    /// to `peer` any way you like (it holds no secret beyond the ticket, which only `peer` can use); both sides
    /// then call ``connect(_:connectionData:timeout:)`` with what the other gave them.
    /// - Throws: ``SessionError`` `cancelled` once the session is disconnected.
    public func connectionData(for peer: Peer) throws(SessionError) -> [UInt8] {
        guard !isDisconnected else { throw SessionError(.cancelled, "the session was disconnected") }
        ticketOrder.removeAll { tickets[$0] == nil }
        while ticketOrder.count >= Self.ticketLimit { tickets[ticketOrder.removeFirst()] = nil }
        let ticket = SecureRandom.bytes(ConnectionData.ticketLength)
        tickets[ticket] = peer.claimedFingerprint
        ticketOrder.append(ticket)
        return ConnectionData(
            fingerprint: identity.fingerprint, displayName: identity.displayName, ticket: ticket,
            addresses: ownAddresses()
        ).encoded
    }

    /// Connects to `peer` with the connection data it gave this side (Apple's `connectPeer(_:withNearbyConnectionData:)`).
    /// Both sides call it; the one with the lower fingerprint dials the other's addresses and presents the
    /// other's ticket, the other waits for it. Security is as for invitations: identities are proven with TLS,
    /// the verification hook is asked, and encryption preferences must agree.
    /// - Returns: The outcome: accepted, unreachable, refused (a bad ticket, data that names another peer or does
    ///   not decode, security), or timed out (the other side did not connect within `timeout`; zero or less
    ///   means 30 s).
    public func connect(_ peer: Peer, connectionData: [UInt8], timeout: Duration = .seconds(30)) async
        -> InvitationOutcome
    {
        // A refusal before anything is tried is reported like any failed attempt (connecting, then notConnected
        // with the reason), so an application that only watches states learns of it.
        func refuse(_ reason: String) -> InvitationOutcome {
            let outcome = InvitationOutcome.refused(reason: reason)
            let fp = peer.claimedFingerprint
            guard members[fp] == nil, !isDisconnected, inviting[fp] == nil, directWaiters[fp] == nil else {
                return outcome
            }
            report(peer, .connecting, "connecting with connection data")
            failedInvitations[fp] = outcome
            report(peer, .notConnected, outcome.description)
            return outcome
        }
        let data: ConnectionData
        do {
            data = try ConnectionData(decoding: connectionData)
        } catch {
            return refuse(error.description)
        }
        guard data.fingerprint == peer.claimedFingerprint else {
            return refuse("the connection data is \(data.displayName)'s, not \(peer.displayName)'s")
        }
        let fp = data.fingerprint
        if members[fp] != nil { return .accepted }
        guard !isDisconnected else { return .refused(reason: "the session was disconnected") }
        let timeout = timeout <= .zero ? Duration.seconds(30) : timeout
        let named = Peer(identity: .advertised(fp), displayName: data.displayName)
        if identity.fingerprint.bytes.lexicographicallyPrecedes(fp.bytes) {
            return await invite(
                named, addresses: data.addresses, serviceType: SessionWire.directServiceType, context: data.ticket,
                timeout: timeout)
        }
        guard directWaiters[fp] == nil else { return .refused(reason: "already waiting for \(data.displayName)") }
        report(named, .connecting, "waiting for \(data.displayName) to connect")
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<InvitationOutcome, Never>) in
            let timer = SessionTimer(after: timeout, on: network.loop) { [weak self] in
                Task { await self?.stopWaiting(for: fp, .timedOut) }
            }
            directWaiters[fp] = (continuation, timer)
        }
        if outcome != .accepted, members[fp] == nil {
            failedInvitations[fp] = outcome
            report(named, .notConnected, outcome.description)
        }
        return outcome
    }

    /// Withdraws this session's tickets for `peer` and stops waiting for it (Apple's `cancelConnectPeer`); a
    /// dial already under way ends as it ends.
    public func cancelConnect(_ peer: Peer) {
        let fp = peer.claimedFingerprint
        tickets = tickets.filter { $0.value != fp }
        stopWaiting(for: fp, .refused(reason: "cancelled by this side"))
    }

    private func stopWaiting(for fp: PeerFingerprint, _ outcome: InvitationOutcome) {
        guard let waiter = directWaiters.removeValue(forKey: fp) else { return }
        waiter.timer.cancel()
        waiter.continuation.resume(returning: outcome)
    }

    /// Whether this session issued `ticket` and has not seen it used.
    func holdsTicket(_ ticket: [UInt8]) -> Bool { !isDisconnected && tickets[ticket] != nil }

    /// A peer presents a ticket this session issued: admitted as by an accepted invitation, if it is the peer the
    /// ticket was issued for (the ticket is used up either way).
    func acceptDirect(
        _ link: Link, id: [UInt8], context ticket: [UInt8], timeoutMilliseconds: UInt32,
        encryption: EncryptionPreference, listener: PeerNetwork.ListenerKey
    ) async {
        guard let intended = tickets[ticket] else {
            link.send(
                .inviteAnswer(id: id, answer: .refused, reason: "this connection ticket is not (or no longer) valid"))
            return link.close("unknown connection ticket")
        }
        guard link.fingerprint == intended else {
            link.send(
                .inviteAnswer(id: id, answer: .refused, reason: "this connection ticket was issued to another peer"))
            return link.close("connection ticket of another peer")
        }
        // Used up only now: someone else who saw the data cannot spend it.
        tickets[ticket] = nil
        let invitation = Invitation(
            link: link, id: id, context: [],
            timeout: .milliseconds(Int64(timeoutMilliseconds)), serviceType: SessionWire.directServiceType,
            listener: listener, inviterEncryption: encryption, onEnd: {})
        do {
            try await invitation.accept(into: self)
        } catch {
            stopWaiting(for: intended, .refused(reason: error.reason))
        }
    }

    /// Where this session can be reached: its listener's specific addresses, or for a wildcard listener the
    /// addresses of the interfaces discovery uses (loopback last; IPv6 link-local left out, as it needs a scope).
    private func ownAddresses() -> [SocketAddress] {
        let configuration = network.configuration
        var addresses: [IPAddress] = configuration.listenAddresses.filter {
            $0 != .v4(IPv4Address(0, 0, 0, 0)) && $0 != .v6(IPv6Address("::")!)
        }
        let wildcardV4 = configuration.listenAddresses.contains(.v4(IPv4Address(0, 0, 0, 0)))
        let wildcardV6 = configuration.listenAddresses.contains(.v6(IPv6Address("::")!))
        if wildcardV4 || wildcardV6, let interfaces = try? NetworkInterfaces.current() {
            var loopback: [IPAddress] = []
            for interface in interfaces where interface.isUp {
                if case .named(let names) = configuration.discovery.interfaces, !names.contains(interface.name) {
                    continue
                }
                for entry in interface.addresses {
                    let address = entry.address
                    if case .v4 = address, !wildcardV4 { continue }
                    if case .v6 = address, !wildcardV6 || address.isLinkLocal { continue }
                    if address.isLoopback { loopback.append(address) } else { addresses.append(address) }
                }
            }
            addresses += loopback
        }
        return addresses.prefix(ConnectionData.maximumAddresses).map { SocketAddress($0, port: listenPort) }
    }

    // MARK: Rules

    private func report(_ peer: Peer, _ state: PeerState, _ reason: String) {
        let fp = peer.claimedFingerprint
        let previous = states[fp]?.state
        if state != .notConnected, previous == state { return }
        if state == .notConnected, previous == nil { return }
        states[fp] = state == .notConnected ? nil : (peer, state)
        Log.write(
            state == .reconnecting ? .warning : .info, "session",
            "'\(peer.displayName)' \(peer.claimedFingerprint): \(state): \(reason)")
        if state == .connected {
            failedInvitations[fp] = nil
            if !tickets.isEmpty { tickets = tickets.filter { $0.value != fp } }  // used, or no longer needed
            if let waiter = directWaiters.removeValue(forKey: fp) {
                waiter.timer.cancel()
                waiter.continuation.resume(returning: .accepted)
            }
        }
        if case .dropped = eventSink.yield(.peerChanged(peer, state, reason: reason)) {
            dropped.add()
        }
    }

    private func notConnected(_ peer: Peer) -> SessionError {
        SessionError(.notConnected, "\(peer.displayName) is not connected to this session")
    }

    private static func sendError(_ error: ConnectionError, peer: Peer) -> SessionError {
        switch error.code {
        case .messageTooLarge:
            SessionError(.invalidParameter, error.reason, connectionError: error)
        default:
            SessionError(
                .notConnected, "the link to \(peer.displayName) ended: \(error.reason)", connectionError: error)
        }
    }

    /// Dials a peer's addresses; one that answers "busy" (too many handshakes at once, as when a crowd invites
    /// each other) is tried again after a short, growing, jittered pause until the calling task is cancelled.
    static func dial(
        _ addresses: [SocketAddress], expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        loop: EventLoop
    ) async -> Result<PeerConnection, ConnectionError> {
        var pause = Duration.milliseconds(50)
        while true {
            do {
                return .success(
                    try await PeerConnection.connect(
                        to: addresses, expecting: expecting, configuration: configuration, loop: loop))
            } catch {
                let error = ConnectionError.wrapping(error)
                guard isBusy(error), !Task.isCancelled else { return .failure(error) }
                try? await Task.sleep(for: pause * Double.random(in: 0.5...1.5))
                pause = min(pause * 2, .seconds(1))
            }
        }
    }

    /// Whether every attempt was answered "busy" (a moment later may succeed).
    static func isBusy(_ error: ConnectionError) -> Bool {
        let codes = error.attempts.isEmpty ? [error.code] : error.attempts.map(\.error.code)
        return codes.allSatisfy { $0 == .tooManyPendingHandshakes }
    }

    static func isSecurityRefusal(_ error: ConnectionError) -> Bool {
        switch error.code {
        case .identityMismatch, .groupSecretMismatch, .encryptionMismatch, .plaintextRefused: true
        default: false
        }
    }

    /// Why a dialed connection is not the peer we meant, or nil.
    private func identityRefusal(_ connection: PeerConnection, expected: PeerFingerprint) -> String? {
        if let proven = connection.peer.fingerprint, proven != expected {
            return "identity mismatch: expected \(expected), the peer proved \(proven)"
        }
        if connection.peer.fingerprint == nil, connection.peer.claimedFingerprint != expected {
            return
                "identity mismatch: expected \(expected), the plaintext peer claims \(connection.peer.claimedFingerprint)"
        }
        return nil
    }

    /// Why this session's rules refuse a connection, or nil.
    private func securityRefusal(_ connection: PeerConnection) -> String? {
        if !configuration.encryption.allowsPlaintext, !connection.peer.isAuthenticated {
            return "encryption: this session requires TLS and the peer's connection is plaintext"
        }
        if configuration.groupSecret != nil, !connection.peer.isGroupMember {
            return "group secret: the peer's connection did not prove this session's group secret"
        }
        return nil
    }

    private func verify(_ connection: PeerConnection) async -> VerificationDecision {
        guard let hook = configuration.verifyPeer else { return .accept }
        return await hook(
            PeerVerificationRequest(
                peer: Peer(connection.peer), verificationCode: connection.verificationCode,
                protection: connection.peer.protection))
    }
}

/// A counter any thread can bump.
final class DropCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Whether a delayed acknowledgement is already scheduled for a link's reader.
final class AckFlush: Sendable {
    private let armed = Atomic<Bool>(false)
    /// Arms the flush; false if it already was.
    func arm() -> Bool { armed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged }
    func disarm() { armed.store(false, ordering: .relaxed) }
}
