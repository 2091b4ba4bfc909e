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

    @Test func creditStaysExactWhileAReaderJustKeepsUp() {
        // The queue never empties: its front goes round its storage many times, runs of one message each.
        var delivered = DeliveredMessages()
        func channel(_ round: Int) -> UInt32 { UInt32(1 + 2 * (round % 3)) }
        func cost(_ round: Int) -> Int { 128 + round % 7 }
        var wrong = 0
        for round in 0..<100_000 {
            delivered.delivered(channel: channel(round), cost: cost(round))
            if round >= 10 {
                let released = delivered.taken(1)
                if released.count != 1 || released[0] != (channel(round - 10), cost(round - 10)) { wrong += 1 }
            }
        }
        #expect(wrong == 0)
        #expect(delivered.count == 10)
        let last = 99_990..<100_000
        #expect(delivered.totalHeld == last.reduce(0) { $0 + cost($1) })
        #expect(delivered.held(by: 3) == last.filter { channel($0) == 3 }.reduce(0) { $0 + cost($1) })
    }
}
