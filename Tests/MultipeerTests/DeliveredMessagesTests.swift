import Testing

@testable import Multipeer

@Suite("Credit held by delivered messages")
struct DeliveredMessagesTests {
    @Test func creditComesBackInDeliveryOrderPerChannel() {
        var delivered = DeliveredMessages()
        for (channel, cost) in [(1, 10), (1, 20), (3, 5), (1, 7), (3, 1), (3, 2)] {
            delivered.delivered(channel: UInt32(channel), cost: cost)
        }
        #expect(delivered.count == 6)
        #expect(delivered.held(by: 1) == 37 && delivered.held(by: 3) == 8 && delivered.totalHeld == 45)
        let first = delivered.taken(1)
        #expect(first.map(\.channel) == [1] && first.map(\.cost) == [10])
        // A partly taken run, then whole runs.
        let next = delivered.taken(4)
        #expect(next.map(\.channel) == [1, 3, 1, 3] && next.map(\.cost) == [20, 5, 7, 1])
        #expect(delivered.held(by: 3) == 2 && delivered.held(by: 1) == 0)
        #expect(delivered.taken(10).map(\.cost) == [2])
        #expect(delivered.count == 0 && delivered.totalHeld == 0)
        #expect(delivered.taken(1).isEmpty)
    }

    @Test func storageStaysCompactWhileAReaderJustKeepsUp() {
        var delivered = DeliveredMessages()
        var expected = 0
        for round in 0..<100_000 {
            delivered.delivered(channel: UInt32(1 + 2 * (round % 3)), cost: 128 + round % 7)
            if round >= 10 {
                expected += delivered.taken(1).reduce(0) { $0 + $1.cost }
            }
        }
        #expect(delivered.count == 10)
        #expect(expected > 0)
        #expect(delivered.storage <= 2 * 64 + 10)
    }
}
