import TestIsolation
import Testing

@testable import Multipeer

@Suite("Frame encoder", .ownThread)
struct FrameEncoderTests {
    let encoder = FrameEncoder()

    @Test("frames the peer would refuse are refused at the sender")
    func refusals() {
        #expect(throws: FrameEncodingError.fieldLength(type: .hello, field: "display name", length: 64, limit: 63)) {
            try encoder.encode(.hello(Frame.Hello(displayName: String(repeating: "x", count: 64))))
        }
        #expect(throws: FrameEncodingError.fieldLength(type: .hello, field: "display name", length: 0, limit: 63)) {
            try encoder.encode(.hello(Frame.Hello(displayName: "")))
        }
        #expect(throws: FrameEncodingError.fieldLength(type: .hello, field: "fingerprint", length: 65, limit: 64)) {
            try encoder.encode(.hello(Frame.Hello(displayName: "a", fingerprint: [UInt8](repeating: 0, count: 65))))
        }
        #expect(throws: FrameEncodingError.fieldLength(type: .goodbye, field: "text", length: 257, limit: 256)) {
            try encoder.encode(.goodbye(reason: 0, text: String(repeating: "x", count: 257)))
        }
        #expect(throws: FrameEncodingError.fieldLength(type: .channelOpen, field: "name", length: 256, limit: 255)) {
            try encoder.encode(
                .channelOpen(channel: 1, kind: .stream, name: String(repeating: "x", count: 256), initialWindow: 0))
        }
        #expect(throws: FrameEncodingError.unexpectedChannel(type: .channelData, channel: 0)) {
            try encoder.encode(.channelData(channel: 0, bytes: []))
        }
        #expect(throws: FrameEncodingError.payloadTooLarge(length: 65_537, limit: 65_536)) {
            try encoder.encode(.channelData(channel: 1, bytes: [UInt8](repeating: 0, count: 65_537)))
        }
        #expect(
            throws: FrameEncodingError.invalidField(type: .windowUpdate, reason: "increment 0 is not in 1...2^31-1")
        ) {
            try encoder.encode(.windowUpdate(channel: 0, increment: 0))
        }
        #expect(throws: (any Error).self) {
            try encoder.encode(
                .message(channel: 1, fragment: Frame.MessageFragment(id: 0, totalLength: 1, isLast: true, bytes: [])))
        }
        #expect(throws: (any Error).self) {
            try encoder.encode(
                .message(
                    channel: 1,
                    fragment: Frame.MessageFragment(id: 0, totalLength: (1 << 30) + 1, isLast: false, bytes: [])))
        }
        #expect(throws: (any Error).self) {
            try encoder.encode(.unknown(type: .ping, flags: 0, channel: 0, payload: []))
        }
    }

    @Test("a failed encode leaves the buffer as it was")
    func failedEncodeAppendsNothing() throws {
        var bytes: [UInt8] = [1, 2, 3]
        #expect(throws: (any Error).self) {
            try encoder.encode(.channelData(channel: 1, bytes: [UInt8](repeating: 0, count: 70_000)), into: &bytes)
        }
        #expect(bytes == [1, 2, 3])
        try encoder.encode(.channelClose(channel: 1), into: &bytes)
        #expect(bytes == [1, 2, 3] + hex("01 12 00 00 00000001 00000000"))
    }

    @Test("the largest payload round-trips")
    func largestPayload() throws {
        let frame = Frame.message(
            channel: 9,
            fragment: Frame.MessageFragment(
                id: 1, totalLength: nil, isLast: false, bytes: [UInt8](repeating: 0xA5, count: 65_532)))
        let bytes = try encoder.encode(frame)
        #expect(bytes.count == 12 + 65_536)
        var decoder = FrameDecoder()
        decoder.append(bytes)
        #expect(try decoder.next() == frame)
    }

    @Test("seeded random frames round-trip, all at once and in random chunks", arguments: UInt64(1)...8)
    func randomRoundTrip(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let frames = (0..<300).map { _ in randomFrame(using: &random) }
        var stream: [UInt8] = []
        for frame in frames {
            let bytes = try encoder.encode(frame)
            var single = FrameDecoder()
            single.append(bytes)
            #expect(try single.next() == frame)
            stream += bytes
        }
        var decoder = FrameDecoder()
        var decoded: [Frame] = []
        var offset = 0
        while offset < stream.count {
            let end = min(stream.count, offset + Int.random(in: 1...3000, using: &random))
            decoder.append(stream[offset..<end])
            offset = end
            while let frame = try decoder.next() { decoded.append(frame) }
        }
        #expect(decoded == frames)
    }
}

/// A random frame that satisfies every rule of its layout.
func randomFrame(using random: inout SplitMix64) -> Frame {
    func bytes(_ range: ClosedRange<Int>) -> [UInt8] {
        (0..<Int.random(in: range, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
    }
    func text(_ range: ClosedRange<Int>) -> String {
        // Mixes 1-, 2- and 4-byte UTF-8 characters while staying within `range` bytes.
        let alphabet: [Character] = ["a", "Z", " ", "é", "ß", "🙂", "中"]
        var result = ""
        let target = Int.random(in: range, using: &random)
        while true {
            let next = alphabet.randomElement(using: &random)!
            if result.utf8.count + String(next).utf8.count > target { break }
            result.append(next)
        }
        return result
    }
    let channel = UInt32.random(in: 1...UInt32.max, using: &random)
    switch Int.random(in: 0..<12, using: &random) {
    case 0:
        var name = text(1...63)
        if name.isEmpty { name = "p" }
        return .hello(
            Frame.Hello(
                minorVersion: .random(in: 0...255, using: &random),
                capabilities: Frame.Capabilities(rawValue: .random(in: 0...UInt32.max, using: &random)),
                displayName: name, fingerprint: bytes(0...64)))
    case 1: return .ping(token: .random(in: 0...UInt64.max, using: &random))
    case 2: return .pong(token: .random(in: 0...UInt64.max, using: &random))
    case 3: return .goodbye(reason: .random(in: 0...UInt32.max, using: &random), text: text(0...256))
    case 4: return .error(code: .random(in: 0...UInt32.max, using: &random), text: text(0...256))
    case 5:
        return .channelOpen(
            channel: channel, kind: Frame.ChannelKind.allCases.randomElement(using: &random)!, name: text(0...255),
            initialWindow: .random(in: 0...0x7FFF_FFFF, using: &random))
    case 6: return .channelData(channel: channel, bytes: bytes(0...4000))
    case 7: return .channelClose(channel: channel)
    case 8: return .channelReset(channel: channel, code: .random(in: 0...UInt32.max, using: &random))
    case 9:
        return .windowUpdate(
            channel: Bool.random(using: &random) ? 0 : channel, increment: .random(in: 1...0x7FFF_FFFF, using: &random))
    case 10:
        let data = bytes(0...4000)
        let isFirst = Bool.random(using: &random)
        let isLast = Bool.random(using: &random)
        let total: UInt64? =
            isFirst
            ? (isLast ? UInt64(data.count) : UInt64.random(in: UInt64(data.count)...(1 << 30), using: &random)) : nil
        return .message(
            channel: channel,
            fragment: Frame.MessageFragment(
                id: .random(in: 0...UInt32.max, using: &random), totalLength: total, isLast: isLast, bytes: data))
    default:
        var type = FrameType(rawValue: .random(in: 0...255, using: &random))
        while FrameType.known.contains(type) { type = FrameType(rawValue: type.rawValue &+ 1) }
        return .unknown(
            type: type, flags: .random(in: 0...255, using: &random),
            channel: .random(in: 0...UInt32.max, using: &random),
            payload: bytes(0...100))
    }
}
