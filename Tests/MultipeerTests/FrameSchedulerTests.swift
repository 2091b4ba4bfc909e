import Testing

@testable import Multipeer

@Suite("Frame scheduler")
struct FrameSchedulerTests {
    /// A flow controller with `channels` opened locally and generous credit granted by the peer.
    func flow(channels: [UInt32], credit: UInt32 = 0x4000_0000) throws -> FlowController {
        var flow = FlowController()
        try flow.receivedWindowUpdate(channel: 0, increment: credit)
        for channel in channels {
            _ = try flow.openLocalChannel(channel)
            try flow.receivedWindowUpdate(channel: channel, increment: credit)
        }
        return flow
    }

    /// Calls `next` until it returns nil.
    func drain(_ scheduler: inout FrameScheduler, _ flow: inout FlowController, limit: Int = 100_000) -> [Frame] {
        var frames: [Frame] = []
        while frames.count < limit, let frame = scheduler.next(flow: &flow) { frames.append(frame) }
        return frames
    }

    @Test("encoding straight from the queue gives the bytes of encoding next()'s frames, credit included")
    func encodeNextMatchesNext() throws {
        func fill(_ scheduler: inout FrameScheduler) throws {
            try scheduler.enqueueControl(.ping(token: 9))
            try scheduler.enqueueData((0..<200_000).map { UInt8(truncatingIfNeeded: $0) }, channel: 1)
            try scheduler.enqueueMessage([1, 2, 3], channel: 3)
            try scheduler.enqueueMessage((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 3) }, channel: 3)
            try scheduler.enqueueMessage([], channel: 3)
            try scheduler.enqueueClose(channel: 1)
        }
        // Credit for part of the work only, so both paths must stop at the same place.
        var flowA = try flow(channels: [1, 3], credit: 1)
        var flowB = try flow(channels: [1, 3], credit: 1)
        var viaFrames = FrameScheduler()
        var direct = FrameScheduler()
        try fill(&viaFrames)
        try fill(&direct)
        let encoder = FrameEncoder()
        var expected: [UInt8] = []
        var expectedData = 0
        while let frame = viaFrames.next(flow: &flowA) {
            try encoder.encode(frame, into: &expected)
            if case .channelData(_, let bytes) = frame { expectedData += bytes.count }
            if case .message(_, let fragment) = frame { expectedData += fragment.bytes.count }
        }
        var actual: [UInt8] = []
        var actualData = 0
        var types: [FrameType] = []
        while let sent = try direct.encodeNext(flow: &flowB, encoder: encoder, into: &actual) {
            actualData += sent.dataBytes
            types.append(sent.type)
        }
        #expect(actual == expected)
        #expect(actualData == expectedData && actualData > 0 && actualData < 300_000)
        #expect(types.first == .ping && types.contains(.channelData) && types.contains(.message))
        #expect(flowA.connectionSend.credit == flowB.connectionSend.credit)
        // The rest goes out once credit arrives, identically again.
        for channel: UInt32 in [0, 1, 3] {
            try flowA.receivedWindowUpdate(channel: channel, increment: 1 << 20)
            try flowB.receivedWindowUpdate(channel: channel, increment: 1 << 20)
        }
        expected = []
        actual = []
        while let frame = viaFrames.next(flow: &flowA) { try encoder.encode(frame, into: &expected) }
        while try direct.encodeNext(flow: &flowB, encoder: encoder, into: &actual) != nil {}
        #expect(actual == expected && !actual.isEmpty)
        #expect(viaFrames.activeChannels.isEmpty && direct.activeChannels.isEmpty)
    }

    @Test("control frames go before queued data")
    func controlFirst() throws {
        var flow = try flow(channels: [1])
        var scheduler = FrameScheduler()
        try scheduler.enqueueData([1, 2, 3], channel: 1)
        try scheduler.enqueueControl(.ping(token: 1))
        try scheduler.enqueueControl(.windowUpdate(channel: 0, increment: 5))
        #expect(
            drain(&scheduler, &flow) == [
                .ping(token: 1), .windowUpdate(channel: 0, increment: 5), .channelData(channel: 1, bytes: [1, 2, 3]),
            ])
    }

    @Test("a deep queue keeps its order and its room while being drained and refilled")
    func deepQueue() throws {
        var flow = try flow(channels: [1])
        var scheduler = FrameScheduler(limits: .init(maximumQueuedItemsPerChannel: 4096))
        var expected: [UInt8] = []
        var received: [UInt8] = []
        for round in 0..<3 {
            for index in 0..<3000 {
                let byte = UInt8(truncatingIfNeeded: index &+ round)
                try scheduler.enqueueMessage([byte], channel: 1)
                expected.append(byte)
            }
            #expect(scheduler.queueRoom(channel: 1) == 4096 - 3000)
            // Take half, then the rest after more arrive: the front moves without the rest being copied.
            for frame in drain(&scheduler, &flow, limit: 1500) {
                if case .message(_, let fragment) = frame { received += fragment.bytes }
            }
            #expect(scheduler.queueRoom(channel: 1) == 4096 - 1500)
            for frame in drain(&scheduler, &flow) {
                if case .message(_, let fragment) = frame { received += fragment.bytes }
            }
            #expect(scheduler.queueRoom(channel: 1) == 4096)
        }
        #expect(received == expected)
    }

    @Test("channels with bulk data take turns, one frame each")
    func roundRobin() throws {
        var flow = try flow(channels: [1, 2, 3])
        var scheduler = FrameScheduler(limits: .init(maximumPayloadLength: 100))
        try scheduler.enqueueData([UInt8](repeating: 1, count: 300), channel: 1)
        try scheduler.enqueueData([UInt8](repeating: 2, count: 150), channel: 2)
        try scheduler.enqueueData([UInt8](repeating: 3, count: 250), channel: 3)
        let frames = drain(&scheduler, &flow)
        #expect(frames.map(\.channel) == [1, 2, 3, 1, 2, 3, 1, 3])
        #expect(
            frames.map { if case .channelData(_, let bytes) = $0 { bytes.count } else { -1 } } == [
                100, 100, 100, 100, 50, 100, 100, 50,
            ])
        #expect(scheduler.activeChannels == [])
    }

    @Test(
        "a prefixed message goes out byte for byte as the joined message, however it is fragmented or gathered",
        arguments: [13, 14, 16, 21, 22, 100, FrameLimits.standard.maximumPayloadLength])
    func prefixedMessagesMatchJoined(payloadLimit: Int) throws {
        let prefix = MessagePrefix(3, bigEndian: 0x0102_0304_0506_0708)
        #expect(prefix.bytes == [3, 1, 2, 3, 4, 5, 6, 7, 8])
        let bodies: [[UInt8]] = [[], [0xAA], Array(0..<40), (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }]
        let limits = FrameScheduler.Limits(maximumPayloadLength: payloadLimit)
        let encoder = FrameEncoder()
        for threshold in [Int.max, 1, 5] {
            var joined = FrameScheduler(limits: limits)
            var prefixed = FrameScheduler(limits: limits)
            var flowA = try flow(channels: [3])
            var flowB = try flow(channels: [3])
            for body in bodies {
                let message = OutboundMessage(prefix: prefix, body: body)
                #expect(message.count == body.count + 9 && message.joined == prefix.bytes + body)
                try joined.enqueueMessages([OutboundMessage(message.joined)], channel: 3)
                try prefixed.enqueueMessages([message], channel: 3)
            }
            var expected: [UInt8] = []
            var expectedData = 0
            while let sent = try joined.encodeNext(flow: &flowA, encoder: encoder, into: &expected) {
                expectedData += sent.dataBytes
            }
            // Gathered data is what the caller writes right after the frame's other bytes.
            var actual: [UInt8] = []
            var actualData = 0
            while let sent = try prefixed.encodeNext(
                flow: &flowB, encoder: encoder, into: &actual, gatheringFrom: threshold)
            {
                actual += sent.payload
                actualData += sent.frame.dataBytes
            }
            #expect(actual == expected, "payload limit \(payloadLimit), gathering from \(threshold)")
            #expect(actualData == expectedData && expectedData == bodies.reduce(0) { $0 + $1.count + 9 })
            #expect(flowA.sendWindow(3)?.credit == flowB.sendWindow(3)?.credit)
            // And through next(): the frames reassemble to the joined messages.
            var viaFrames = FrameScheduler(limits: limits)
            var flowC = try flow(channels: [3])
            for body in bodies {
                try viaFrames.enqueueMessages([OutboundMessage(prefix: prefix, body: body)], channel: 3)
            }
            var bytes: [UInt8] = []
            while let frame = viaFrames.next(flow: &flowC) { try encoder.encode(frame, into: &bytes) }
            #expect(bytes == expected)
        }
    }

    @Test("a prefix counts in a message's size: its priority class, and what a reset drops unsent")
    func prefixCountsInSize() throws {
        let prefix = MessagePrefix(2, bigEndian: 5)
        #expect(prefix == MessagePrefix(2, bigEndian: 5) && prefix != MessagePrefix(3, bigEndian: 5))
        #expect(prefix != .none && MessagePrefix.none.count == 0)
        // 16,375 bytes and a 9-byte prefix are a 16,384-byte message: small. One byte more is not.
        for (body, small) in [(16_375, true), (16_376, false)] {
            var flow = try flow(channels: [1, 3])
            var scheduler = FrameScheduler()
            try scheduler.enqueueData([UInt8](repeating: 0, count: 1 << 20), channel: 1)
            try scheduler.enqueueMessages(
                [OutboundMessage(prefix: prefix, body: [UInt8](repeating: 1, count: body))], channel: 3)
            #expect((scheduler.next(flow: &flow)?.channel == 3) == small, "body \(body)")
        }
        // A message of 9 + 200 bytes in frames of 100: after its first fragment (88 bytes of data), 121 are unsent.
        var flow = try flow(channels: [3])
        var scheduler = FrameScheduler(limits: .init(maximumPayloadLength: 100))
        try scheduler.enqueueMessages(
            [OutboundMessage(prefix: prefix, body: [UInt8](repeating: 1, count: 200))], channel: 3)
        guard case .message(3, let first)? = scheduler.next(flow: &flow) else {
            Issue.record("no first fragment")
            return
        }
        #expect(first.totalLength == 209 && first.bytes.count == 88 && Array(first.bytes.prefix(9)) == prefix.bytes)
        #expect(scheduler.removeChannel(3) == 121)
    }

    @Test("a large message is sent in fragments that reassemble to it, through the codec")
    func fragmentation() throws {
        var flow = try flow(channels: [4])
        var scheduler = FrameScheduler()
        var random = SplitMix64(seed: 3)
        let message = (0..<200_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        let id = try scheduler.enqueueMessage(message, channel: 4)
        let frames = drain(&scheduler, &flow)
        #expect(frames.count == 4)
        var decoder = FrameDecoder()
        var reassembled: [UInt8] = []
        for (index, frame) in frames.enumerated() {
            decoder.append(try FrameEncoder().encode(frame))
            guard case .message(4, let fragment)? = try decoder.next() else {
                Issue.record("not a message frame")
                continue
            }
            #expect(fragment.id == id)
            #expect(fragment.totalLength == (index == 0 ? 200_000 : nil))
            #expect(fragment.isLast == (index == frames.count - 1))
            reassembled += fragment.bytes
        }
        #expect(reassembled == message)
        // The whole message's cost was charged once, by its first fragment.
        #expect(
            flow.sendWindow(4)!.credit
                == 0x4000_0000 + Int(FlowController.Configuration.initialCredit)
                - FlowController.messageCost(length: 200_000))
    }

    @Test("an empty message is one FIRST|LAST fragment; message ids count up per channel")
    func emptyMessage() throws {
        var flow = try flow(channels: [1])
        var scheduler = FrameScheduler()
        #expect(try scheduler.enqueueMessage([], channel: 1) == 0)
        #expect(try scheduler.enqueueMessage([9], channel: 1) == 1)
        #expect(
            drain(&scheduler, &flow) == [
                .message(channel: 1, fragment: .init(id: 0, totalLength: 0, isLast: true, bytes: [])),
                .message(channel: 1, fragment: .init(id: 1, totalLength: 1, isLast: true, bytes: [9])),
            ])
    }

    @Test("a small message overtakes bulk data on other channels")
    func smallMessagePriority() throws {
        var flow = try flow(channels: [1, 2, 3])
        var scheduler = FrameScheduler()
        try scheduler.enqueueData([UInt8](repeating: 0, count: 10 << 20), channel: 1)
        try scheduler.enqueueMessage([UInt8](repeating: 0, count: 1 << 20), channel: 2)
        for _ in 0..<5 { _ = scheduler.next(flow: &flow) }
        try scheduler.enqueueMessage(Array("hello".utf8), channel: 3)
        #expect(
            scheduler.next(flow: &flow)
                == .message(
                    channel: 3, fragment: .init(id: 0, totalLength: 5, isLast: true, bytes: Array("hello".utf8))))
        // Bulk resumes where it was.
        #expect(scheduler.next(flow: &flow)?.channel == 2)
    }

    @Test("a channel without credit is skipped; a grant resumes it; nil when all are blocked")
    func creditBlocking() throws {
        var flow = FlowController()
        _ = try flow.openLocalChannel(1)
        _ = try flow.openLocalChannel(2)
        try flow.receivedWindowUpdate(channel: 0, increment: 1 << 20)
        var scheduler = FrameScheduler()
        try scheduler.enqueueData([UInt8](repeating: 0, count: 300_000), channel: 1)
        let initial = Int(FlowController.Configuration.initialCredit)
        let first = drain(&scheduler, &flow)
        #expect(first.reduce(0) { if case .channelData(_, let bytes) = $1 { $0 + bytes.count } else { $0 } } == initial)
        #expect(scheduler.next(flow: &flow) == nil)
        // Channel 2 still has credit and is served while channel 1 waits.
        try scheduler.enqueueData([7], channel: 2)
        #expect(scheduler.next(flow: &flow) == .channelData(channel: 2, bytes: [7]))
        try flow.receivedWindowUpdate(channel: 1, increment: 100_000)
        let rest = drain(&scheduler, &flow)
        #expect(
            rest.reduce(0) { if case .channelData(_, let bytes) = $1 { $0 + bytes.count } else { $0 } } == 300_000
                - initial)
        #expect(scheduler.activeChannels == [])
    }

    @Test("a message starts only when the credit covers its whole cost; its other fragments need none")
    func messageNeedsItsWholeCost() throws {
        var flow = FlowController()
        let cost = FlowController.messageCost(length: 100_000)
        _ = try flow.openRemoteChannel(1, initialWindow: UInt32(cost - 1))
        var scheduler = FrameScheduler()
        try scheduler.enqueueMessage([UInt8](repeating: 3, count: 100_000), channel: 1)
        #expect(scheduler.next(flow: &flow) == nil)
        #expect(flow.sendWindow(1)?.credit == cost - 1)  // nothing taken by the refusal
        try flow.receivedWindowUpdate(channel: 1, increment: 1)
        guard case .message(1, let first)? = scheduler.next(flow: &flow) else {
            Issue.record("no first fragment")
            return
        }
        #expect(first.totalLength == 100_000 && !first.isLast)
        #expect(flow.sendWindow(1)?.credit == 0)
        // With no credit left at all, the rest still goes: it was paid for.
        guard case .message(1, let second)? = scheduler.next(flow: &flow) else {
            Issue.record("no second fragment")
            return
        }
        #expect(second.isLast && first.bytes.count + second.bytes.count == 100_000)
    }

    @Test("a message waiting for connection credit is not starved by streams that take it piece by piece")
    func aWaitingMessageGetsTheConnectionCredit() throws {
        // Found by review: streams take connection credit 64 KiB at a time as it comes back, while a message needs
        // its whole cost at once; with grants smaller than that cost, the message never started.
        var flow = FlowController()
        for channel: UInt32 in [1, 3, 5] {
            _ = try flow.openLocalChannel(channel)
            try flow.receivedWindowUpdate(channel: channel, increment: 0x4000_0000)
        }
        var scheduler = FrameScheduler()
        for channel: UInt32 in [1, 3] {
            for _ in 0..<64 { try scheduler.enqueueData([UInt8](repeating: 1, count: 1 << 20), channel: channel) }
        }
        try scheduler.enqueueMessage([UInt8](repeating: 2, count: 300_000), channel: 5)
        var started = false
        for _ in 0..<200 where !started {
            for frame in drain(&scheduler, &flow) {
                if case .message(5, let fragment) = frame, fragment.isFirst { started = true }
            }
            try flow.receivedWindowUpdate(channel: 0, increment: 65_536)  // the receiver returns credit in pieces
        }
        #expect(started)
        // The streams go on afterwards.
        try flow.receivedWindowUpdate(channel: 0, increment: 1 << 20)
        #expect(drain(&scheduler, &flow).contains { if case .channelData = $0 { true } else { false } })
    }

    @Test("close goes after the channel's data, and nothing can be queued after it")
    func closeOrdering() throws {
        var flow = try flow(channels: [1])
        var scheduler = FrameScheduler()
        try scheduler.enqueueData([1], channel: 1)
        try scheduler.enqueueClose(channel: 1)
        #expect(throws: FrameSchedulerError.channelNotWritable(1)) { try scheduler.enqueueData([2], channel: 1) }
        #expect(drain(&scheduler, &flow) == [.channelData(channel: 1, bytes: [1]), .channelClose(channel: 1)])
        #expect(throws: FrameSchedulerError.channelNotWritable(1)) { try scheduler.enqueueMessage([2], channel: 1) }
        scheduler.removeChannel(1)
        try scheduler.enqueueData([3], channel: 1)
    }

    @Test("queues are bounded")
    func bounds() throws {
        var scheduler = FrameScheduler(limits: .init(maximumControlFrames: 2, maximumQueuedItemsPerChannel: 3))
        try scheduler.enqueueControl(.ping(token: 0))
        try scheduler.enqueueControl(.pong(token: 0))
        #expect(throws: FrameSchedulerError.controlQueueFull(limit: 2)) {
            try scheduler.enqueueControl(.ping(token: 1))
        }
        for _ in 0..<3 { try scheduler.enqueueData([0], channel: 5) }
        #expect(throws: FrameSchedulerError.channelQueueFull(channel: 5, limit: 3)) {
            try scheduler.enqueueData([0], channel: 5)
        }
        #expect(throws: FrameSchedulerError.channelNotWritable(0)) { try scheduler.enqueueData([0], channel: 0) }
    }

    @Test("a control queue that never drains completely keeps its order, its room and its limit")
    func controlQueueThatNeverEmpties() throws {
        var flow = FlowController()
        var scheduler = FrameScheduler(limits: .init(maximumControlFrames: 8))
        try scheduler.enqueueControl(.ping(token: 0))
        var outOfOrder = 0
        for token in UInt64(1)...10_000 {
            // A frame queued for every one sent: the sent ones must not count against the limit.
            try scheduler.enqueueControl(.pong(token: token))
            let expected: Frame = token == 1 ? .ping(token: 0) : .pong(token: token - 1)
            if scheduler.next(flow: &flow) != expected { outOfOrder += 1 }
        }
        #expect(outOfOrder == 0)
        #expect(scheduler.queuedControlFrames == 1)
        // The limit still holds once the queue's front went round many times.
        for token in UInt64(1)..<8 { try scheduler.enqueueControl(.ping(token: token)) }
        #expect(throws: FrameSchedulerError.controlQueueFull(limit: 8)) {
            try scheduler.enqueueControl(.ping(token: 8))
        }
        #expect(drain(&scheduler, &flow) == [.pong(token: 10_000)] + (1..<8).map { .ping(token: $0) })
    }

    @Test("a reset channel's queue is dropped and the others keep their turns")
    func removal() throws {
        var flow = try flow(channels: [1, 2, 3])
        var scheduler = FrameScheduler(limits: .init(maximumPayloadLength: 100))
        for channel: UInt32 in [1, 2, 3] {
            try scheduler.enqueueData([UInt8](repeating: 0, count: 200), channel: channel)
        }
        #expect(scheduler.next(flow: &flow)?.channel == 1)
        scheduler.removeChannel(2)
        #expect(scheduler.activeChannels == [3, 1])
        #expect(drain(&scheduler, &flow).map(\.channel) == [3, 1, 3])
    }

    @Test("a small message during a 64 MiB transfer waits for at most one frame, through flow control")
    func promptSmallMessage() throws {
        var flow = try flow(channels: [1, 2])
        var scheduler = FrameScheduler()
        try scheduler.enqueueData([UInt8](repeating: 0, count: 64 << 20), channel: 1)
        var sentBeforeMessage = 0
        for round in 0..<2000 {
            if round == 700 { try scheduler.enqueueMessage([1, 2, 3], channel: 2) }
            guard let frame = scheduler.next(flow: &flow) else { break }
            if case .message = frame {
                #expect(round == 700)
                sentBeforeMessage = round
            }
        }
        #expect(sentBeforeMessage == 700)
    }
}
