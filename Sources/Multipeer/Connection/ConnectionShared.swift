internal import Synchronization

/// The part of a connection that application tasks touch from any thread: the outbound queue that `send`
/// fills and the event loop drains, and the inbound queue the loop fills and `messages` drains. Everything
/// else belongs to the loop.
final class ConnectionShared: Sendable {
    struct Outbound {
        var messages: [[UInt8]] = []
        var head = 0
        var bytes = 0
        var kickScheduled = false
        var senders: [(message: [UInt8], continuation: CheckedContinuation<Void, any Error>)] = []
    }

    struct Inbound {
        var messages: [[UInt8]] = []
        /// Whether each entry of `messages` came over flow-controlled channels (else a datagram).
        var reliable: [Bool] = []
        /// The reliable bytes handed straight to a waiting reader.
        var handedOver = 0
        /// Bytes in `messages` not taken yet.
        var bytes = 0
        /// Datagrams dropped because the application was too far behind.
        var droppedDatagrams = 0
        /// Consumed bytes reported to the loop at once: 64 KiB, or a quarter of the receive buffer limit if less.
        var reportBatch = 65_536
        var head = 0
        /// Tasks waiting for a message, first come first served. Unsafe continuations (no checking cost per
        /// message): each is resumed exactly once, by the delivery that removes it or by `close`.
        var readers: [UnsafeContinuation<[UInt8]?, Never>] = []
        var consumed = 0
        var consumeKickScheduled = false
        /// Reliable bytes given back by an iterator (``giveBack(_:reliable:)``) whose credit was already returned:
        /// reading them again must not return it twice.
        var creditDebt = 0
    }

    struct State {
        /// Set by a graceful close: new sends fail at once, queued ones are still sent.
        var outboundClosed: ConnectionError?
        var outbound = Outbound()
        var inbound = Inbound()
        var closed: ConnectionError?
        var closeWaiters: [CheckedContinuation<ConnectionError, Never>] = []
    }

    let state = Mutex(State())
    /// The most unsent bytes `send` queues before it suspends.
    let sendBufferLimit: Int

    init(sendBufferLimit: Int, receiveBufferLimit: Int) {
        self.sendBufferLimit = sendBufferLimit
        state.withLock { $0.inbound.reportBatch = max(1, min(65_536, receiveBufferLimit / 4)) }
    }

    // MARK: Outbound (application side)

    /// Queues a message; returns whether the loop must be woken to drain, or throws when closed. Suspends
    /// while the queue is over its limit.
    nonisolated(nonsending) func enqueue(_ message: [UInt8], wake: () -> Void) async throws(ConnectionError) {
        enum Decision {
            case queued(wake: Bool)
            case wait
            case closed(ConnectionError)
        }
        let decision = state.withLock { state -> Decision in
            if let closed = state.closed ?? state.outboundClosed { return .closed(closed) }
            guard state.outbound.bytes < sendBufferLimit, state.outbound.senders.isEmpty else { return .wait }
            state.outbound.messages.append(message)
            state.outbound.bytes += message.count
            let wake = !state.outbound.kickScheduled
            state.outbound.kickScheduled = true
            return .queued(wake: wake)
        }
        switch decision {
        case .queued(let shouldWake):
            if shouldWake { wake() }
        case .closed(let error):
            throw error
        case .wait:
            do {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    enum Parked {
                        case closed(ConnectionError)
                        case queued(wake: Bool)
                        case parked
                    }
                    let parked = state.withLock { state -> Parked in
                        if let closed = state.closed ?? state.outboundClosed { return .closed(closed) }
                        // The loop may have drained everything since the first look: then there is room now.
                        if state.outbound.bytes < sendBufferLimit && state.outbound.senders.isEmpty {
                            state.outbound.messages.append(message)
                            state.outbound.bytes += message.count
                            let wake = !state.outbound.kickScheduled
                            state.outbound.kickScheduled = true
                            return .queued(wake: wake)
                        }
                        // The message joins the queue when there is room, in the order senders arrived.
                        state.outbound.senders.append((message, continuation))
                        return .parked
                    }
                    switch parked {
                    case .closed(let error): continuation.resume(throwing: error)
                    case .queued(let shouldWake):
                        if shouldWake { wake() }
                        continuation.resume()
                    case .parked: break
                    }
                }
            } catch let error as ConnectionError {
                throw error
            } catch {
                throw ConnectionError(code: .internalFailure, reason: "\(error)")
            }
        }
    }

    // MARK: Outbound (loop side)

    /// Takes up to `count` queued messages for the core, with their total size.
    func takeOutbound(upTo count: Int) -> (messages: [[UInt8]], bytes: Int) {
        state.withLock { state in
            state.outbound.kickScheduled = false
            let available = state.outbound.messages.count - state.outbound.head
            let taken = min(count, available)
            guard taken > 0 else { return ([], 0) }
            state.outbound.kickScheduled = true  // the loop is draining; senders need not wake it
            var messages: [[UInt8]] = []
            if state.outbound.head == 0 && taken == available {
                // All of them: the array changes hands, no message is copied or retained again.
                swap(&messages, &state.outbound.messages)
                state.outbound.messages.reserveCapacity(min(messages.count, 4096))
            } else {
                let end = state.outbound.head + taken
                messages = Array(state.outbound.messages[state.outbound.head..<end])
                state.outbound.head = end
                if end == state.outbound.messages.count {
                    state.outbound.messages.removeAll(keepingCapacity: state.outbound.messages.count <= 4096)
                    state.outbound.head = 0
                }
            }
            return (messages, messages.reduce(0) { $0 + $1.count })
        }
    }

    /// The loop finished draining: the next `send` must wake it again.
    /// - Returns: Whether messages are still queued.
    func drainPaused() -> Bool {
        state.withLock { state in
            state.outbound.kickScheduled = false
            return state.outbound.head < state.outbound.messages.count
        }
    }

    /// A graceful close began: later sends fail with `error`; messages already accepted are still sent.
    func closeOutbound(_ error: ConnectionError) {
        state.withLock { state in
            if state.outboundClosed == nil { state.outboundClosed = error }
        }
    }

    /// Whether messages (accepted or parked senders') are still waiting for the core.
    var hasOutbound: Bool {
        state.withLock { $0.outbound.head < $0.outbound.messages.count || !$0.outbound.senders.isEmpty }
    }

    /// `count` bytes left the outbound queue (framed by the core); resumes suspended senders that now fit.
    func outboundSent(_ count: Int) {
        let resumed = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.outbound.bytes -= count
            var resumed: [CheckedContinuation<Void, any Error>] = []
            while let first = state.outbound.senders.first, state.outbound.bytes < sendBufferLimit {
                state.outbound.senders.removeFirst()
                state.outbound.messages.append(first.message)
                state.outbound.bytes += first.message.count
                resumed.append(first.continuation)
            }
            return resumed
        }
        for continuation in resumed { continuation.resume() }
    }

    // MARK: Inbound

    /// Delivers a message to the application (loop side).
    /// - Parameter limit: For an unreliable datagram, the unread bytes beyond which it is dropped instead.
    func deliver(_ message: [UInt8], dropAbove limit: Int? = nil) {
        let reader = state.withLock { state -> UnsafeContinuation<[UInt8]?, Never>? in
            if !state.inbound.readers.isEmpty {
                if limit == nil { state.inbound.handedOver += message.count }
                return state.inbound.readers.removeFirst()
            }
            if let limit, state.inbound.bytes > limit {
                state.inbound.droppedDatagrams += 1
                return nil
            }
            state.inbound.messages.append(message)
            state.inbound.reliable.append(limit == nil)
            state.inbound.bytes += message.count
            return nil
        }
        reader?.resume(returning: message)
    }

    /// Delivers reliable messages in order with one lock (loop side): waiting readers get the first ones, the
    /// rest are queued.
    func deliver(batch: [[UInt8]]) {
        guard batch.count > 1 else {
            if let message = batch.first { deliver(message) }
            return
        }
        let handed = state.withLock { state -> [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] in
            var handed: [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] = []
            var index = 0
            // Readers only wait while nothing is queued, so handing them the first messages keeps the order.
            while index < batch.count, !state.inbound.readers.isEmpty {
                state.inbound.handedOver += batch[index].count
                handed.append((state.inbound.readers.removeFirst(), batch[index]))
                index += 1
            }
            while index < batch.count {
                state.inbound.messages.append(batch[index])
                state.inbound.reliable.append(true)
                state.inbound.bytes += batch[index].count
                index += 1
            }
            return handed
        }
        for (reader, message) in handed { reader.resume(returning: message) }
    }

    /// Bytes of delivered messages the application has not taken yet.
    var unreadBytes: Int { state.withLock { $0.inbound.bytes } }

    /// Datagrams dropped because the application did not read fast enough.
    var droppedDatagrams: Int { state.withLock { $0.inbound.droppedDatagrams } }

    /// The next message, or nil once the connection closed and every message was taken. `wake` is called
    /// when the loop should be told how many reliable bytes the application took (to return their credit).
    nonisolated(nonsending) func nextMessage(consumed wake: @escaping @Sendable () -> Void) async -> [UInt8]? {
        enum Decision {
            case message([UInt8], wake: Bool)
            case end
            case wait
        }
        let decision = state.withLock { state -> Decision in
            if let (message, wake) = Self.pop(&state.inbound) { return .message(message, wake: wake) }
            return state.closed == nil ? .wait : .end
        }
        switch decision {
        case .message(let message, let shouldWake):
            if shouldWake { wake() }
            return message
        case .end:
            return nil
        case .wait:
            let message = await withUnsafeContinuation { (continuation: UnsafeContinuation<[UInt8]?, Never>) in
                let ready = state.withLock { state -> ([UInt8]?, Bool)? in
                    if let (message, wake) = Self.pop(&state.inbound) { return (message, wake) }
                    if state.closed != nil { return (nil, false) }
                    state.inbound.readers.append(continuation)
                    return nil
                }
                if let (message, shouldWake) = ready {
                    if shouldWake { wake() }
                    continuation.resume(returning: message)
                }
            }
            let shouldWake = state.withLock { state in
                state.inbound.consumed += state.inbound.handedOver
                state.inbound.handedOver = 0
                return Self.shouldReportConsumed(&state.inbound)
            }
            if shouldWake { wake() }
            return message
        }
    }

    /// Up to `limit` queued messages (at least one, whatever its size, and then no more than 64 KiB in all), or
    /// a message a waiting reader was handed; empty once the connection closed and every message was taken.
    /// Taking several under one lock is what lets a reader keep up with many small messages.
    /// The messages come with whether each came over the reliable channels, for ``giveBack(_:reliable:)``:
    /// `reliable` is empty when all of them did (the usual case, which then costs no array).
    nonisolated(nonsending) func nextMessages(limit: Int, consumed wake: @escaping @Sendable () -> Void) async
        -> (messages: [[UInt8]], reliable: [Bool])
    {
        let (batch, reliable, shouldWake) = state.withLock { state -> ([[UInt8]], [Bool], Bool) in
            var batch: [[UInt8]] = []
            var reliable: [Bool] = []
            var bytes = 0
            var shouldWake = false
            while batch.count < limit, bytes < 65_536, state.inbound.head < state.inbound.messages.count {
                let isReliable = state.inbound.reliable[state.inbound.head]
                if !isReliable && reliable.isEmpty { reliable = Array(repeating: true, count: batch.count) }
                if !reliable.isEmpty { reliable.append(isReliable) }
                guard let (message, wake) = Self.pop(&state.inbound) else { break }
                batch.append(message)
                bytes += message.count
                shouldWake = shouldWake || wake
            }
            return (batch, reliable, shouldWake)
        }
        if shouldWake { wake() }
        if !batch.isEmpty { return (batch, reliable) }
        guard let message = await nextMessage(consumed: wake) else { return ([], []) }
        return ([message], [])
    }

    /// Puts messages an iterator took but never handed out back in front of the queue, in order (the iterator
    /// was dropped, say after a `break`): the next reader gets them, and nothing is lost. Their credit was
    /// returned when they were taken, so it is not returned again when they are read.
    func giveBack(_ messages: ArraySlice<[UInt8]>, reliable: ArraySlice<Bool>) {
        guard !messages.isEmpty else { return }
        let reliable = reliable.isEmpty ? ArraySlice(repeating: true, count: messages.count) : reliable
        let resumed = state.withLock { state -> [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] in
            if state.inbound.head > 0 {
                state.inbound.messages.removeSubrange(0..<state.inbound.head)
                state.inbound.reliable.removeSubrange(0..<state.inbound.head)
                state.inbound.head = 0
            }
            state.inbound.messages.insert(contentsOf: messages, at: 0)
            state.inbound.reliable.insert(contentsOf: reliable, at: 0)
            for (message, isReliable) in zip(messages, reliable) {
                state.inbound.bytes += message.count
                if isReliable { state.inbound.creditDebt += message.count }
            }
            // A reader waiting now found the queue empty: it gets the first of them.
            var resumed: [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] = []
            while !state.inbound.readers.isEmpty, let (message, _) = Self.pop(&state.inbound) {
                resumed.append((state.inbound.readers.removeFirst(), message))
            }
            return resumed
        }
        for (reader, message) in resumed { reader.resume(returning: message) }
    }

    /// Reads taken since the last report are told to the loop in batches of ``consumedReportBatch`` bytes: the
    /// loop only needs them to release credit it held back, which starts at ``ConnectionConfiguration/
    /// receiveBufferLimit`` unread bytes, well above one batch. Waking the loop for every message would cost a
    /// thread wake-up per message.
    private static func shouldReportConsumed(_ inbound: inout Inbound) -> Bool {
        guard inbound.consumed >= inbound.reportBatch, !inbound.consumeKickScheduled else { return false }
        inbound.consumeKickScheduled = true
        return true
    }

    /// Takes the first queued message; returns it and whether the loop must be woken to return credit.
    private static func pop(_ inbound: inout Inbound) -> ([UInt8], Bool)? {
        guard inbound.head < inbound.messages.count else { return nil }
        let message = inbound.messages[inbound.head]
        let reliable = inbound.reliable[inbound.head]
        inbound.messages[inbound.head] = []
        inbound.head += 1
        inbound.bytes -= message.count
        if inbound.head == inbound.messages.count {
            let keep = inbound.messages.count <= 4096
            inbound.messages.removeAll(keepingCapacity: keep)
            inbound.reliable.removeAll(keepingCapacity: keep)
            inbound.head = 0
        }
        guard reliable else { return (message, false) }
        let owed = min(inbound.creditDebt, message.count)
        inbound.creditDebt -= owed
        inbound.consumed += message.count - owed
        return (message, shouldReportConsumed(&inbound))
    }

    /// Bytes the application took since the last call (loop side).
    func takeConsumed() -> Int {
        state.withLock { state in
            defer {
                state.inbound.consumed = 0
                state.inbound.consumeKickScheduled = false
            }
            return state.inbound.consumed
        }
    }

    // MARK: Close

    /// Records the end of the connection and wakes everyone waiting.
    func close(_ error: ConnectionError) {
        let (senders, readers, waiters) = state.withLock { state in
            if state.closed == nil { state.closed = error }
            let senders = state.outbound.senders.map(\.continuation)
            state.outbound.senders = []
            let readers = state.inbound.readers
            state.inbound.readers = []
            let waiters = state.closeWaiters
            state.closeWaiters = []
            return (senders, readers, waiters)
        }
        let final = closedError ?? error
        for sender in senders { sender.resume(throwing: final) }
        for reader in readers { reader.resume(returning: nil) }
        for waiter in waiters { waiter.resume(returning: final) }
    }

    /// Why the connection ended, or nil while it is open.
    var closedError: ConnectionError? { state.withLock { $0.closed } }

    /// Waits for the end of the connection.
    func waitUntilClosed() async -> ConnectionError {
        await withCheckedContinuation { (continuation: CheckedContinuation<ConnectionError, Never>) in
            let closed = state.withLock { state -> ConnectionError? in
                if let closed = state.closed { return closed }
                state.closeWaiters.append(continuation)
                return nil
            }
            if let closed { continuation.resume(returning: closed) }
        }
    }
}
