import DequeModule
import MultipeerIO

/// The part of a connection that application tasks touch from any thread: the outbound queue that `send`
/// fills and the event loop drains, and the inbound queue the loop fills and `messages` drains. Everything
/// else belongs to the loop.
final class ConnectionShared: Sendable {
    struct Outbound {
        /// Messages accepted and not taken by the core; `messages[head...]` are still queued, and the taken ones
        /// before them are dropped once they are half of the array.
        ///
        /// An array with a head index rather than a `Deque`: ``takeOutbound(upTo:)`` hands the core the array
        /// itself when it takes everything queued (the common case), so no message is copied or retained again,
        /// where a `Deque` would have to be copied into the array the core takes.
        var messages: [OutboundMessage] = []
        var head = 0
        var bytes = 0
        var kickScheduled = false
        /// Senders waiting for room, first come first served.
        var senders: Deque<(message: OutboundMessage, continuation: CheckedContinuation<Void, any Error>)> = []
    }

    struct Inbound {
        /// What a queued message holds, and so what taking it releases.
        enum Entry {
            /// A reliable message: its credit goes back to the peer.
            case credited
            /// A datagram: its charge leaves ``unreliableCharge``.
            case datagram
            /// A message an iterator took and gave back: what it held was released when it was first taken.
            case givenBack
        }

        /// Messages delivered and not taken yet, oldest first, each with what taking it releases (see ``Entry``).
        var messages: Deque<(bytes: [UInt8], entry: Entry)> = []
        /// Whether `messages` held more than ``retainedCapacity`` entries since it was last empty: then its storage
        /// is released when it empties (a `Deque` keeps its storage otherwise, and cannot say how large it is).
        var grewLarge = false
        /// Bytes in `messages` not taken yet.
        var bytes = 0
        /// Datagrams queued, in bytes plus ``FlowController/messageOverhead`` each, bounded by the unreliable limit.
        var unreliableCharge = 0
        /// Datagrams dropped because the application was too far behind.
        var droppedDatagrams = 0
        /// Tasks waiting for a message, first come first served. Unsafe continuations (no checking cost per
        /// message): each is resumed exactly once, by the delivery that removes it or by `close`.
        var readers: Deque<UnsafeContinuation<[UInt8]?, Never>> = []
        /// Credited messages taken since the last report to the loop, and their cost.
        var takenCount = 0
        var takenCost = 0
        /// The loop was asked to collect the report and has not yet.
        var reportScheduled = false

        /// Entries whose storage `messages` keeps once it empties; a larger queue's is released, so a burst does
        /// not leave an idle connection holding it.
        static let retainedCapacity = 4096
    }

    /// Session-layer control messages received and not yet handled, bounded in number and size.
    struct SessionInbox {
        /// The most messages waiting.
        ///
        /// 256: the session layer handles each as it comes; an honest burst (introductions to a large mesh)
        /// stays far below.
        static let maximumCount = 256
        /// The most bytes waiting (bodies plus a charge per message).
        ///
        /// 1 MiB: a small constant next to the connection's windows.
        static let maximumCharge = 1 << 20

        /// Messages not taken yet, oldest first.
        var messages: Deque<SessionMessage> = []
        var charge = 0
        /// Tasks waiting for a session message, first come first served.
        var readers: Deque<UnsafeContinuation<SessionMessage?, Never>> = []
    }

    struct State {
        /// Set by a graceful close: new sends fail at once, queued ones are still sent.
        var outboundClosed: ConnectionError?
        var outbound = Outbound()
        var inbound = Inbound()
        var session = SessionInbox()
        var closed: ConnectionError?
        var closeWaiters: [CheckedContinuation<ConnectionError, Never>] = []
    }

    let state = Lock(State())
    /// The most unsent bytes `send` queues before it suspends.
    let sendBufferLimit: Int
    /// The most datagram charge queued before datagrams are dropped.
    let unreliableBufferLimit: Int

    init(sendBufferLimit: Int, unreliableBufferLimit: Int) {
        self.sendBufferLimit = sendBufferLimit
        self.unreliableBufferLimit = unreliableBufferLimit
    }

    // MARK: Outbound (application side)

    /// Queues a message; returns whether the loop must be woken to drain, or throws when closed. Suspends
    /// while the queue is over its limit.
    nonisolated(nonsending) func enqueue(_ message: OutboundMessage, wake: () -> Void) async throws(ConnectionError) {
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

    /// Queues a message without ever suspending; returns whether the loop must be woken to drain.
    /// - Throws: The close reason once closing or closed, or ``ConnectionError/Code/sendBufferFull(limit:)`` while
    ///   ``sendBufferLimit`` bytes (or parked senders) wait.
    func tryEnqueue(_ message: OutboundMessage) throws(ConnectionError) -> Bool {
        let result = state.withLock { state -> Result<Bool, ConnectionError> in
            if let closed = state.closed ?? state.outboundClosed { return .failure(closed) }
            guard state.outbound.bytes < sendBufferLimit, state.outbound.senders.isEmpty else {
                return .failure(.sendBufferFull(limit: sendBufferLimit))
            }
            state.outbound.messages.append(message)
            state.outbound.bytes += message.count
            let wake = !state.outbound.kickScheduled
            state.outbound.kickScheduled = true
            return .success(wake)
        }
        return try result.get()
    }

    // MARK: Outbound (loop side)

    /// Takes up to `count` queued messages for the core, with their total size.
    func takeOutbound(upTo count: Int) -> (messages: [OutboundMessage], bytes: Int) {
        state.withLock { state in
            state.outbound.kickScheduled = false
            let available = state.outbound.messages.count - state.outbound.head
            let taken = min(count, available)
            guard taken > 0 else { return ([], 0) }
            state.outbound.kickScheduled = true  // the loop is draining; senders need not wake it
            var messages: [OutboundMessage] = []
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
                } else if end >= 64 && end * 2 >= state.outbound.messages.count {
                    // Compacted as it is taken: the core takes at most its room at a time, so a sender always
                    // ahead of it never lets the queue empty, and taken messages would otherwise be kept forever.
                    state.outbound.messages.removeSubrange(0..<end)
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
            while state.outbound.bytes < sendBufferLimit, let first = state.outbound.senders.popFirst() {
                state.outbound.messages.append(first.message)
                state.outbound.bytes += first.message.count
                resumed.append(first.continuation)
            }
            return resumed
        }
        for continuation in resumed { continuation.resume() }
    }

    // MARK: Inbound

    /// Delivers a datagram's message to the application (loop side): to a waiting reader, else queued unless the
    /// queued datagrams' charge is over ``unreliableBufferLimit``, when it is dropped and counted.
    func deliverUnreliable(_ message: [UInt8]) {
        let reader = state.withLock { state -> UnsafeContinuation<[UInt8]?, Never>? in
            if let reader = state.inbound.readers.popFirst() { return reader }
            let charge = FlowController.messageCost(length: message.count)
            guard state.inbound.unreliableCharge + charge <= unreliableBufferLimit else {
                state.inbound.droppedDatagrams += 1
                return nil
            }
            state.inbound.unreliableCharge += charge
            Self.append(message, .datagram, to: &state.inbound)
            return nil
        }
        reader?.resume(returning: message)
    }

    /// Delivers reliable messages in order with one lock (loop side): waiting readers get the first ones, the
    /// rest are queued.
    /// - Returns: Whether the loop should collect the taken messages' report now (``takeTaken()``).
    @discardableResult
    func deliver(batch: [[UInt8]]) -> Bool {
        let (handed, report) = state.withLock { state -> ([(UnsafeContinuation<[UInt8]?, Never>, [UInt8])], Bool) in
            var handed: [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] = []
            var index = 0
            // Readers only wait while nothing is queued, so handing them the first messages keeps the order.
            while index < batch.count, !state.inbound.readers.isEmpty {
                Self.countTaken(batch[index].count, &state.inbound)
                handed.append((state.inbound.readers.removeFirst(), batch[index]))
                index += 1
            }
            while index < batch.count {
                Self.append(batch[index], .credited, to: &state.inbound)
                index += 1
            }
            return (handed, Self.reportDue(&state.inbound))
        }
        for (reader, message) in handed { reader.resume(returning: message) }
        return report
    }

    private static func append(_ message: [UInt8], _ entry: Inbound.Entry, to inbound: inout Inbound) {
        inbound.messages.append((message, entry))
        if inbound.messages.count > Inbound.retainedCapacity { inbound.grewLarge = true }
        inbound.bytes += message.count
    }

    /// Bytes of delivered messages the application has not taken yet.
    var unreadBytes: Int { state.withLock { $0.inbound.bytes } }

    /// Messages delivered and not taken yet.
    var unreadCount: Int { state.withLock { $0.inbound.messages.count } }

    /// Datagrams dropped because the application did not read fast enough.
    var droppedDatagrams: Int { state.withLock { $0.inbound.droppedDatagrams } }

    /// The next message, or nil once the connection closed and every message was taken. `wake` is called when
    /// the loop should collect how many messages the application took (to give their credit back).
    nonisolated(nonsending) func nextMessage(consumed wake: @escaping @Sendable () -> Void) async -> [UInt8]? {
        enum Decision {
            case message([UInt8], wake: Bool)
            case end
            case wait
        }
        let decision = state.withLock { state -> Decision in
            if let message = Self.pop(&state.inbound) { return .message(message, wake: Self.reportDue(&state.inbound)) }
            return state.closed == nil ? .wait : .end
        }
        switch decision {
        case .message(let message, let shouldWake):
            if shouldWake { wake() }
            return message
        case .end:
            return nil
        case .wait:
            return await withUnsafeContinuation { (continuation: UnsafeContinuation<[UInt8]?, Never>) in
                let ready = state.withLock { state -> ([UInt8]?, Bool)? in
                    if let message = Self.pop(&state.inbound) { return (message, Self.reportDue(&state.inbound)) }
                    if state.closed != nil { return (nil, false) }
                    state.inbound.readers.append(continuation)
                    return nil
                }
                if let (message, shouldWake) = ready {
                    if shouldWake { wake() }
                    continuation.resume(returning: message)
                }
            }
        }
    }

    /// Up to `limit` queued messages (at least one, whatever its size, and then no more than 64 KiB in all), or
    /// a message a waiting reader was handed; empty once the connection closed and every message was taken.
    /// Taking several under one lock is what lets a reader keep up with many small messages.
    nonisolated(nonsending) func nextMessages(limit: Int, consumed wake: @escaping @Sendable () -> Void) async
        -> [[UInt8]]
    {
        let (batch, shouldWake) = state.withLock { state -> ([[UInt8]], Bool) in
            var batch: [[UInt8]] = []
            var bytes = 0
            while batch.count < limit, bytes < 65_536, let message = Self.pop(&state.inbound) {
                batch.append(message)
                bytes += message.count
            }
            return (batch, Self.reportDue(&state.inbound))
        }
        if shouldWake { wake() }
        if !batch.isEmpty { return batch }
        guard let message = await nextMessage(consumed: wake) else { return [] }
        return [message]
    }

    /// Puts messages an iterator took but never handed out back in front of the queue, in order (the iterator
    /// was dropped, say after a `break`): the next reader gets them, and nothing is lost. Their credit was
    /// counted (and a datagram's charge released) when they were taken, so taking them again releases nothing.
    func giveBack(_ messages: ArraySlice<[UInt8]>) {
        guard !messages.isEmpty else { return }
        let resumed = state.withLock { state -> [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] in
            let givenBack = messages.lazy.map { (bytes: $0, entry: Inbound.Entry.givenBack) }
            state.inbound.messages.prepend(contentsOf: givenBack)
            if state.inbound.messages.count > Inbound.retainedCapacity { state.inbound.grewLarge = true }
            for message in messages { state.inbound.bytes += message.count }
            // A reader waiting now found the queue empty: it gets the first of them.
            var resumed: [(UnsafeContinuation<[UInt8]?, Never>, [UInt8])] = []
            while !state.inbound.readers.isEmpty, let message = Self.pop(&state.inbound) {
                resumed.append((state.inbound.readers.removeFirst(), message))
            }
            return resumed
        }
        for (reader, message) in resumed { reader.resume(returning: message) }
    }

    /// Counts a credited message as taken.
    private static func countTaken(_ length: Int, _ inbound: inout Inbound) {
        inbound.takenCount += 1
        inbound.takenCost += FlowController.messageCost(length: length)
    }

    /// Taken messages are reported to the loop in batches of ``FlowController/messageReportBatch`` of cost:
    /// waking the loop for every message would cost a thread wake-up per message, and the peer's message window
    /// leaves room for one unreported batch.
    private static func reportDue(_ inbound: inout Inbound) -> Bool {
        guard inbound.takenCost >= FlowController.messageReportBatch, !inbound.reportScheduled else { return false }
        inbound.reportScheduled = true
        return true
    }

    /// Takes the first queued message, counting its credit if it has some.
    private static func pop(_ inbound: inout Inbound) -> [UInt8]? {
        // Moved out of the deque, which keeps no read entries: a queue that never fully drains (a reader just
        // keeping up) holds only what is unread.
        guard let (message, entry) = inbound.messages.popFirst() else { return nil }
        switch entry {
        case .credited:
            countTaken(message.count, &inbound)
        case .datagram:
            inbound.unreliableCharge -= FlowController.messageCost(length: message.count)
        case .givenBack:
            break
        }
        inbound.bytes -= message.count
        if inbound.messages.isEmpty && inbound.grewLarge {
            inbound.messages = []
            inbound.grewLarge = false
        }
        return message
    }

    /// How many credited messages the application took since the last call (loop side).
    func takeTaken() -> Int {
        state.withLock { state in
            defer {
                state.inbound.takenCount = 0
                state.inbound.takenCost = 0
                state.inbound.reportScheduled = false
            }
            return state.inbound.takenCount
        }
    }

    // MARK: Session messages

    /// Queues a session message for the session layer (loop side).
    /// - Returns: False when the queue is over its bounds: the peer sends faster than they are handled.
    func deliverSession(_ message: SessionMessage) -> Bool {
        let result = state.withLock { state -> (UnsafeContinuation<SessionMessage?, Never>?, Bool) in
            if let reader = state.session.readers.popFirst() { return (reader, true) }
            guard state.session.messages.count < SessionInbox.maximumCount,
                state.session.charge + message.charge <= SessionInbox.maximumCharge
            else { return (nil, false) }
            state.session.messages.append(message)
            state.session.charge += message.charge
            return (nil, true)
        }
        result.0?.resume(returning: message)
        return result.1
    }

    /// The next session message, or nil once the connection closed and every message was taken.
    nonisolated(nonsending) func nextSessionMessage() async -> SessionMessage? {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<SessionMessage?, Never>) in
            let ready = state.withLock { state -> SessionMessage?? in
                // Taken from the front of a deque: a reader that stays behind keeps only what it has not read.
                if let message = state.session.messages.popFirst() {
                    state.session.charge -= message.charge
                    return .some(message)
                }
                if state.closed != nil { return .some(nil) }
                state.session.readers.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    // MARK: Close

    /// Records the end of the connection and wakes everyone waiting.
    func close(_ error: ConnectionError) {
        let (senders, readers, sessionReaders, waiters) = state.withLock { state in
            if state.closed == nil { state.closed = error }
            let senders = state.outbound.senders.map(\.continuation)
            state.outbound.senders = []
            let readers = state.inbound.readers
            state.inbound.readers = []
            let sessionReaders = state.session.readers
            state.session.readers = []
            let waiters = state.closeWaiters
            state.closeWaiters = []
            return (senders, readers, sessionReaders, waiters)
        }
        let final = closedError ?? error
        for sender in senders { sender.resume(throwing: final) }
        for reader in readers { reader.resume(returning: nil) }
        for reader in sessionReaders { reader.resume(returning: nil) }
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
