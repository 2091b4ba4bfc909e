internal import Synchronization

/// The session's received messages: one queue for every member's link, bounded in messages and bytes. A
/// link's reader waits while the queue is full, so a slow application holds the senders back through the
/// connections' flow control instead of growing memory.
final class SessionInbox: Sendable {
    struct Entry: Sendable {
        let message: ReceivedMessage
        /// Runs when the application takes the message (an acknowledged send's receipt).
        let onTaken: (@Sendable () -> Void)?
    }

    private struct State {
        var queue: [Entry] = []
        var head = 0
        var bytes = 0
        var finished = false
        var consumers: [CheckedContinuation<Entry?, Never>] = []
        var producers: [CheckedContinuation<Void, Never>] = []
    }

    let messageLimit: Int
    let byteLimit: Int
    private let state = Mutex(State())

    init(messageLimit: Int, byteLimit: Int) {
        self.messageLimit = messageLimit
        self.byteLimit = byteLimit
    }

    /// Adds a message, waiting while the queue is full; drops it if the inbox is finished.
    func push(_ entry: Entry) async {
        while true {
            enum Step { case delivered(CheckedContinuation<Entry?, Never>), queued, full, dropped }
            let step = state.withLock { state -> Step in
                if state.finished { return .dropped }
                if !state.consumers.isEmpty { return .delivered(state.consumers.removeFirst()) }
                let count = state.queue.count - state.head
                // Always admit one message, however large, so a message bigger than the byte limit still passes.
                guard count == 0 || (count < messageLimit && state.bytes + entry.message.data.count <= byteLimit)
                else { return .full }
                state.queue.append(entry)
                state.bytes += entry.message.data.count
                return .queued
            }
            switch step {
            case .delivered(let consumer):
                consumer.resume(returning: entry)
                return
            case .queued, .dropped:
                return
            case .full:
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    let resumeNow = state.withLock { state -> Bool in
                        let count = state.queue.count - state.head
                        if state.finished || count < messageLimit && state.bytes < byteLimit { return true }
                        state.producers.append(continuation)
                        return false
                    }
                    if resumeNow { continuation.resume() }
                }
            }
        }
    }

    /// The next message, waiting for one; nil once finished and drained. Several readers take turns.
    func next() async -> Entry? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Entry?, Never>) in
            let (ready, wake) = state.withLock { state -> (Entry??, [CheckedContinuation<Void, Never>]) in
                if state.head < state.queue.count {
                    let entry = state.queue[state.head]
                    state.head += 1
                    state.bytes -= entry.message.data.count
                    if state.head > 64 && state.head * 2 > state.queue.count {
                        state.queue.removeFirst(state.head)
                        state.head = 0
                    }
                    let wake = state.producers
                    state.producers = []
                    return (.some(entry), wake)
                }
                if state.finished { return (.some(nil), []) }
                state.consumers.append(continuation)
                return (nil, [])
            }
            for producer in wake { producer.resume() }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Ends the inbox: waiting producers drop their messages, the consumer gets what is queued, then nil.
    func finish() {
        let (consumers, producers) = state.withLock { state in
            state.finished = true
            defer {
                state.consumers = []
                state.producers = []
            }
            return (state.consumers, state.producers)
        }
        for consumer in consumers { consumer.resume(returning: nil) }
        for producer in producers { producer.resume() }
    }
}
