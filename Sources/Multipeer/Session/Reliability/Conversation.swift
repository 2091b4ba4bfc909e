internal import MultipeerIO

/// What two members owe each other across links (``ReliabilityStateMachine``), shared by the tasks that use it:
/// senders (any task, through ``Session/send(_:to:mode:)``), the current link's writer and reader, and the tasks
/// waiting for room or for receipts.
///
/// A send writes its frame in place when the link's writer is idle (the common case: no thread is woken for it);
/// the writer task takes over, in order, when the connection's buffer is full. Every wait ends when its task is
/// cancelled.
final class Conversation: Sendable {
    typealias Entry = ReliabilityStateMachine.Entry

    private struct State {
        var machine: ReliabilityStateMachine
        /// The member link messages go out on, while there is one.
        var link: Link?
        /// The longest message the last link's peer accepts.
        var messageLimit: Int?
        var writer: CheckedContinuation<Entry?, Never>?
        var spaceWaiters: [Int: CheckedContinuation<SessionError?, Never>] = [:]
        var receiptWaiters: [UInt64: (id: Int, continuation: CheckedContinuation<SessionError?, Never>)] = [:]
        var deliveryWaiters: [(generation: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var nextWaiter = 0
    }

    private let state: Lock<State>
    /// The peer, for errors.
    let peerName: String

    init(byteLimit: Int, peerName: String) {
        state = Lock(State(machine: ReliabilityStateMachine(byteLimit: byteLimit)))
        self.peerName = peerName
    }

    var myEpoch: UInt64 { state.withLock { $0.machine.myEpoch } }
    var peerEpoch: UInt64 { state.withLock { $0.machine.peerEpoch } }
    /// The last sequence number received in order from the peer.
    var received: UInt64 { state.withLock { $0.machine.received } }
    var generation: Int { state.withLock { $0.machine.generation } }
    /// Messages sent and not yet acknowledged.
    var pendingCount: Int { state.withLock { $0.machine.pendingCount } }
    /// The longest message the peer accepts, as its last link announced.
    var messageLimit: Int? { state.withLock { $0.messageLimit } }
    /// The current member link.
    var link: Link? { state.withLock { $0.link } }

    // MARK: Sending

    /// Numbers a message and keeps it, writing it at once when the link's writer is idle; nil when the replay
    /// buffer is full.
    func trySend(_ data: [UInt8], receipt: Bool, paced: Bool = true) -> Result<UInt64, SessionError>? {
        numbered(data, receipt: receipt, paced: paced).map { $0.map(\.0) }
    }

    /// ``trySend(_:receipt:paced:)`` of a message that asks for a receipt, for a caller that cannot wait (unpaced:
    /// only the replay buffer's bytes bound it); with the peer's incarnation, as ``sendForReceipt(_:)``.
    func trySendForReceipt(_ data: [UInt8]) -> Result<(UInt64, Int), SessionError>? {
        numbered(data, receipt: true, paced: false)
    }

    /// ``trySend(_:receipt:paced:)``, with the peer's incarnation the message was numbered in.
    private func numbered(_ data: [UInt8], receipt: Bool, paced: Bool = true) -> Result<(UInt64, Int), SessionError>? {
        var incarnation = 0
        enum Then {
            case nothing
            case kick(PeerConnection)
            case handOff(CheckedContinuation<Entry?, Never>, Entry)
        }
        let (result, then) = state.withLock { state -> (Result<UInt64, SessionError>?, Then) in
            incarnation = state.machine.incarnation
            if let limit = state.messageLimit, data.count + ReliabilityStateMachine.Tag.headerLength > limit {
                return (.failure(Self.tooLong(data.count, limit: limit, peer: peerName)), .nothing)
            }
            switch state.machine.enqueue(data, receipt: receipt, paced: paced) {
            case .failed(let error): return (.failure(error), .nothing)
            case .full: return (nil, .nothing)
            case .queued(let sequence, let write):
                guard write, let connection = state.link?.connection, let message = state.machine.lastQueued else {
                    return (.success(sequence), .nothing)
                }
                // Queued on the connection under the lock (two senders cannot write out of order); the loop is
                // woken after it (waking may write from this thread).
                do throws(ConnectionError) {
                    let kick = try connection.enqueueWithoutKick(message)
                    return (.success(sequence), kick ? .kick(connection) : .nothing)
                } catch {
                    // Full (or closing): the writer takes it; a closed link's entry is written on the next one.
                    if case .sendBufferFull = error.code, let entry = state.machine.handToWriter(),
                        let writer = state.writer
                    {
                        state.writer = nil
                        return (.success(sequence), .handOff(writer, entry))
                    }
                    return (.success(sequence), .nothing)
                }
            }
        }
        switch then {
        case .nothing: break
        case .kick(let connection): connection.kick()
        case .handOff(let writer, let entry): writer.resume(returning: entry)
        }
        return result.map { $0.map { ($0, incarnation) } }
    }

    static func tooLong(_ count: Int, limit: Int, peer: String) -> SessionError {
        SessionError(
            .invalidParameter,
            "a message of \(count) bytes is longer than \(peer) accepts (\(limit - ReliabilityStateMachine.Tag.headerLength)); "
                + "send larger data as a stream or a resource")
    }

    /// Numbers a message that asks for a receipt; returns its number and the peer's incarnation it was numbered in
    /// (read under the same lock, so a new incarnation in between cannot be missed).
    func sendForReceipt(_ data: [UInt8]) async -> Result<(UInt64, Int), SessionError> {
        while true {
            if let result = numbered(data, receipt: true) { return result }
            if let failure = await waitForRoom(data.count) { return .failure(failure) }
        }
    }

    /// Numbers a message and keeps it; waits while the replay buffer is full.
    /// - Returns: The sequence number, or the failure that ended the conversation (`cancelled` when the waiting
    ///   task was).
    func send(_ data: [UInt8], receipt: Bool) async -> Result<UInt64, SessionError> {
        while true {
            if let result = trySend(data, receipt: receipt) { return result }
            if let failure = await waitForRoom(data.count) { return .failure(failure) }
        }
    }

    private func waitForRoom(_ count: Int) async -> SessionError? {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<SessionError?, Never>) in
                let now = state.withLock { state -> SessionError?? in
                    if let failure = state.machine.failure { return .some(failure) }
                    if Task.isCancelled { return .some(SessionError(.cancelled, "the send was cancelled")) }
                    if state.machine.hasRoom(for: count) { return .some(nil) }
                    state.spaceWaiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.spaceWaiters.removeValue(forKey: id) }
            waiter?.resume(returning: SessionError(.cancelled, "the send was cancelled"))
        }
    }

    /// The next entry the writer of `generation`'s link writes, in order, waiting for one; nil once that link is
    /// replaced or the conversation ended.
    func nextToWrite(generation: Int) async -> Entry? {
        // Without a continuation while entries are queued (the writer drains a backlog in a tight loop).
        var eased: [CheckedContinuation<SessionError?, Never>] = []
        defer { for waiter in eased { waiter.resume(returning: nil) } }
        let ready = state.withLock { state -> Entry?? in
            switch state.machine.nextToWrite(generation: generation) {
            case .write(let entry):
                if !state.spaceWaiters.isEmpty, state.machine.backlogEased {
                    eased = Array(state.spaceWaiters.values)
                    state.spaceWaiters = [:]
                }
                return .some(entry)
            case .stop: return .some(nil)
            case .wait:
                state.machine.writerResumed()
                return nil
            }
        }
        if let ready { return ready }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Entry?, Never>) in
            let ready = state.withLock { state -> Entry?? in
                switch state.machine.nextToWrite(generation: generation) {
                case .write(let entry): return .some(entry)
                case .stop: return .some(nil)
                case .wait:
                    state.writer = continuation
                    return nil
                }
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// A new member link: the old link's writer and readers stop; nothing numbered is written until the peer's
    /// `resume`. Returns the new generation.
    func switchLink(to link: Link) -> Int {
        let (generation, writer, waiters) = state.withLock {
            state -> (Int, CheckedContinuation<Entry?, Never>?, [CheckedContinuation<SessionError?, Never>]) in
            state.link = link
            state.messageLimit = link.connection.peer.maximumMessageLength
            defer {
                state.writer = nil
                state.spaceWaiters = [:]
            }
            return (state.machine.switchLink(), state.writer, Array(state.spaceWaiters.values))
        }
        writer?.resume(returning: nil)
        // The old link's backlog no longer holds them back.
        for waiter in waiters { waiter.resume(returning: nil) }
        return generation
    }

    /// The member link of `generation` ended: nothing goes out until the next one.
    func linkEnded(generation: Int) {
        let (writer, waiters) = state.withLock {
            state -> (CheckedContinuation<Entry?, Never>?, [CheckedContinuation<SessionError?, Never>]) in
            guard state.machine.generation == generation else { return (nil, []) }
            state.link = nil
            state.machine.linkEnded()
            defer {
                state.writer = nil
                state.spaceWaiters = [:]
            }
            return (state.writer, Array(state.spaceWaiters.values))
        }
        writer?.resume(returning: nil)
        for waiter in waiters { waiter.resume(returning: nil) }
    }

    /// The peer's incarnation as this side knows it (see ``awaitReceipt(_:incarnation:)``).
    var incarnation: Int { state.withLock { $0.machine.incarnation } }

    /// Why what a new incarnation of the peer never had is lost: the words begin every such reason.
    static func startedAnew(_ peerName: String) -> String {
        "\(peerName) started anew (it restarted, or ended its side of the conversation)"
    }

    /// The peer's `resume` arrived on the link of `generation`.
    func resume(epoch: UInt64, knowsOurEpoch: Bool, peerReceived: UInt64, generation: Int)
        -> ReliabilityStateMachine.Resumed
    {
        let (resumed, wake) = state.withLock { state in
            let resumed = state.machine.resume(
                epoch: epoch, knowsOurEpoch: knowsOurEpoch, peerReceived: peerReceived, generation: generation)
            let wake = Array(state.spaceWaiters.values)
            state.spaceWaiters = [:]
            if resumed.newIncarnation {
                let failure = SessionError(.notConnected, "\(Self.startedAnew(peerName)) and lost them")
                for waiter in state.receiptWaiters.values { waiter.continuation.resume(returning: failure) }
                state.receiptWaiters = [:]
            }
            return (resumed, wake)
        }
        for waiter in wake { waiter.resume(returning: nil) }
        if let link = self.link {
            let epoch = peerEpoch
            for sequence in resumed.receipts { link.send(.delivered(epoch: epoch, messageID: sequence)) }
        }
        return resumed
    }

    /// The peer has every message up to `sequence`.
    func acknowledge(upTo sequence: UInt64) {
        let wake = state.withLock { state -> [CheckedContinuation<SessionError?, Never>] in
            guard state.machine.acknowledge(upTo: sequence) else { return [] }
            defer { state.spaceWaiters = [:] }
            return Array(state.spaceWaiters.values)
        }
        for waiter in wake { waiter.resume(returning: nil) }
    }

    /// Ends the conversation: every waiting sender and receipt waiter fails with `failure`.
    /// - Returns: The sequence numbers never acknowledged.
    func fail(_ failure: SessionError) -> [UInt64] {
        let (lost, waiters, writer) = state.withLock {
            state -> ([UInt64], [CheckedContinuation<SessionError?, Never>], CheckedContinuation<Entry?, Never>?) in
            let lost = state.machine.fail(failure)
            let waiters = Array(state.spaceWaiters.values) + state.receiptWaiters.values.map(\.continuation)
            state.spaceWaiters = [:]
            state.receiptWaiters = [:]
            state.link = nil
            defer { state.writer = nil }
            return (lost, waiters, state.writer)
        }
        for waiter in waiters { waiter.resume(returning: failure) }
        writer?.resume(returning: nil)
        return lost
    }

    // MARK: Receiving

    /// Classifies a numbered message read from the link of `generation`.
    func arrival(of sequence: UInt64, generation: Int) -> ReliabilityStateMachine.Arrival {
        state.withLock { $0.machine.arrival(of: sequence, generation: generation) }
    }

    /// A delivered message reached the inbox: returns what became due.
    func delivered(generation: Int, count: Int = 1, bytes: Int) -> ReliabilityStateMachine.Delivered {
        let (result, wake) = state.withLock {
            state -> (ReliabilityStateMachine.Delivered, [CheckedContinuation<Void, Never>]) in
            let result = state.machine.delivered(generation: generation, count: count, bytes: bytes)
            guard result.olderDeliveriesDone else { return (result, []) }
            var wake: [CheckedContinuation<Void, Never>] = []
            state.deliveryWaiters.removeAll { waiter in
                guard state.machine.olderDeliveriesDone(before: waiter.generation) else { return false }
                wake.append(waiter.continuation)
                return true
            }
            return (result, wake)
        }
        for waiter in wake { waiter.resume() }
        return result
    }

    /// The flush timer fired: the acknowledgement to send, if anything is unconfirmed on `generation`'s link.
    func flush(generation: Int) -> UInt64? { state.withLock { $0.machine.flush(generation: generation) } }

    /// Waits until no message read from an older link is still on its way into the inbox, so the new link's
    /// messages cannot overtake it.
    func waitForOlderDeliveries(generation: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.machine.olderDeliveriesDone(before: generation) { return true }
                state.deliveryWaiters.append((generation, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    // MARK: Receipts

    /// The application took the peer's message `sequence` (arrived under the peer's `epoch` for us): its receipt
    /// goes out now on the member link, or after the next resume of the same incarnation.
    func taken(_ sequence: UInt64, epoch: UInt64) {
        let link = state.withLock { state -> Link? in
            state.machine.taken(sequence, epoch: epoch) ? state.link : nil
        }
        link?.send(.delivered(epoch: epoch, messageID: sequence))
    }

    /// A receipt from the peer.
    func receipt(_ sequence: UInt64, epoch: UInt64) {
        let waiter = state.withLock { state -> CheckedContinuation<SessionError?, Never>? in
            let waited = state.receiptWaiters[sequence] != nil
            guard case .resolve = state.machine.receipt(sequence, epoch: epoch, waited: waited) else { return nil }
            return state.receiptWaiters.removeValue(forKey: sequence)?.continuation
        }
        waiter?.resume(returning: nil)
    }

    /// Waits for the receipt of our message `sequence`.
    /// - Throws: ``SessionError``: `notConnected` when the conversation ends first (or the peer restarted),
    ///   `cancelled` when the waiting task is, `invalidParameter` when someone already waits for it.
    func awaitReceipt(_ sequence: UInt64, incarnation: Int) async throws(SessionError) {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        let failure = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<SessionError?, Never>) in
                let now = state.withLock { state -> SessionError?? in
                    if let failure = state.machine.failure { return .some(failure) }
                    if state.machine.incarnation != incarnation {
                        return .some(SessionError(.notConnected, "\(Self.startedAnew(peerName)) and lost it"))
                    }
                    if Task.isCancelled {
                        return .some(SessionError(.cancelled, "the wait for the receipt was cancelled"))
                    }
                    if state.receiptWaiters[sequence] != nil {
                        return .some(
                            SessionError(.invalidParameter, "already waiting for the receipt of message \(sequence)"))
                    }
                    if state.machine.awaitReceipt(sequence) == .arrived { return .some(nil) }
                    state.receiptWaiters[sequence] = (id, continuation)
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<SessionError?, Never>? in
                guard state.receiptWaiters[sequence]?.id == id else { return nil }
                return state.receiptWaiters.removeValue(forKey: sequence)?.continuation
            }
            waiter?.resume(returning: SessionError(.cancelled, "the wait for the receipt was cancelled"))
        }
        if let failure { throw failure }
    }
}
