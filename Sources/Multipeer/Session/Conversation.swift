internal import Synchronization

/// What two members owe each other across links: the reliable messages one sent, numbered and kept until the
/// other confirms it has them, and how far one has received the other's.
///
/// Every reliable message gets the next sequence number of its conversation and stays in the outbox until an
/// `ack` covers it, so a link that drops loses nothing: on the next link, the `resume` each side sends says how
/// far it received, and the rest is sent again; a number already received is dropped, so nothing arrives twice.
/// Each side also names its *epoch* (random per conversation): a peer that comes back with another epoch is a
/// new incarnation (it restarted, or ended its side of the conversation), so what we had sent to the earlier one
/// and it never confirmed is reported failed, and both numberings start again, instead of being numbered into
/// a conversation that no longer exists.
final class Conversation: Sendable {
    /// A numbered message waiting for its acknowledgement.
    struct Entry: Sendable {
        let sequence: UInt64
        /// The frame as sent: tag, sequence number, data.
        let frame: [UInt8]
    }

    /// The first byte of an application message on a link.
    enum Tag {
        /// Unnumbered: unreliable messages.
        static let unnumbered: UInt8 = 0
        /// Numbered and kept until acknowledged: reliable messages.
        static let numbered: UInt8 = 2
        /// Numbered, and the receiver answers `delivered` when its application takes it.
        static let numberedWithReceipt: UInt8 = 3
    }

    /// What the receiving side does with a numbered message.
    enum Arrival: Equatable {
        /// The next one: deliver it.
        case deliver
        /// Already received (a resent copy), or from a link that was replaced: drop it.
        case drop
        /// A number was skipped: the link broke the protocol.
        case gap
    }

    private struct State {
        var myEpoch = UInt64.random(in: 1...UInt64.max)
        var peerEpoch: UInt64 = 0
        var nextSequence: UInt64 = 1
        var outbox: [Entry] = []
        var outboxHead = 0
        var outboxBytes = 0
        /// Index into the outbox of the next entry to write on the current link; nil while no writer may run.
        var writeIndex: Int?
        var writer: CheckedContinuation<Entry?, Never>?
        var spaceWaiters: [CheckedContinuation<SessionError?, Never>] = []
        /// Bumped whenever the link changes: writers and readers of an older link stop.
        var generation = 0
        var failure: SessionError?
        // Receiving
        var nextExpected: UInt64 = 1
        var unacknowledged = 0
        var unacknowledgedBytes = 0
        var deliveriesInFlight: [Int: Int] = [:]
        var deliveryWaiters: [(generation: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Mutex(State())
    /// The most bytes of unacknowledged messages kept (one message always fits).
    let byteLimit: Int

    init(byteLimit: Int) { self.byteLimit = byteLimit }

    var myEpoch: UInt64 { state.withLock { $0.myEpoch } }
    var peerEpoch: UInt64 { state.withLock { $0.peerEpoch } }
    /// The last sequence number received in order from the peer.
    var received: UInt64 { state.withLock { $0.nextExpected - 1 } }
    var generation: Int { state.withLock { $0.generation } }
    /// The number the next message will get.
    var nextSequenceNumber: UInt64 { state.withLock { $0.nextSequence } }

    /// Messages sent and not yet acknowledged.
    var pendingCount: Int { state.withLock { $0.outbox.count - $0.outboxHead } }

    // MARK: Sending

    /// Numbers a message and keeps it, if the outbox has room (or the conversation failed); nil when full.
    func tryEnqueue(_ data: [UInt8], receipt: Bool) -> Result<UInt64, SessionError>? {
        enum Step { case added(UInt64, (CheckedContinuation<Entry?, Never>, Entry)?), full, failed(SessionError) }
        let step = state.withLock { state -> Step in
            if let failure = state.failure { return .failed(failure) }
            let pending = state.outbox.count - state.outboxHead
            guard pending == 0 || state.outboxBytes + data.count <= byteLimit else { return .full }
            let sequence = state.nextSequence
            state.nextSequence += 1
            var frame = [receipt ? Tag.numberedWithReceipt : Tag.numbered]
            frame.reserveCapacity(9 + data.count)
            for shift in stride(from: 56, through: 0, by: -8) {
                frame.append(UInt8(truncatingIfNeeded: sequence >> UInt64(shift)))
            }
            frame += data
            state.outbox.append(Entry(sequence: sequence, frame: frame))
            state.outboxBytes += data.count
            var wake: (CheckedContinuation<Entry?, Never>, Entry)?
            if let index = state.writeIndex, let writer = state.writer, index < state.outbox.count {
                state.writer = nil
                state.writeIndex = index + 1
                wake = (writer, state.outbox[index])
            }
            return .added(sequence, wake)
        }
        switch step {
        case .added(let sequence, let writer):
            if let (writer, entry) = writer { writer.resume(returning: entry) }
            return .success(sequence)
        case .failed(let failure):
            return .failure(failure)
        case .full:
            return nil
        }
    }

    /// Numbers a message and keeps it; waits while the outbox is full.
    /// - Returns: The sequence number, or the failure that ended the conversation.
    func enqueue(_ data: [UInt8], receipt: Bool) async -> Result<UInt64, SessionError> {
        while true {
            if let result = tryEnqueue(data, receipt: receipt) { return result }
            let failure = await withCheckedContinuation { (continuation: CheckedContinuation<SessionError?, Never>) in
                let now = state.withLock { state -> SessionError?? in
                    if let failure = state.failure { return .some(failure) }
                    if state.outboxBytes + data.count <= byteLimit || state.outbox.count == state.outboxHead {
                        return .some(nil)
                    }
                    state.spaceWaiters.append(continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
            if let failure { return .failure(failure) }
        }
    }

    /// The next entry to write on the link of `generation`, in order, waiting for one; nil once that link is
    /// replaced or the conversation failed.
    func nextToWrite(generation: Int) async -> Entry? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Entry?, Never>) in
            let ready = state.withLock { state -> Entry?? in
                guard state.generation == generation, state.failure == nil, let index = state.writeIndex else {
                    return .some(nil)
                }
                if index < state.outbox.count {
                    state.writeIndex = index + 1
                    return .some(state.outbox[index])
                }
                state.writer = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// A new link replaces the old one: its writer and readers stop; nothing is written until the peer's
    /// `resume` says where to start. Returns the new generation.
    func switchLink() -> Int {
        let (generation, writer) = state.withLock { state -> (Int, CheckedContinuation<Entry?, Never>?) in
            state.generation += 1
            state.writeIndex = nil
            defer { state.writer = nil }
            return (state.generation, state.writer)
        }
        writer?.resume(returning: nil)
        return generation
    }

    /// The peer's `resume` arrived on the link of `generation`: from here on our messages are written from the
    /// first one it does not have, and its messages are numbered as its epoch says.
    ///
    /// - Parameters:
    ///   - peerEpoch: The peer's epoch. A different one than we knew means a new incarnation of the peer (it
    ///     restarted, or ended its side of the conversation): whatever it had not confirmed is lost, and both
    ///     numberings start again. The first one we learn is just learnt.
    ///   - knowsOurEpoch: Whether the peer named our epoch; only then does `peerReceived` count our messages.
    ///   - peerReceived: The last of our messages the peer has, in order.
    /// - Returns: The sequence numbers lost with an earlier incarnation of the peer, empty otherwise.
    func resume(peerEpoch: UInt64, knowsOurEpoch: Bool, peerReceived: UInt64, generation: Int) -> [UInt64] {
        let (lost, waiters) = state.withLock { state -> ([UInt64], [CheckedContinuation<SessionError?, Never>]) in
            guard state.generation == generation else { return ([], []) }
            var lost: [UInt64] = []
            if state.peerEpoch != peerEpoch {
                if state.peerEpoch != 0 {
                    lost = state.outbox[state.outboxHead...].map(\.sequence)
                    state.outbox = []
                    state.outboxHead = 0
                    state.outboxBytes = 0
                    state.nextSequence = 1
                }
                state.peerEpoch = peerEpoch
                state.nextExpected = 1
                state.unacknowledged = 0
                state.unacknowledgedBytes = 0
            } else if knowsOurEpoch {
                Self.drop(upTo: peerReceived, &state)
            }
            state.writeIndex = state.outboxHead
            // Room may have been made: senders waiting for it go on.
            defer { state.spaceWaiters = [] }
            return (lost, state.spaceWaiters)
        }
        for waiter in waiters { waiter.resume(returning: nil) }
        return lost
    }

    /// The peer has every message up to `sequence`.
    func acknowledge(upTo sequence: UInt64) {
        let waiters = state.withLock { state -> [CheckedContinuation<SessionError?, Never>] in
            Self.drop(upTo: sequence, &state)
            defer { state.spaceWaiters = [] }
            return state.spaceWaiters
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }

    private static func drop(upTo sequence: UInt64, _ state: inout State) {
        while state.outboxHead < state.outbox.count, state.outbox[state.outboxHead].sequence <= sequence {
            state.outboxBytes -= state.outbox[state.outboxHead].frame.count - 9
            state.outboxHead += 1
            if let index = state.writeIndex { state.writeIndex = max(index, state.outboxHead) }
        }
        if state.outboxHead > 64, state.outboxHead * 2 > state.outbox.count {
            state.outbox.removeFirst(state.outboxHead)
            if let index = state.writeIndex { state.writeIndex = index - state.outboxHead }
            state.outboxHead = 0
        }
    }

    /// Ends the conversation: every waiting sender fails with `failure`.
    /// - Returns: The sequence numbers never acknowledged.
    func fail(_ failure: SessionError) -> [UInt64] {
        let (lost, waiters, writer) = state.withLock {
            state -> ([UInt64], [CheckedContinuation<SessionError?, Never>], CheckedContinuation<Entry?, Never>?) in
            state.failure = failure
            let lost = state.outbox[state.outboxHead...].map(\.sequence)
            state.outbox = []
            state.outboxHead = 0
            state.outboxBytes = 0
            defer {
                state.spaceWaiters = []
                state.writer = nil
            }
            return (lost, state.spaceWaiters, state.writer)
        }
        for waiter in waiters { waiter.resume(returning: failure) }
        writer?.resume(returning: nil)
        return lost
    }

    // MARK: Receiving

    /// Classifies a numbered message read from the link of `generation`; a delivered one counts as in flight
    /// until ``delivered(generation:bytes:)``.
    func arrival(of sequence: UInt64, generation: Int) -> Arrival {
        state.withLock { state in
            guard state.generation == generation else { return .drop }
            if sequence < state.nextExpected { return .drop }
            if sequence > state.nextExpected { return .gap }
            state.nextExpected += 1
            state.deliveriesInFlight[generation, default: 0] += 1
            return .deliver
        }
    }

    /// A delivered message reached the inbox. Returns the sequence number to acknowledge when an `ack` is due
    /// (every 32 messages or 256 KiB), else nil.
    func delivered(generation: Int, bytes: Int) -> UInt64? {
        let (ack, waiters) = state.withLock { state -> (UInt64?, [CheckedContinuation<Void, Never>]) in
            let left = state.deliveriesInFlight[generation, default: 1] - 1
            state.deliveriesInFlight[generation] = left > 0 ? left : nil
            state.unacknowledged += 1
            state.unacknowledgedBytes += bytes
            var waiters: [CheckedContinuation<Void, Never>] = []
            state.deliveryWaiters.removeAll { waiter in
                guard state.deliveriesInFlight.keys.allSatisfy({ $0 >= waiter.generation }) else { return false }
                waiters.append(waiter.continuation)
                return true
            }
            guard state.unacknowledged >= 32 || state.unacknowledgedBytes >= 262_144 else { return (nil, waiters) }
            state.unacknowledged = 0
            state.unacknowledgedBytes = 0
            return (state.nextExpected - 1, waiters)
        }
        for waiter in waiters { waiter.resume() }
        return ack
    }

    /// The sequence number to acknowledge when anything is unacknowledged (the periodic flush), else nil.
    func pendingAcknowledgement() -> UInt64? {
        state.withLock { state in
            guard state.unacknowledged > 0 else { return nil }
            state.unacknowledged = 0
            state.unacknowledgedBytes = 0
            return state.nextExpected - 1
        }
    }

    /// Waits until no message read from an older link is still on its way into the inbox, so the new link's
    /// messages cannot overtake it.
    func waitForOlderDeliveries(generation: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.deliveriesInFlight.keys.allSatisfy({ $0 >= generation }) { return true }
                state.deliveryWaiters.append((generation, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }
}
