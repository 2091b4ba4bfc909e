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
        shared.giveBack(first.messages[1...], reliable: first.reliable[1...])
        #expect(shared.unreadBytes == 400)
        let again = await shared.nextMessages(limit: 64) {}
        #expect(again.messages == Array(messages[1...]))
        #expect(shared.takeConsumed() == 0)  // already returned when first taken
        shared.deliver(batch: [[9, 9]])
        _ = await shared.nextMessages(limit: 64) {}
        #expect(shared.takeConsumed() == 2)
    }
}
