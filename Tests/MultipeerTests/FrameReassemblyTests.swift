import TestIsolation
import Testing

@testable import Multipeer

@Suite("Message reassembly", .ownThread)
struct FrameReassemblyTests {
    func fragment(_ id: UInt32, total: UInt64? = nil, last: Bool = false, _ bytes: [UInt8]) -> Frame.MessageFragment {
        Frame.MessageFragment(id: id, totalLength: total, isLast: last, bytes: bytes)
    }

    @Test("a one-fragment message is returned at once and holds no slot")
    func singleFragment() throws {
        var reassembler = MessageReassembler()
        #expect(try reassembler.receive(fragment(1, total: 2, last: true, [7, 8]), channel: 1) == [7, 8])
        #expect(reassembler.partialMessageCount == 0)
    }

    @Test("interleaved messages on one and several channels come out whole")
    func interleaved() throws {
        var reassembler = MessageReassembler()
        #expect(try reassembler.receive(fragment(1, total: 4, [1, 2]), channel: 1) == nil)
        #expect(try reassembler.receive(fragment(2, total: 2, [9]), channel: 1) == nil)
        #expect(try reassembler.receive(fragment(1, total: 3, [5]), channel: 2) == nil)
        #expect(reassembler.declaredBytes == 9)
        #expect(try reassembler.receive(fragment(2, last: true, [10]), channel: 1) == [9, 10])
        #expect(try reassembler.receive(fragment(1, [3]), channel: 1) == nil)
        #expect(try reassembler.receive(fragment(1, last: true, [6, 7]), channel: 2) == [5, 6, 7])
        #expect(try reassembler.receive(fragment(1, last: true, [4]), channel: 1) == [1, 2, 3, 4])
        #expect(reassembler.partialMessageCount == 0)
        #expect(reassembler.declaredBytes == 0)
    }

    @Test("fragments out of order or not adding up are refused, and release what they held")
    func protocolErrors() throws {
        var reassembler = MessageReassembler()
        #expect(throws: MessageReassemblyError.fragmentWithoutStart(channel: 1, id: 5)) {
            try reassembler.receive(fragment(5, [1]), channel: 1)
        }
        _ = try reassembler.receive(fragment(5, total: 3, [1]), channel: 1)
        #expect(throws: MessageReassemblyError.duplicateStart(channel: 1, id: 5)) {
            try reassembler.receive(fragment(5, total: 3, [1]), channel: 1)
        }
        #expect(reassembler.declaredBytes == 0)
        _ = try reassembler.receive(fragment(6, total: 3, [1]), channel: 1)
        #expect(throws: MessageReassemblyError.lengthMismatch(channel: 1, id: 6, declared: 3, received: 4)) {
            try reassembler.receive(fragment(6, [1, 2, 3]), channel: 1)
        }
        _ = try reassembler.receive(fragment(7, total: 3, [1]), channel: 1)
        #expect(throws: MessageReassemblyError.lengthMismatch(channel: 1, id: 7, declared: 3, received: 2)) {
            try reassembler.receive(fragment(7, last: true, [2]), channel: 1)
        }
        #expect(reassembler.partialMessageCount == 0)
        #expect(reassembler.declaredBytes == 0)
    }

    @Test("partial messages are bounded in number and in declared length; a message's buffer is allocated once")
    func bounds() throws {
        var reassembler = MessageReassembler(limits: .init(maximumMessages: 2, maximumMessageLength: 1 << 20))
        #expect(throws: MessageReassemblyError.tooLong(channel: 1, id: 1, declared: (1 << 20) + 1, limit: 1 << 20)) {
            try reassembler.receive(fragment(1, total: (1 << 20) + 1, []), channel: 1)
        }
        _ = try reassembler.receive(fragment(1, total: 1 << 20, []), channel: 1)
        _ = try reassembler.receive(fragment(2, total: 1 << 20, []), channel: 1)
        #expect(reassembler.declaredBytes == 2 << 20)
        #expect(throws: MessageReassemblyError.tooMuchInFlight(messages: 3, bytes: (2 << 20) + 1)) {
            try reassembler.receive(fragment(3, total: 1, []), channel: 2)
        }
        // Small messages in one fragment need no slot.
        #expect(try reassembler.receive(fragment(3, total: 1, last: true, [1]), channel: 2) == [1])
        reassembler.removeChannel(1)
        #expect(reassembler.partialMessageCount == 0)
        #expect(reassembler.declaredBytes == 0)
    }

    @Test("scheduler, codec and reassembler together: messages on three channels arrive whole")
    func endToEnd() throws {
        var flow = FlowController()
        try flow.receivedWindowUpdate(channel: 0, increment: 1 << 30)
        for channel: UInt32 in 1...3 {
            _ = try flow.openLocalChannel(channel)
            try flow.receivedWindowUpdate(channel: channel, increment: 1 << 30)
        }
        var scheduler = FrameScheduler()
        var random = SplitMix64(seed: 11)
        var expected: [UInt32: [[UInt8]]] = [:]
        for channel: UInt32 in 1...3 {
            for _ in 0..<5 {
                let count = [0, 1, 100, 70_000, 1_000_000].randomElement(using: &random)!
                let message = (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
                try scheduler.enqueueMessage(message, channel: channel)
                expected[channel, default: []].append(message)
            }
        }
        var stream: [UInt8] = []
        let encoder = FrameEncoder()
        while let frame = scheduler.next(flow: &flow) { try encoder.encode(frame, into: &stream) }
        var decoder = FrameDecoder()
        var reassembler = MessageReassembler()
        var received: [UInt32: [[UInt8]]] = [:]
        var offset = 0
        while offset < stream.count {
            let end = min(stream.count, offset + 16_384)
            decoder.append(stream[offset..<end])
            offset = end
            while case .message(let channel, let fragment)? = try decoder.next() {
                if let message = try reassembler.receive(fragment, channel: channel) {
                    received[channel, default: []].append(message)
                }
            }
        }
        #expect(received == expected)
    }
}
