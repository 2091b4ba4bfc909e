import Testing

@testable import Multipeer

/// The conversation rules without links: numbering, the replay buffer, resume, epochs, receipts.
@Suite("Reliability state machine")
struct ReliabilityStateMachineTests {
    static func queued(_ machine: inout ReliabilityStateMachine, _ count: Int, receipt: Bool = false) -> [UInt64] {
        (0..<count).compactMap {
            if case .queued(let sequence, _) = machine.enqueue([UInt8($0 & 0xFF)], receipt: receipt) {
                sequence
            } else {
                nil
            }
        }
    }

    /// Drains the writer of the current link, returning the numbers written.
    static func written(_ machine: inout ReliabilityStateMachine) -> [UInt64] {
        var numbers: [UInt64] = []
        while case .write(let entry) = machine.nextToWrite(generation: machine.generation) {
            numbers.append(entry.sequence)
        }
        return numbers
    }

    @Test func aResumeWritesFromWhatThePeerLacksAndDropsWhatItHas() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 11)
        #expect(Self.queued(&sender, 5) == [1, 2, 3, 4, 5])
        // No link yet: nothing is written, everything is kept.
        #expect(Self.written(&sender).isEmpty)
        let first = sender.switchLink()
        _ = sender.resume(epoch: 22, knowsOurEpoch: false, peerReceived: 0, generation: first)
        #expect(Self.written(&sender) == [1, 2, 3, 4, 5])
        let madeRoom = sender.acknowledge(upTo: 2)
        #expect(madeRoom)
        // The link drops after the peer had 3; on the next one it says so and 4, 5 go again.
        let second = sender.switchLink()
        _ = sender.resume(epoch: 22, knowsOurEpoch: true, peerReceived: 3, generation: second)
        #expect(Self.written(&sender) == [4, 5])
        #expect(sender.pendingCount == 2)
    }

    @Test func aNewIncarnationLosesWhatItNeverConfirmedAndNumbersStartAgain() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 11)
        _ = Self.queued(&sender, 3)
        _ = sender.resume(epoch: 22, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = sender.acknowledge(upTo: 1)
        let resumed = sender.resume(epoch: 33, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        #expect(resumed.lost == [2, 3] && resumed.newIncarnation)
        #expect(Self.queued(&sender, 1) == [1])
        // The receiving side: the new incarnation's numbers count from 1 again.
        var receiver = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 44)
        let link = receiver.switchLink()
        _ = receiver.resume(epoch: 22, knowsOurEpoch: false, peerReceived: 0, generation: link)
        #expect(receiver.arrival(of: 1, generation: link) == .deliver(peerEpoch: 22))
        #expect(receiver.arrival(of: 1, generation: link) == .drop)
        #expect(receiver.arrival(of: 3, generation: link) == .gap)
        let again = receiver.switchLink()
        _ = receiver.resume(epoch: 55, knowsOurEpoch: false, peerReceived: 0, generation: again)
        #expect(receiver.arrival(of: 1, generation: again) == .deliver(peerEpoch: 55))
        // A replaced link's messages are dropped.
        #expect(receiver.arrival(of: 2, generation: link) == .drop)
    }

    @Test func receiptsGoOnlyToTheIncarnationThatSentTheMessage() {
        var receiver = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 44)
        let link = receiver.switchLink()
        _ = receiver.resume(epoch: 22, knowsOurEpoch: false, peerReceived: 0, generation: link)
        guard case .deliver(let epoch) = receiver.arrival(of: 1, generation: link) else {
            Issue.record("not delivered")
            return
        }
        let sent = receiver.taken(1, epoch: epoch)
        #expect(sent)
        // Same incarnation after an outage: the receipt is sent again (it may have been lost with the link).
        let same = receiver.resume(epoch: 22, knowsOurEpoch: true, peerReceived: 0, generation: receiver.switchLink())
        #expect(same.receipts == [1])
        // A new incarnation: nothing is sent again, and a message of the earlier one taken now gets no receipt.
        let restarted = receiver.resume(
            epoch: 77, knowsOurEpoch: false, peerReceived: 0, generation: receiver.switchLink())
        #expect(restarted.receipts.isEmpty)
        let stale = receiver.taken(2, epoch: 22)
        #expect(!stale)
        // Taken while a new link has not resumed yet: whoever is on it has not said which incarnation it is, so
        // the receipt waits for its resume...
        let waiting = receiver.switchLink()
        let early = receiver.resume(epoch: 77, knowsOurEpoch: true, peerReceived: 0, generation: waiting)
        #expect(early.receipts.isEmpty)
        guard case .deliver(let epoch77) = receiver.arrival(of: 1, generation: waiting) else {
            Issue.record("not delivered")
            return
        }
        let beforeResume = receiver.switchLink()
        let takenBeforeResume = receiver.taken(1, epoch: epoch77)
        #expect(!takenBeforeResume)
        // ...and is sent with it when the same incarnation is back...
        let back = receiver.resume(epoch: 77, knowsOurEpoch: true, peerReceived: 0, generation: beforeResume)
        #expect(back.receipts == [1])
        // ...but never to a new incarnation that took the link meanwhile.
        let lateLink = receiver.switchLink()
        let takenBeforeReborn = receiver.taken(1, epoch: epoch77)
        #expect(!takenBeforeReborn)
        let reborn = receiver.resume(epoch: 88, knowsOurEpoch: false, peerReceived: 0, generation: lateLink)
        #expect(reborn.receipts.isEmpty && reborn.newIncarnation)
        // The sender's side: a receipt naming another epoch confirms nothing.
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 11)
        _ = Self.queued(&sender, 2, receipt: true)
        #expect(sender.receipt(1, epoch: 99, waited: true) == .ignored)
        #expect(sender.receipt(1, epoch: 11, waited: true) == .resolve(1))
        // A receipt before its sender waits is kept for it.
        #expect(sender.receipt(2, epoch: 11, waited: false) == .kept)
        #expect(sender.awaitReceipt(2) == .arrived)
    }

    @Test func theReplayBufferAndTheWritersBacklogHoldSendersBack() {
        var sender = ReliabilityStateMachine(byteLimit: 100, epoch: 1)
        // One message always fits, however large.
        guard case .queued = sender.enqueue([UInt8](repeating: 0, count: 500), receipt: false) else {
            Issue.record("a large first message was refused")
            return
        }
        #expect(sender.enqueue([1], receipt: false) == .full)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = Self.written(&sender)
        let freed = sender.acknowledge(upTo: 1)
        #expect(freed)
        #expect(sender.hasRoom(for: 50))
        // With a link whose writer lags, senders wait once its backlog is full, and go on when it eased.
        var fast = ReliabilityStateMachine(byteLimit: 1 << 30, epoch: 1)
        _ = fast.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: fast.switchLink())
        _ = Self.queued(&fast, ReliabilityStateMachine.Limits.writerBacklog)
        #expect(fast.enqueue([1], receipt: false) == .full)
        for _ in 0..<(ReliabilityStateMachine.Limits.writerBacklog / 2) {
            _ = fast.nextToWrite(generation: fast.generation)
        }
        #expect(fast.backlogEased && fast.hasRoom(for: 1))
    }

    @Test func anAcknowledgementMovesTheWriterOnlyPastWhatThePeerHas() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 1)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = Self.queued(&sender, 200)
        for _ in 0..<100 { _ = sender.nextToWrite(generation: sender.generation) }
        // The peer confirms some of what the writer wrote: the writer goes on where it was.
        _ = sender.acknowledge(upTo: 50)
        #expect(sender.pendingCount == 150 && sender.writerBacklog == 100)
        guard case .write(let next) = sender.nextToWrite(generation: sender.generation) else {
            Issue.record("nothing to write")
            return
        }
        #expect(next.sequence == 101)
        // It confirms more than this link wrote (it had them from an earlier link): the writer skips those.
        _ = sender.acknowledge(upTo: 150)
        #expect(sender.pendingCount == 50 && sender.writerBacklog == 50)
        #expect(Self.written(&sender) == Array(151...200))
        // Everything confirmed while the writer waits: the next message is written in place.
        _ = sender.acknowledge(upTo: 200)
        #expect(sender.pendingCount == 0 && sender.writerBacklog == 0)
        #expect(sender.enqueue([1], receipt: false) == .queued(201, write: true))
    }

    @Test func aMessageIsWrittenInPlaceOnlyWhenTheWriterWaitsAtIt() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 1)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        guard case .wait = sender.nextToWrite(generation: sender.generation) else {
            Issue.record("the writer had something to write")
            return
        }
        #expect(sender.enqueue([1], receipt: false) == .queued(1, write: true))
        // The connection was full: the writer takes it over, and what follows queues behind it, in order.
        #expect(sender.handToWriter()?.sequence == 1)
        #expect(sender.enqueue([2], receipt: false) == .queued(2, write: false))
        #expect(Self.written(&sender) == [2])
    }

    @Test func aWrittenMessageIsTheHeaderAsAPrefixAndTheApplicationsOwnArray() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 1)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = sender.nextToWrite(generation: sender.generation)
        let data = [UInt8](repeating: 0x5A, count: 64)
        #expect(sender.enqueue(data, receipt: false) == .queued(1, write: true))
        let first = sender.lastQueued
        // The writer still waits (the first was written in place), so the second is written in place too.
        #expect(sender.enqueue(data, receipt: true) == .queued(2, write: true))
        guard let first, let second = sender.lastQueued else {
            Issue.record("nothing to write")
            return
        }
        // The tag and number travel beside the data: no array of 9 + 64 bytes is made for either message.
        #expect(first.prefix.bytes == [ReliabilityStateMachine.Tag.numbered, 0, 0, 0, 0, 0, 0, 0, 1])
        #expect(
            second.prefix.bytes == [ReliabilityStateMachine.Tag.numberedWithReceipt, 0, 0, 0, 0, 0, 0, 0, 2])
        #expect(second.count == ReliabilityStateMachine.Tag.headerLength + 64)
        let shared = data.withUnsafeBufferPointer { original in
            [first.body, second.body].allSatisfy { body in
                body.withUnsafeBufferPointer { $0.baseAddress == original.baseAddress }
            }
        }
        #expect(shared)
    }

    @Test func acknowledgementsAreCumulativeEvery32MessagesOrSoon() {
        var receiver = ReliabilityStateMachine(byteLimit: 1 << 20, epoch: 1)
        let link = receiver.switchLink()
        _ = receiver.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: link)
        for sequence in 1...31 { _ = receiver.arrival(of: UInt64(sequence), generation: link) }
        let first = receiver.delivered(generation: link, count: 31, bytes: 31)
        // Not yet due: the flush (20 ms later) confirms them, once.
        #expect(first.acknowledge == nil && first.armFlush)
        #expect(receiver.flush(generation: link) == 31)
        #expect(receiver.flush(generation: link) == nil)
        for sequence in 32...63 { _ = receiver.arrival(of: UInt64(sequence), generation: link) }
        let due = receiver.delivered(generation: link, count: 32, bytes: 32)
        #expect(due.acknowledge == 63 && !due.armFlush)
        // A flush on a replaced link acknowledges nothing (the new link's resume says it all).
        _ = receiver.arrival(of: 64, generation: link)
        _ = receiver.delivered(generation: link, bytes: 1)
        _ = receiver.switchLink()
        #expect(receiver.flush(generation: link) == nil)
    }

    /// A sender that cannot wait (a synchronous API) is not held to the writer's pace, only by the replay
    /// buffer's bytes.
    @Test func anUnpacedSenderIsBoundOnlyByTheReplayBuffersBytes() {
        var sender = ReliabilityStateMachine(byteLimit: ReliabilityStateMachine.Limits.writerBacklog + 10, epoch: 1)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = Self.queued(&sender, ReliabilityStateMachine.Limits.writerBacklog)
        #expect(sender.enqueue([1], receipt: false) == .full)
        for _ in 0..<10 {
            guard case .queued = sender.enqueue([1], receipt: false, paced: false) else {
                Issue.record("an unpaced message was refused with room in the replay buffer")
                return
            }
        }
        #expect(sender.enqueue([1], receipt: false, paced: false) == .full)
    }

    /// A peer that reads but never confirms cannot make tiny messages pile up beyond a count, whatever the
    /// byte limit allows.
    @Test func unconfirmedMessagesAreBoundedInNumberToo() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 30, epoch: 1)
        let limit = ReliabilityStateMachine.Limits.pendingMessages
        for index in 0..<limit {
            guard case .queued = sender.enqueue([1], receipt: false, paced: false) else {
                Issue.record("message \(index) was refused below the count")
                return
            }
        }
        #expect(sender.pendingCount == limit)
        #expect(sender.enqueue([1], receipt: false, paced: false) == .full)
        #expect(!sender.hasRoom(for: 1))
    }

    @Test func aLinkThatEndsNoLongerHoldsSendersBackWithItsBacklog() {
        var sender = ReliabilityStateMachine(byteLimit: 1 << 30, epoch: 1)
        _ = sender.resume(epoch: 2, knowsOurEpoch: false, peerReceived: 0, generation: sender.switchLink())
        _ = Self.queued(&sender, ReliabilityStateMachine.Limits.writerBacklog)
        #expect(sender.enqueue([1], receipt: false) == .full)
        sender.linkEnded()
        #expect(sender.writerBacklog == 0 && sender.hasRoom(for: 1))
    }

    @Test func aNewIncarnationIsCountedSoOldWaitsForReceiptsEnd() async {
        let conversation = Conversation(byteLimit: 1 << 20, peerName: "Bob")
        _ = conversation.resume(epoch: 5, knowsOurEpoch: false, peerReceived: 0, generation: 0)
        guard case .success(let (sequence, incarnation)) = await conversation.sendForReceipt([1]) else {
            Issue.record("not queued")
            return
        }
        // Bob restarts before the application waits: the wait must not be the new incarnation's message 1's.
        _ = conversation.resume(epoch: 6, knowsOurEpoch: false, peerReceived: 0, generation: 0)
        await #expect(throws: SessionError.self) {
            try await conversation.awaitReceipt(sequence, incarnation: incarnation)
        }
        // The same number, the new incarnation's, is confirmed by the new incarnation's receipt.
        guard case .success(let (again, now)) = await conversation.sendForReceipt([2]) else { return }
        #expect(again == sequence && now == incarnation + 1)
        conversation.receipt(again, epoch: conversation.myEpoch)
        await #expect(throws: Never.self) { try await conversation.awaitReceipt(again, incarnation: now) }
    }
}
