import DequeModule
import MultipeerIO
import OrderedCollections

/// The session's received messages: one queue for every member's link, bounded in messages and bytes. A
/// link's reader waits while the queue is full, so a slow application holds the senders back through the
/// connections' flow control instead of growing memory.
///
/// The application's iterators take up to ``batchLimit`` messages at a time (one lock and at most one wake-up for
/// all of them) and give back what they did not hand out when they are dropped.
final class SessionInbox: Sendable {
    struct Entry: Sendable {
        let message: ReceivedMessage
        /// Runs when the application takes the message (an acknowledged send's receipt).
        let onTaken: (@Sendable () -> Void)?
    }

    /// The most messages an iterator takes at once: a reader that stops early gives them back, so this bounds only
    /// how far past the inbox's limits one iterator can hold messages.
    static let batchLimit = 64

    /// Entries whose storage the queue keeps once it empties; a larger queue's is released, so a burst does not
    /// leave an idle session holding it.
    static let retainedCapacity = 4096

    private struct State {
        /// Messages not taken yet, oldest first.
        var queue: Deque<Entry> = []
        /// Whether `queue` held more than ``SessionInbox/retainedCapacity`` entries since it was last empty: then
        /// its storage is released when it empties (a `Deque` keeps its storage otherwise, and cannot say how large
        /// it is).
        var grewLarge = false
        var bytes = 0
        var finished = false
        /// Readers waiting for messages, by id, in the order they started waiting (a cancelled one is removed).
        var consumers: OrderedDictionary<Int, CheckedContinuation<[Entry], Never>> = [:]
        var nextConsumer = 0
        var producers: [CheckedContinuation<Void, Never>] = []

        var count: Int { queue.count }

        mutating func append(_ entry: Entry) {
            queue.append(entry)
            bytes += entry.message.bytes.count
            if queue.count > SessionInbox.retainedCapacity { grewLarge = true }
        }

        mutating func take(upTo limit: Int) -> [Entry] {
            let taken = min(limit, count)
            guard taken > 0 else { return [] }
            let batch = Array(queue.prefix(taken))
            queue.removeFirst(taken)
            for entry in batch { bytes -= entry.message.bytes.count }
            if queue.isEmpty && grewLarge {
                queue = []
                grewLarge = false
            }
            return batch
        }

        /// The reader that has waited longest, no longer waiting.
        mutating func firstConsumer() -> CheckedContinuation<[Entry], Never>? {
            consumers.isEmpty ? nil : consumers.removeFirst().value
        }
    }

    let messageLimit: Int
    let byteLimit: Int
    private let state = Lock(State())

    init(messageLimit: Int, byteLimit: Int) {
        self.messageLimit = messageLimit
        self.byteLimit = byteLimit
    }

    /// Readers waiting for messages now (for tests).
    var waitingReaders: Int { state.withLock { $0.consumers.count } }

    /// Adds messages in order, as many at a time as there is room for (a waiting reader gets them all at once),
    /// waiting while the queue is full; drops them if the inbox is finished.
    func push(contentsOf entries: [Entry]) async {
        var rest = entries[...]
        while !rest.isEmpty {
            enum Step { case delivered(CheckedContinuation<[Entry], Never>, [Entry]), progressed, full, dropped }
            let step = state.withLock { state -> Step in
                if state.finished { return .dropped }
                if state.count == 0, let consumer = state.firstConsumer() {
                    defer { rest = [] }
                    return .delivered(consumer, Array(rest))
                }
                var added = false
                while let entry = rest.first,
                    state.count == 0
                        || (state.count < messageLimit && state.bytes + entry.message.bytes.count <= byteLimit)
                {
                    state.append(entry)
                    rest = rest.dropFirst()
                    added = true
                }
                return added ? .progressed : .full
            }
            switch step {
            case .delivered(let consumer, let batch):
                consumer.resume(returning: batch)
                return
            case .dropped:
                return
            case .progressed:
                continue
            case .full:
                // Parked until the next entry fits by the very rule that adds it (a looser rule would spin).
                let next = rest.first?.message.bytes.count ?? 0
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        if state.finished || state.count == 0
                            || (state.count < messageLimit && state.bytes + next <= byteLimit)
                        {
                            return true
                        }
                        state.producers.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
        }
    }

    /// Up to `limit` messages, waiting for at least one; empty once finished and drained, or when the waiting task
    /// is cancelled. Several readers take turns.
    func next(upTo limit: Int) async -> [Entry] {
        let id = state.withLock { state in
            defer { state.nextConsumer += 1 }
            return state.nextConsumer
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[Entry], Never>) in
                let (ready, wake) = state.withLock { state -> ([Entry]?, [CheckedContinuation<Void, Never>]) in
                    if state.count > 0 {
                        let batch = state.take(upTo: limit)
                        defer { state.producers = [] }
                        return (batch, state.producers)
                    }
                    if state.finished || Task.isCancelled { return ([], []) }
                    state.consumers[id] = continuation
                    return (nil, [])
                }
                for producer in wake { producer.resume() }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let consumer = state.withLock { $0.consumers.removeValue(forKey: id) }
            consumer?.resume(returning: [])
        }
    }

    /// Messages an iterator took and did not hand out: back to the front of the queue.
    func giveBack(_ entries: ArraySlice<Entry>) {
        guard !entries.isEmpty else { return }
        let consumer = state.withLock { state -> CheckedContinuation<[Entry], Never>? in
            if let consumer = state.firstConsumer() { return consumer }
            state.queue.prepend(contentsOf: entries)
            if state.queue.count > SessionInbox.retainedCapacity { state.grewLarge = true }
            for entry in entries { state.bytes += entry.message.bytes.count }
            return nil
        }
        consumer?.resume(returning: Array(entries))
    }

    /// Ends the inbox: waiting producers drop their messages, the consumers get what is queued, then nothing.
    func finish() {
        let (consumers, producers) = state.withLock { state in
            state.finished = true
            defer {
                state.consumers = [:]
                state.producers = []
            }
            return (Array(state.consumers.values), state.producers)
        }
        for consumer in consumers { consumer.resume(returning: []) }
        for producer in producers { producer.resume() }
    }
}

/// Messages an iterator took from the inbox in one go; what it has not handed out when it is released goes back.
final class TakenEntries {
    private let inbox: SessionInbox
    private var entries: [SessionInbox.Entry]
    private var index = 0

    init(inbox: SessionInbox, entries: [SessionInbox.Entry]) {
        self.inbox = inbox
        self.entries = entries
    }

    func next() -> SessionInbox.Entry? {
        guard index < entries.count else { return nil }
        defer { index += 1 }
        return entries[index]
    }

    /// Everything not yet handed out (none remains to give back).
    func rest() -> ArraySlice<SessionInbox.Entry> {
        defer { index = entries.count }
        return entries[index...]
    }

    deinit { inbox.giveBack(entries[index...]) }
}
