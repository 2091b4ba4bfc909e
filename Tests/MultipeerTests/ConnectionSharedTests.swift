import Testing

@testable import Multipeer

@Suite("Connection shared queues")
struct ConnectionSharedTests {
    @Test("messages given back are read again in order, and their credit is counted once")
    func givenBackMessagesCountOnce() async {
        let shared = ConnectionShared(sendBufferLimit: 1 << 20, receiveBufferLimit: 1 << 20)
        let messages = (0..<5).map { [UInt8](repeating: UInt8($0), count: 100) }
        shared.deliver(batch: messages)
        let first = await shared.nextMessages(limit: 64) {}
        #expect(first.messages == messages)
        #expect(shared.takeConsumed() == 500)
        // The application had only one of them when its iterator went away.
        #expect(first.reliable.isEmpty)  // all reliable
        shared.giveBack(first.messages[1...], reliable: [])
        #expect(shared.unreadBytes == 400)
        let again = await shared.nextMessages(limit: 64) {}
        #expect(again.messages == Array(messages[1...]))
        #expect(shared.takeConsumed() == 0)  // already returned when first taken
        shared.deliver(batch: [[9, 9]])
        _ = await shared.nextMessages(limit: 64) {}
        #expect(shared.takeConsumed() == 2)
        // A datagram among them keeps its kind: giving it back adds no credit debt.
        shared.deliver([1, 2, 3])
        shared.deliver([7, 7, 7, 7], dropAbove: 1 << 20)
        let mixed = await shared.nextMessages(limit: 64) {}
        #expect(mixed.reliable == [true, false])
        #expect(shared.takeConsumed() == 3)
        shared.giveBack(mixed.messages[0...], reliable: mixed.reliable[0...])
        _ = await shared.nextMessages(limit: 64) {}
        #expect(shared.takeConsumed() == 0)
        shared.deliver([5])
        _ = await shared.nextMessages(limit: 64) {}
        #expect(shared.takeConsumed() == 1)
    }
}
