import Testing

@testable import Multipeer

@Suite("Connection shared queues")
struct ConnectionSharedTests {
    private func makeShared(sendBufferLimit: Int = 1 << 20, unreliableBufferLimit: Int = 1 << 20) -> ConnectionShared {
        ConnectionShared(sendBufferLimit: sendBufferLimit, unreliableBufferLimit: unreliableBufferLimit)
    }

    @Test("messages given back are read again in order, and their credit is counted once")
    func givenBackMessagesCountOnce() async {
        let shared = makeShared()
        let messages = (0..<5).map { [UInt8](repeating: UInt8($0), count: 100) }
        shared.deliver(batch: messages)
        let first = await shared.nextMessages(limit: 64) {}
        #expect(first == messages)
        #expect(shared.takeTaken() == 5)
        // The application had only one of them when its iterator went away.
        shared.giveBack(first[1...])
        #expect(shared.unreadBytes == 400)
        let again = await shared.nextMessages(limit: 64) {}
        #expect(again == Array(messages[1...]))
        #expect(shared.takeTaken() == 0)  // already counted when first taken
        shared.deliver(batch: [[9, 9]])
        _ = await shared.nextMessages(limit: 64) {}
        #expect(shared.takeTaken() == 1)
        // Datagrams never carry credit.
        shared.deliver(batch: [[1, 2, 3]])
        shared.deliverUnreliable([7, 7, 7, 7])
        let mixed = await shared.nextMessages(limit: 64) {}
        #expect(mixed == [[1, 2, 3], [7, 7, 7, 7]])
        #expect(shared.takeTaken() == 1)
    }

    @Test("a reader just keeping up with a queue that never empties gets every message in order")
    func deliveredQueueStaysInOrderAsItIsRead() async {
        let shared = makeShared()
        // The writer always stays a little ahead: the queue is never empty, and its front goes round its storage
        // many times over.
        shared.deliver(batch: (0..<10).map { [UInt8($0), 0] })
        var outOfOrder = 0
        for round in 0..<20_000 {
            shared.deliver(batch: [[UInt8(truncatingIfNeeded: round + 10), 0]])
            if await shared.nextMessage(consumed: {}) != [UInt8(truncatingIfNeeded: round), 0] { outOfOrder += 1 }
        }
        #expect(outOfOrder == 0)
        #expect(shared.unreadCount == 10 && shared.unreadBytes == 20)
        #expect(shared.takeTaken() == 20_000)
    }

    @Test("queued datagrams are bounded by their charge, however small they are")
    func emptyDatagramsAreCharged() {
        let shared = makeShared(unreliableBufferLimit: 64 * 1024)
        for _ in 0..<10_000 { shared.deliverUnreliable([]) }
        #expect(shared.unreadCount == 64 * 1024 / FlowController.messageOverhead)
        #expect(shared.droppedDatagrams == 10_000 - shared.unreadCount)
    }

    @Test("messages given back do not lower the charge of the datagrams queued")
    func givenBackMessagesLeaveTheDatagramChargeAlone() async {
        // Found by review: taking a given-back message again released a datagram charge it never had, so an
        // application whose iterators `break` after one message let datagrams pile up far beyond the limit.
        let limit = 64 * 1024
        let shared = makeShared(unreliableBufferLimit: limit)
        shared.deliver(batch: (0..<50).map { _ in [UInt8](repeating: 1, count: 1000) })
        for _ in 0..<10 {
            for _ in 0..<100 { shared.deliverUnreliable([UInt8](repeating: 2, count: 1000)) }
            // An iterator takes a batch, hands out one message and is dropped.
            let batch = await shared.nextMessages(limit: 64) {}
            shared.giveBack(batch[1...])
        }
        let queuedDatagrams = shared.state.withLock { state in
            state.inbound.messages.filter { $0.bytes.first == 2 }.count
        }
        // The limit, plus what one batch given back may hold (64 messages, 64 KiB).
        let bound = limit / FlowController.messageCost(length: 1000) + 64
        #expect(queuedDatagrams <= bound, "\(queuedDatagrams) datagrams queued against a limit of \(limit) bytes")
    }

    @Test("trySend never waits: it fails at once with the limit when the peer is behind")
    func trySendFailsWhenFull() throws {
        let shared = makeShared(sendBufferLimit: 1000)
        #expect(try shared.tryEnqueue(OutboundMessage([UInt8](repeating: 1, count: 600))))
        #expect(try shared.tryEnqueue(OutboundMessage([UInt8](repeating: 1, count: 600))) == false)  // already woken
        let error = #expect(throws: ConnectionError.self) { try shared.tryEnqueue(OutboundMessage([1])) }
        #expect(error?.code == .sendBufferFull(limit: 1000))
        _ = shared.takeOutbound(upTo: 10)
        shared.outboundSent(1200)
        #expect(throws: Never.self) { try shared.tryEnqueue(OutboundMessage([1])) }
    }

    @Test("a sender always ahead of the core keeps only what is not taken yet")
    func outboundQueueKeepsOnlyWhatIsNotTaken() throws {
        // Found while replacing the queues: the core takes at most its channel's room at a time, and the queue
        // was reset only once the core had taken everything, so a sender always ahead of it kept every message it
        // ever sent.
        let shared = makeShared()
        for _ in 0..<100 { _ = try shared.tryEnqueue(OutboundMessage([1])) }
        var taken = 0
        for _ in 0..<1_000 {
            for _ in 0..<64 { _ = try shared.tryEnqueue(OutboundMessage([1])) }
            let (messages, bytes) = shared.takeOutbound(upTo: 64)
            shared.outboundSent(bytes)
            taken += messages.count
        }
        #expect(taken == 64_000)
        let (held, queued) = shared.state.withLock {
            ($0.outbound.messages.count, $0.outbound.messages.count - $0.outbound.head)
        }
        #expect(queued == 100)
        #expect(held <= 2 * (64 + 100), "\(held) messages held for \(queued) queued")
    }

    @Test("session messages wait in order, up to their bounds")
    func sessionMessagesAreBounded() async {
        let shared = makeShared()
        var accepted = 0
        while shared.deliverSession(SessionMessage(kind: 1, body: [UInt8(accepted % 256)])) { accepted += 1 }
        #expect(accepted == ConnectionShared.SessionInbox.maximumCount)
        #expect(await shared.nextSessionMessage()?.body == [0])
        #expect(shared.deliverSession(SessionMessage(kind: 2, body: [])))
        let big = SessionMessage(kind: 3, body: [UInt8](repeating: 0, count: SessionMessage.maximumBodyLength))
        let shared2 = makeShared()
        var bigAccepted = 0
        while shared2.deliverSession(big) { bigAccepted += 1 }
        #expect(bigAccepted * big.charge <= ConnectionShared.SessionInbox.maximumCharge)
        #expect(bigAccepted == ConnectionShared.SessionInbox.maximumCharge / big.charge)
        shared.close(ConnectionError(code: .closedLocally, reason: "test"))
        var drained = 0
        while await shared.nextSessionMessage() != nil { drained += 1 }
        #expect(drained == ConnectionShared.SessionInbox.maximumCount)
    }

    @Test("a session reader staying one message behind keeps only that message")
    func sessionQueueKeepsOnlyWhatIsUnread() async {
        // Found by review: the session queue was reset only once it was empty, so a reader always one message
        // behind kept every message ever delivered.
        let shared = makeShared()
        #expect(shared.deliverSession(SessionMessage(kind: 1, body: [0])))
        var outOfOrder = 0
        for round in 1...10_000 {
            _ = shared.deliverSession(SessionMessage(kind: 1, body: [UInt8(truncatingIfNeeded: round)]))
            let message = await shared.nextSessionMessage()
            if message?.body != [UInt8(truncatingIfNeeded: round - 1)] { outOfOrder += 1 }
        }
        #expect(outOfOrder == 0)
        let storage = shared.state.withLock { $0.session.messages.count }
        #expect(storage == 1, "\(storage) slots kept for 1 unread message")
        #expect(await shared.nextSessionMessage()?.body == [UInt8(truncatingIfNeeded: 10_000)])
    }
}
