internal import MultipeerIO

// The message path: sends write in place on the member's link without entering the actor; each link's reader runs
// on its connection's event loop and hands messages to the inbox, whose readers take them in batches.

extension Session {
    /// The received messages as an `AsyncSequence`.
    public struct Messages: AsyncSequence, Sendable {
        let inbox: SessionInbox

        /// Makes the iterator.
        public func makeAsyncIterator() -> Iterator { Iterator(inbox: inbox) }

        /// Takes messages from the session, up to 64 at a time (given back, when the iterator is dropped, if not
        /// handed out).
        public struct Iterator: AsyncIteratorProtocol {
            let inbox: SessionInbox
            private var batch: TakenEntries?

            init(inbox: SessionInbox) { self.inbox = inbox }

            /// The next message, or nil once the session disconnected and every message was read, or when the
            /// calling task is cancelled.
            public mutating func next() async -> ReceivedMessage? {
                if let entry = batch?.next() {
                    entry.onTaken?()
                    return entry.message
                }
                batch = nil
                let entries = await inbox.next(upTo: SessionInbox.batchLimit)
                guard !entries.isEmpty else { return nil }
                let taken = TakenEntries(inbox: inbox, entries: entries)
                batch = taken
                guard let entry = taken.next() else { return nil }
                entry.onTaken?()
                return entry.message
            }

            /// The messages waiting now, at least one and at most 64, in order (what ``next()`` would return one by
            /// one until it waited): for a reader that hands them on in one go. Empty once the session disconnected
            /// and every message was read, or when the calling task is cancelled.
            public mutating func nextBatch() async -> [ReceivedMessage] {
                if let rest = batch?.rest(), !rest.isEmpty {
                    batch = nil
                    return Self.take(rest)
                }
                batch = nil
                return Self.take(await inbox.next(upTo: SessionInbox.batchLimit)[...])
            }

            private static func take(_ entries: ArraySlice<SessionInbox.Entry>) -> [ReceivedMessage] {
                var messages: [ReceivedMessage] = []
                messages.reserveCapacity(entries.count)
                for entry in entries {
                    entry.onTaken?()
                    messages.append(entry.message)
                }
                return messages
            }
        }
    }

    /// The messages members send, in each sender's order; ends when the session disconnects. Several readers
    /// share them (each message goes to one, and each reader takes up to 64 at a time: an iterator dropped before it
    /// handed out what it took gives the rest back, which another reader then gets after what it already had).
    public nonisolated var messages: Messages { Messages(inbox: inbox) }

    // MARK: Sending

    /// Sends a message to each of `peers`.
    ///
    /// `.reliable` messages are numbered per peer and kept until the peer confirms it has them: they arrive
    /// exactly once and in order, across a dropped and re-established link too, or are reported
    /// ``SessionEvent/undelivered(_:_:reason:)`` by the numbers returned here. The call waits while
    /// ``SessionConfiguration/replayBufferBytes`` of a peer's messages are unconfirmed (and returns `cancelled` for
    /// that peer when its task is cancelled). A peer that is `reconnecting` still takes reliable messages.
    /// `.unreliable` ones go only to connected peers and may be dropped.
    /// - Returns: For every peer, `enqueued` with the message's number or why not (`notConnected` for a peer
    ///   that is not a member, `invalidParameter` for a message longer than the peer accepts).
    public nonisolated func send(_ data: [UInt8], to peers: [Peer], mode: SendMode = .reliable) async -> [Peer:
        SendResult]
    {
        var results = [Peer: SendResult](minimumCapacity: peers.count)
        var waiting: [(Peer, Conversation)] = []
        for peer in peers {
            guard let conversation = conversations.get(peer.claimedFingerprint) else {
                results[peer] = .failed(Self.notConnected(peer))
                continue
            }
            switch mode {
            case .reliable:
                // Queued at once where there is room; a peer whose replay buffer is full waits below, without
                // holding the others back.
                switch conversation.trySend(data, receipt: false) {
                case .success(let sequence): results[peer] = .enqueued(sequence)
                case .failure(let error): results[peer] = .failed(error)
                case nil: waiting.append((peer, conversation))
                }
            case .unreliable:
                results[peer] = Self.sendUnreliable(data, on: conversation, to: peer)
            }
        }
        guard !waiting.isEmpty else { return results }
        await withTaskGroup(of: (Peer, SendResult).self) { group in
            for (peer, conversation) in waiting {
                group.addTask {
                    switch await conversation.send(data, receipt: false) {
                    case .success(let sequence): (peer, .enqueued(sequence))
                    case .failure(let error): (peer, .failed(error))
                    }
                }
            }
            for await (peer, result) in group { results[peer] = result }
        }
        return results
    }

    /// Sends a message to `peer` without waiting, for callers that cannot (a synchronous API, a delegate's
    /// queue): as ``send(_:to:mode:)``, except that a reliable message is refused with `unavailable` instead of
    /// waited for when ``SessionConfiguration/replayBufferBytes`` of the peer's messages are already unconfirmed.
    /// Such a caller is not held to the link's pace: up to that many bytes may wait for the peer.
    /// - Returns: `enqueued` with the message's number (0 for an unreliable one), or why not: `notConnected`,
    ///   `invalidParameter` (too long), `unavailable` (full; for an unreliable message, dropped because the link is
    ///   behind).
    public nonisolated func trySend(_ data: [UInt8], to peer: Peer, mode: SendMode = .reliable) -> SendResult {
        guard let conversation = conversations.get(peer.claimedFingerprint) else {
            return .failed(Self.notConnected(peer))
        }
        switch mode {
        case .reliable:
            switch conversation.trySend(data, receipt: false, paced: false) {
            case .success(let sequence): return .enqueued(sequence)
            case .failure(let error): return .failed(error)
            case nil: return .failed(full(peer))
            }
        case .unreliable:
            return Self.sendUnreliable(data, on: conversation, to: peer)
        }
    }

    /// ``sendExpectingReceipt(_:to:)`` without waiting: refused with `unavailable` when the peer's replay buffer
    /// is full (see ``trySend(_:to:mode:)``).
    /// - Throws: ``SessionError`` as ``sendExpectingReceipt(_:to:)``, or `unavailable`.
    public nonisolated func trySendExpectingReceipt(_ data: [UInt8], to peer: Peer) throws(SessionError)
        -> PendingDelivery
    {
        guard let conversation = conversations.get(peer.claimedFingerprint) else { throw Self.notConnected(peer) }
        switch conversation.trySendForReceipt(data) {
        case .success(let (sequence, incarnation)):
            return PendingDelivery(peer: peer, sequence: sequence, conversation: conversation, incarnation: incarnation)
        case .failure(let error): throw error
        case nil: throw full(peer)
        }
    }

    /// Whether `peer` is a member now (connected or reconnecting: one that takes reliable messages), without
    /// waiting for the session.
    public nonisolated func isMember(_ peer: Peer) -> Bool {
        conversations.get(peer.claimedFingerprint) != nil
    }

    private nonisolated func full(_ peer: Peer) -> SessionError {
        SessionError(
            .unavailable,
            "\(configuration.replayBufferBytes) bytes of messages to \(peer.displayName) are not yet confirmed (it is "
                + "not keeping up); try again once it has taken some")
    }

    private static func sendUnreliable(_ data: [UInt8], on conversation: Conversation, to peer: Peer) -> SendResult {
        guard let link = conversation.link else {
            return .failed(SessionError(.notConnected, "\(peer.displayName) is reconnecting"))
        }
        if let limit = conversation.messageLimit, data.count + 1 > limit {
            return .failed(
                SessionError(
                    .invalidParameter,
                    "a message of \(data.count) bytes is longer than \(peer.displayName) accepts (\(limit - 1)); "
                        + "send larger data as a stream or a resource"))
        }
        let message = [ReliabilityStateMachine.Tag.unnumbered] + data
        do {
            // A datagram when it fits one; otherwise on the link, but dropped rather than waited for when the
            // link is behind (an unreliable message is never queued behind others).
            try link.connection.trySendUnreliable(message)
            return .enqueued(0)
        } catch {
            switch error.code {
            case .messageTooLarge: return .failed(SessionError(.invalidParameter, error.reason, connectionError: error))
            case .sendBufferFull:
                return .failed(
                    SessionError(
                        .unavailable, "dropped: the link to \(link.peer.displayName) is behind", connectionError: error)
                )
            default:
                return .failed(
                    SessionError(
                        .notConnected, "the link to \(link.peer.displayName) ended: \(error.reason)",
                        connectionError: error))
            }
        }
    }

    /// Sends a message reliably and returns once the peer's application has taken it from its
    /// ``messages``.
    /// - Throws: ``SessionError``: `notConnected` when the peer is not a member, or leaves (or is not back
    ///   within the reconnection grace, or restarts) before the receipt arrives; `invalidParameter` when it is too
    ///   long; `cancelled` when the calling task is.
    public nonisolated func sendAcknowledged(_ data: [UInt8], to peer: Peer) async throws(SessionError) {
        try await sendExpectingReceipt(data, to: peer).delivered()
    }

    /// Queues a reliable message like ``send(_:to:mode:)`` (in order with every other message to `peer`) and
    /// returns at once a ``PendingDelivery`` whose `delivered()` waits for the peer's receipt, as
    /// ``sendAcknowledged(_:to:)`` does: for callers that must queue in order and learn each outcome later.
    /// - Throws: ``SessionError`` as ``sendAcknowledged(_:to:)`` does when the message cannot be queued.
    public nonisolated func sendExpectingReceipt(_ data: [UInt8], to peer: Peer) async throws(SessionError)
        -> PendingDelivery
    {
        guard let conversation = conversations.get(peer.claimedFingerprint) else { throw Self.notConnected(peer) }
        switch await conversation.sendForReceipt(data) {
        case .success(let (sequence, incarnation)):
            return PendingDelivery(peer: peer, sequence: sequence, conversation: conversation, incarnation: incarnation)
        case .failure(let error): throw error
        }
    }

    // MARK: Receiving

    /// The peer's `resume` arrived: write our numbered messages from where it is (the writer takes over from
    /// in-place sends only under back-pressure), read its on the connection's event loop (no thread hand-off
    /// between the connection and the inbox).
    func startConversation(_ link: Link, _ conversation: Conversation) {
        let generation = link.generation
        let connection = link.connection
        // The writer runs off the loop: on it, each write would be serviced at once (a system call per message);
        // from another thread the loop drains what accumulated in one go.
        Task {
            while let entry = await conversation.nextToWrite(generation: generation) {
                do throws(ConnectionError) {
                    try await connection.send(entry.message)
                } catch {
                    // A closing link: the next one writes the rest. Anything else (a message longer than this
                    // link's peer accepts) would stall the conversation on a link that stays up: end the link.
                    if connection.closeReason == nil {
                        _ = await connection.close(code: 2, reason: "message \(entry.sequence): \(error.reason)")
                    }
                    break
                }
            }
        }
        let inbox = inbox
        let loop = network.loop
        Task(executorPreference: connection.eventLoop) {
            await Self.read(link, conversation: conversation, generation: generation, inbox: inbox, loop: loop)
        }
    }

    /// Reads a member link's messages into the inbox, a batch at a time (one hand-over to the application for all
    /// of them): numbered ones once each and in order, acknowledging every 32 messages or 256 KiB, and within
    /// 20 ms of the last.
    private nonisolated static func read(
        _ link: Link, conversation: Conversation, generation: Int, inbox: SessionInbox, loop: EventLoop
    ) async {
        let connection = link.connection
        let driver = connection.driver
        let peer = link.peer
        let header = ReliabilityStateMachine.Tag.headerLength
        await conversation.waitForOlderDeliveries(generation: generation)
        while true {
            let batch = await driver.shared.nextMessages(limit: SessionInbox.batchLimit) { driver.serviceSoon() }
            if batch.isEmpty { return }
            var entries: [SessionInbox.Entry] = []
            entries.reserveCapacity(batch.count)
            var numbered = 0
            var numberedBytes = 0
            var broken: String?
            for data in batch {
                guard let tag = data.first else {
                    broken = "an empty message without a session tag"
                    break
                }
                if tag == ReliabilityStateMachine.Tag.unnumbered {
                    entries.append(
                        SessionInbox.Entry(
                            message: ReceivedMessage(peer: peer, bytes: data.dropFirst()), onTaken: nil))
                    continue
                }
                guard
                    tag == ReliabilityStateMachine.Tag.numbered
                        || tag == ReliabilityStateMachine.Tag.numberedWithReceipt,
                    data.count >= header
                else {
                    broken = "a message without a valid session tag"
                    break
                }
                let sequence = data.withUnsafeBytes {
                    UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 1, as: UInt64.self))
                }
                switch conversation.arrival(of: sequence, generation: generation) {
                case .drop:
                    continue
                case .gap:
                    broken = "message \(sequence) skips a sequence number"
                case .deliver(let epoch):
                    var onTaken: (@Sendable () -> Void)?
                    if tag == ReliabilityStateMachine.Tag.numberedWithReceipt {
                        onTaken = { @Sendable in conversation.taken(sequence, epoch: epoch) }
                    }
                    entries.append(
                        SessionInbox.Entry(
                            message: ReceivedMessage(peer: peer, bytes: data[header...]), onTaken: onTaken))
                    numbered += 1
                    numberedBytes += data.count - header
                }
                if broken != nil { break }
            }
            if !entries.isEmpty { await inbox.push(contentsOf: entries) }
            if numbered > 0 {
                let due = conversation.delivered(generation: generation, count: numbered, bytes: numberedBytes)
                if let ack = due.acknowledge {
                    link.send(.ack(received: ack))
                } else if due.armFlush {
                    // Confirm stragglers within 20 ms, so a quiet peer does not keep them in our replay buffer.
                    _ = SessionTimer(after: .milliseconds(20), on: loop) {
                        if let ack = conversation.flush(generation: generation) { link.send(.ack(received: ack)) }
                    }
                }
            }
            if let broken {
                _ = await connection.close(code: 2, reason: broken)
                return
            }
        }
    }
}
