import DequeModule

/// The rules of one conversation between two members (`docs/PROTOCOL.md` section 4.5): numbering reliable
/// messages, keeping them until the peer acknowledges them, where to start writing on a new link, the epochs
/// that tell a new incarnation of the peer from the same one come back, receiving in order exactly once, and the
/// receipts of acknowledged sends, both ways.
///
/// Pure: no locks, no clocks, no I/O. ``Conversation`` owns one behind a mutex, keeps the continuations of the
/// tasks that wait on it, and performs what the methods return.
struct ReliabilityStateMachine {
    /// A numbered message waiting for its acknowledgement.
    struct Entry: Sendable {
        let sequence: UInt64
        /// Whether the peer is asked for a receipt.
        let receipt: Bool
        /// The application's bytes, as it gave them (shared, not copied).
        let data: [UInt8]

        /// The message as sent: the tag and sequence number as a prefix the connection writes before the data
        /// (gathered, never joined to it in a new array).
        var message: OutboundMessage {
            OutboundMessage(
                prefix: MessagePrefix(receipt ? Tag.numberedWithReceipt : Tag.numbered, bigEndian: sequence), body: data
            )
        }
    }

    /// The first byte of an application message on a link.
    enum Tag {
        /// Unnumbered: unreliable messages.
        static let unnumbered: UInt8 = 0
        /// Numbered and kept until acknowledged: reliable messages.
        static let numbered: UInt8 = 2
        /// Numbered, and the receiver answers `delivered` when its application takes it.
        static let numberedWithReceipt: UInt8 = 3
        /// Tag and sequence number.
        static let headerLength = 9
    }

    /// Bounds, each with the reason for its number.
    enum Limits {
        /// Cumulative acknowledgements go out every 32 messages...
        static let acknowledgeEvery = 32
        /// ...or 256 KiB (whichever first), so the sender's replay buffer is freed in steps far below its 16 MiB.
        static let acknowledgeBytes = 262_144
        /// Receipts given recently, sent again on the next link of the same incarnation (a receipt lost with a link
        /// is not lost); 256 covers what one outage can swallow at the acknowledgement pace above.
        static let recentReceipts = 256
        /// Messages queued with a receipt whose sender has not started waiting yet; beyond, only recent receipts
        /// are kept early.
        static let expectingReceipts = 65_536
        /// Receipts that came before their sender waited, remembered for it.
        static let earlyReceipts = 4_096
        /// Messages queued for the link's writer (its connection's buffer was full) before a sender waits: the
        /// connection's own buffer holds 1 MiB more, so a fast sender is held to the link's pace instead of filling
        /// the replay buffer (and memory) far ahead of it.
        static let writerBacklog = 256
        /// Messages kept unconfirmed, whatever their size: the replay buffer's byte limit counts only their bytes,
        /// and a peer that reads but never confirms would otherwise make tiny messages cost far more memory than
        /// the limit says (each entry's bookkeeping outweighs a 1-byte message many times over).
        static let pendingMessages = 262_144
        /// How far back a receipt can be early: only one of the last numbers handed out (older ones are repeats
        /// sent after a reconnection).
        static let earlyWindow: UInt64 = 64
    }

    /// What the receiving side does with a numbered message.
    enum Arrival: Equatable {
        /// The next one: deliver it; its receipt, if asked for, names `peerEpoch`.
        case deliver(peerEpoch: UInt64)
        /// Already received (a resent copy), or from a link that was replaced: drop it.
        case drop
        /// A number was skipped: the link broke the protocol.
        case gap
    }

    /// What queuing a message did.
    enum Enqueued: Equatable {
        /// Numbered; `write` is the entry to write now when the writer was idle at this very entry.
        case queued(UInt64, write: Bool)
        /// The replay buffer is full: wait for room.
        case full
        /// The conversation ended.
        case failed(SessionError)
    }

    /// What the peer's `resume` decided.
    struct Resumed: Equatable {
        /// Our messages an earlier incarnation of the peer never confirmed: lost.
        var lost: [UInt64] = []
        /// Receipts to send again on this link (same incarnation only).
        var receipts: [UInt64] = []
        /// Whether the peer is a new incarnation (our waits for its receipts fail).
        var newIncarnation = false
    }

    /// What a receipt from the peer means.
    enum Receipt: Equatable {
        /// A sender waits for it: wake it.
        case resolve(UInt64)
        /// Kept for a sender that will ask.
        case kept
        /// Stale (another epoch), a repeat, or beyond the bounds: nothing.
        case ignored
    }

    /// What waiting for a receipt finds.
    enum ReceiptWait: Equatable {
        case arrived
        case wait
    }

    /// The most bytes of unacknowledged messages kept (one message always fits).
    let byteLimit: Int
    /// This side's epoch: random per conversation.
    let myEpoch: UInt64
    /// The peer's epoch as learnt from its last `resume`, 0 before the first.
    private(set) var peerEpoch: UInt64 = 0
    /// The number the next message gets.
    private(set) var nextSequence: UInt64 = 1
    /// Messages sent and not acknowledged, oldest first (the replay buffer).
    private var outbox: Deque<Entry> = []
    private var outboxBytes = 0
    /// Position in the outbox (counted from its oldest entry) of the next entry to write on the current link; nil
    /// until the peer's `resume` on it said where to start.
    private(set) var writeIndex: Int?
    /// Whether the current link's writer waits for an entry (then a new one can be written in place).
    private(set) var writerIdle = false
    /// Bumped whenever the link changes: writers and readers of an older link stop.
    private(set) var generation = 0
    /// Why the conversation ended, once it did.
    private(set) var failure: SessionError?
    /// The next number expected from the peer.
    private(set) var nextExpected: UInt64 = 1
    private var unacknowledged = 0
    private var unacknowledgedBytes = 0
    private var flushArmed = false
    /// Messages read from a link (by generation) and not yet in the inbox.
    private var inFlight: [Int: Int] = [:]
    /// Receipts given recently, oldest first, at most ``Limits/recentReceipts``.
    private var recentReceipts: Deque<UInt64> = []
    private var expecting: Set<UInt64> = []
    private var early: Set<UInt64> = []

    init(byteLimit: Int, epoch: UInt64 = .random(in: 1...UInt64.max)) {
        self.byteLimit = byteLimit
        myEpoch = epoch
    }

    /// The last number received in order from the peer.
    var received: UInt64 { nextExpected - 1 }
    /// Messages sent and not yet acknowledged.
    var pendingCount: Int { outbox.count }
    /// Messages waiting for the current link's writer (none while there is no link: then only the replay buffer
    /// bounds what senders queue).
    var writerBacklog: Int { writeIndex.map { outbox.count - $0 } ?? 0 }

    // MARK: Sending

    /// Numbers a message and keeps it, if the replay buffer has room (one message always fits). A `paced` sender
    /// (one that can wait) is also held back once ``Limits/writerBacklog`` messages wait for the link's writer; an
    /// unpaced one (a caller that cannot wait, such as a synchronous API) only by the replay buffer's bytes.
    mutating func enqueue(_ data: [UInt8], receipt: Bool, paced: Bool = true) -> Enqueued {
        if let failure { return .failed(failure) }
        guard pendingCount == 0 || outboxBytes + data.count <= byteLimit && pendingCount < Limits.pendingMessages,
            !paced || writerBacklog < Limits.writerBacklog
        else {
            return .full
        }
        let sequence = nextSequence
        nextSequence += 1
        outbox.append(Entry(sequence: sequence, receipt: receipt, data: data))
        outboxBytes += data.count
        if receipt, expecting.count < Limits.expectingReceipts { expecting.insert(sequence) }
        // The writer waits at exactly this entry: it is written now, by whoever queued it.
        guard writerIdle, let index = writeIndex, index == outbox.count - 1 else {
            return .queued(sequence, write: false)
        }
        writeIndex = index + 1
        return .queued(sequence, write: true)
    }

    /// The message queued last (the one ``enqueue(_:receipt:)`` said to write now).
    var lastQueued: OutboundMessage? { outbox.last?.message }

    /// The entry just queued with `write: true` could not be written in place (the connection's buffer is full):
    /// the writer takes it over.
    mutating func handToWriter() -> Entry? {
        guard let index = writeIndex, index > 0 else { return nil }
        writerIdle = false
        return outbox[index - 1]
    }

    /// The writer of the link of `generation` asks for the next entry: one, in order, or nil when it must wait
    /// (then it is idle), or stop (its link was replaced, the conversation ended).
    mutating func nextToWrite(generation: Int) -> WriterStep {
        guard self.generation == generation, failure == nil, let index = writeIndex else { return .stop }
        if index < outbox.count {
            writeIndex = index + 1
            writerIdle = false
            return .write(outbox[index])
        }
        writerIdle = true
        return .wait
    }

    /// The writer looked without waiting and found nothing: it is not idle until it actually waits.
    mutating func writerResumed() { writerIdle = false }

    /// What the writer does next.
    enum WriterStep {
        case write(Entry)
        case wait
        case stop
    }

    /// A new link replaces the old one: its writer and readers stop; nothing is written until the peer's `resume`
    /// on the new link. Returns the new generation.
    mutating func switchLink() -> Int {
        generation += 1
        linkEnded()
        return generation
    }

    /// The current link ended: nothing is written until the next one's `resume`, and what waited for its writer
    /// no longer holds senders back (only the replay buffer does, while there is no link).
    mutating func linkEnded() {
        writeIndex = nil
        writerIdle = false
    }

    /// Counts the peer's incarnations as this side met them: a wait for a receipt that began under one never
    /// ends with a receipt of another (the numbers start again with each).
    private(set) var incarnation = 0

    /// The peer's `resume` arrived on the link of `generation`: from here on our messages are written from the
    /// first one it lacks, and its messages are numbered as its epoch says.
    ///
    /// - Parameters:
    ///   - epoch: The peer's epoch. A different one than we knew means a new incarnation (it restarted, or ended
    ///     its side of the conversation): whatever it had not confirmed is lost, both numberings start again, and
    ///     receipts either way belong to the earlier incarnation. The first one we learn is just learnt.
    ///   - knowsOurEpoch: Whether the peer named our epoch; only then does `peerReceived` count our messages.
    ///   - peerReceived: The last of our messages the peer has, in order.
    mutating func resume(epoch: UInt64, knowsOurEpoch: Bool, peerReceived: UInt64, generation: Int) -> Resumed {
        guard self.generation == generation, failure == nil else { return Resumed() }
        var resumed = Resumed()
        if peerEpoch != epoch {
            if peerEpoch != 0 {
                resumed.lost = outbox.map(\.sequence)
                outbox = []
                outboxBytes = 0
                nextSequence = 1
                resumed.newIncarnation = true
                incarnation += 1
                expecting = []
                early = []
            }
            peerEpoch = epoch
            nextExpected = 1
            unacknowledged = 0
            unacknowledgedBytes = 0
            recentReceipts = []
        } else {
            if knowsOurEpoch { drop(upTo: peerReceived) }
            resumed.receipts = Array(recentReceipts)
        }
        writeIndex = 0
        writerIdle = false
        return resumed
    }

    /// The peer has every message up to `sequence`; returns whether that made room.
    mutating func acknowledge(upTo sequence: UInt64) -> Bool {
        let before = pendingCount
        drop(upTo: sequence)
        return pendingCount < before
    }

    private mutating func drop(upTo sequence: UInt64) {
        while let first = outbox.first, first.sequence <= sequence {
            outboxBytes -= first.data.count
            outbox.removeFirst()
            // Positions count from the oldest entry: the writer's moves down with it, and never before it.
            if let index = writeIndex { writeIndex = max(index - 1, 0) }
        }
    }

    /// Whether a message of `count` bytes fits now.
    func hasRoom(for count: Int) -> Bool {
        failure != nil
            || (pendingCount == 0 || outboxBytes + count <= byteLimit && pendingCount < Limits.pendingMessages)
                && writerBacklog < Limits.writerBacklog
    }

    /// Whether senders waiting for room should look again after the writer took an entry.
    var backlogEased: Bool { writerBacklog <= Limits.writerBacklog / 2 }

    /// Ends the conversation. Returns the numbers never acknowledged.
    mutating func fail(_ error: SessionError) -> [UInt64] {
        guard failure == nil else { return [] }
        failure = error
        let lost = outbox.map(\.sequence)
        outbox = []
        outboxBytes = 0
        writeIndex = nil
        writerIdle = false
        expecting = []
        early = []
        return lost
    }

    // MARK: Receiving

    /// Classifies a numbered message read from the link of `generation`; a delivered one counts as in flight until
    /// ``delivered(generation:bytes:)``.
    mutating func arrival(of sequence: UInt64, generation: Int) -> Arrival {
        guard self.generation == generation else { return .drop }
        if sequence < nextExpected { return .drop }
        if sequence > nextExpected { return .gap }
        nextExpected += 1
        inFlight[generation, default: 0] += 1
        return .deliver(peerEpoch: peerEpoch)
    }

    /// What a delivered message made due.
    struct Delivered: Equatable {
        /// A cumulative acknowledgement to send now.
        var acknowledge: UInt64?
        /// Arm the flush timer (nothing due yet, stragglers must be confirmed soon).
        var armFlush = false
        /// Readers of newer links waiting for this one's deliveries may go on.
        var olderDeliveriesDone = false
    }

    /// `count` delivered messages of `bytes` in all reached the inbox.
    mutating func delivered(generation: Int, count: Int = 1, bytes: Int) -> Delivered {
        var result = Delivered()
        let left = inFlight[generation, default: count] - count
        inFlight[generation] = left > 0 ? left : nil
        result.olderDeliveriesDone = left <= 0
        unacknowledged += count
        unacknowledgedBytes += bytes
        if unacknowledged >= Limits.acknowledgeEvery || unacknowledgedBytes >= Limits.acknowledgeBytes {
            unacknowledged = 0
            unacknowledgedBytes = 0
            result.acknowledge = received
        } else if !flushArmed {
            flushArmed = true
            result.armFlush = true
        }
        return result
    }

    /// The flush timer fired on the link of `generation`: the acknowledgement to send, if anything is unconfirmed.
    mutating func flush(generation: Int) -> UInt64? {
        flushArmed = false
        guard self.generation == generation, unacknowledged > 0 else { return nil }
        unacknowledged = 0
        unacknowledgedBytes = 0
        return received
    }

    /// Whether no message read from a link older than `generation` is still on its way into the inbox.
    func olderDeliveriesDone(before generation: Int) -> Bool { inFlight.keys.allSatisfy { $0 >= generation } }

    // MARK: Receipts

    /// The application took the peer's message `sequence`, which arrived while the peer's epoch was `epoch`:
    /// true when its receipt is to be sent now (it is also kept, to be sent again after an outage); false for a
    /// message of an earlier incarnation, whose receipt would confirm the new one's message of that number, and
    /// while the current link has not resumed: whoever is at its other end has not yet said which incarnation it
    /// is, so the receipt waits for its `resume` (sent then if the incarnation is the same, forgotten if not).
    mutating func taken(_ sequence: UInt64, epoch: UInt64) -> Bool {
        guard failure == nil, epoch == peerEpoch else { return false }
        recentReceipts.append(sequence)
        if recentReceipts.count > Limits.recentReceipts { recentReceipts.removeFirst() }
        return writeIndex != nil
    }

    /// A `delivered` from the peer for our message `sequence`, naming our epoch as the peer knew it.
    mutating func receipt(_ sequence: UInt64, epoch: UInt64, waited: Bool) -> Receipt {
        guard failure == nil, epoch == myEpoch else { return .ignored }
        if waited { return .resolve(sequence) }
        if expecting.remove(sequence) != nil {
            early.insert(sequence)
            return .kept
        }
        if sequence < nextSequence, sequence + Limits.earlyWindow >= nextSequence, early.count < Limits.earlyReceipts {
            early.insert(sequence)
            return .kept
        }
        return .ignored
    }

    /// A sender starts waiting for the receipt of `sequence`.
    mutating func awaitReceipt(_ sequence: UInt64) -> ReceiptWait {
        expecting.remove(sequence)
        return early.remove(sequence) != nil ? .arrived : .wait
    }
}
