import Testing

@testable import Multipeer

/// The cut-through path of plaintext connections (``FrameDecoder/takeChannelDataHeader(from:)`` and
/// ``FrameDecoder/appendFrameBytes(from:)``) must see the same frames, in the same order, with the same
/// errors, as decoding every frame with ``FrameDecoder/next()``, however the bytes are cut into reads.
@Suite("Frame decoder cut-through")
struct FrameDecoderCutThroughTests {
    /// What a decoding produced: frames, with stream data frames rebuilt from the pieces passed through.
    enum Item: Equatable {
        case frame(Frame)
        case failure(FrameDecodingError)
    }

    /// Decodes `reads` the way ``ConnectionCore`` does on a plaintext connection.
    static func cutThrough(_ reads: [[UInt8]]) -> [Item] {
        var decoder = FrameDecoder()
        var items: [Item] = []
        var passing: (channel: UInt32, bytes: [UInt8], remaining: Int)?
        func finishPassing() {
            if let current = passing, current.remaining == 0 {
                items.append(.frame(.channelData(channel: current.channel, bytes: current.bytes)))
                passing = nil
            }
        }
        for read in reads {
            var failed = false
            read.withUnsafeBytes { bytes in
                var input = bytes
                while !input.isEmpty && !failed {
                    if var current = passing {
                        let count = min(current.remaining, input.count)
                        current.bytes += input[..<count]
                        current.remaining -= count
                        passing = current
                        input = UnsafeRawBufferPointer(rebasing: input[count...])
                        finishPassing()
                        continue
                    }
                    let before = input.count
                    if let (channel, length) = decoder.takeChannelDataHeader(from: &input) {
                        passing = (channel, [], length)
                        finishPassing()
                        continue
                    }
                    decoder.appendFrameBytes(from: &input)
                    #expect(input.count < before, "no progress")
                    do throws(FrameDecodingError) {
                        while let frame = try decoder.next() { items.append(.frame(frame)) }
                    } catch {
                        items.append(.failure(error))
                        failed = true
                    }
                }
            }
            if failed { break }
        }
        return items
    }

    /// Decodes the concatenation of `reads` with `next()` only.
    static func plain(_ reads: [[UInt8]]) -> [Item] {
        var decoder = FrameDecoder()
        decoder.append(reads.flatMap { $0 })
        var items: [Item] = []
        do throws(FrameDecodingError) {
            while let frame = try decoder.next() { items.append(.frame(frame)) }
        } catch {
            items.append(.failure(error))
        }
        return items
    }

    static func sampleStream() throws -> [UInt8] {
        let encoder = FrameEncoder()
        var bytes: [UInt8] = []
        let frames: [Frame] = [
            .ping(token: 1),
            .channelOpen(channel: 1, kind: .stream, name: "a", initialWindow: 1 << 20),
            .channelData(channel: 1, bytes: (0..<70).map { UInt8($0) }),
            .channelData(channel: 1, bytes: []),
            .message(channel: 3, fragment: .init(id: 0, totalLength: 5, isLast: true, bytes: [1, 2, 3, 4, 5])),
            .channelData(channel: 1, bytes: (0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7) }),
            .windowUpdate(channel: 0, increment: 9),
            .channelData(channel: 5, bytes: [9]),
            .channelData(channel: 5, bytes: [8, 7]),
            .unknown(type: FrameType(rawValue: 0x7E), flags: 3, channel: 2, payload: [1, 2]),
            .channelClose(channel: 1),
        ]
        for frame in frames { try encoder.encode(frame, into: &bytes) }
        return bytes
    }

    @Test func everySplitIntoTwoReadsGivesTheSameFrames() throws {
        let bytes = try Self.sampleStream()
        let expected = Self.plain([bytes])
        #expect(expected.count == 11)
        for cut in 0...bytes.count {
            let reads = [Array(bytes[..<cut]), Array(bytes[cut...])]
            #expect(Self.cutThrough(reads) == expected, "cut at \(cut)")
        }
    }

    @Test func byteByByteAndRandomReadsGiveTheSameFrames() throws {
        let bytes = try Self.sampleStream()
        let expected = Self.plain([bytes])
        #expect(Self.cutThrough(bytes.map { [$0] }) == expected)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var reads: [[UInt8]] = []
            var offset = 0
            while offset < bytes.count {
                let count = min(bytes.count - offset, Int.random(in: 1...200, using: &generator))
                reads.append(Array(bytes[offset..<offset + count]))
                offset += count
            }
            #expect(Self.cutThrough(reads) == expected)
        }
    }

    /// Decodes `bytes` taking message frames through ``FrameDecoder/nextMessageFragment(_:)`` where it accepts
    /// them, like the connection does.
    static func lendingMessages(_ bytes: [UInt8]) -> [Item] {
        var decoder = FrameDecoder()
        decoder.append(bytes)
        var items: [Item] = []
        while true {
            let lent = decoder.nextMessageFragment { channel, id, total, isLast, data in
                items.append(
                    .frame(
                        .message(
                            channel: channel,
                            fragment: .init(id: id, totalLength: total, isLast: isLast, bytes: Array(data)))))
            }
            if lent { continue }
            do throws(FrameDecodingError) {
                guard let frame = try decoder.next() else { break }
                items.append(.frame(frame))
            } catch {
                items.append(.failure(error))
                break
            }
        }
        return items
    }

    @Test func messagesLentFromTheBufferMatchDecodedOnesAndBadOnesStillFail() throws {
        let encoder = FrameEncoder()
        let good: [Frame] = [
            .message(channel: 1, fragment: .init(id: 0, totalLength: 3, isLast: true, bytes: [1, 2, 3])),
            .message(
                channel: 1,
                fragment: .init(id: 1, totalLength: 300, isLast: false, bytes: [UInt8](repeating: 4, count: 200))
            ),
            .message(
                channel: 1,
                fragment: .init(id: 1, totalLength: nil, isLast: false, bytes: [UInt8](repeating: 5, count: 60))),
            .message(
                channel: 1,
                fragment: .init(id: 1, totalLength: nil, isLast: true, bytes: [UInt8](repeating: 6, count: 40))),
            .message(channel: 3, fragment: .init(id: 9, totalLength: 0, isLast: true, bytes: [])),
            .ping(token: 5),
        ]
        var stream: [UInt8] = []
        for frame in good { try encoder.encode(frame, into: &stream) }
        #expect(Self.lendingMessages(stream) == Self.plain([stream]))
        #expect(Self.lendingMessages(stream).count == good.count)
        let bad: [[UInt8]] = [
            hex("01 20 00 00  00000000  00000004  00000000"),  // message on channel 0
            hex("01 20 04 00  00000001  00000004  00000000"),  // unknown flag
            hex("01 20 03 00  00000001  0000000D  00000000 0000000000000002 AA"),  // first+last, 1 byte of 2
            hex("01 20 01 00  00000001  0000000D  00000000 0000000000000000 AA"),  // first, more than the total
            hex("01 20 01 00  00000001  0000000C  00000000 FFFFFFFFFFFFFFFF"),  // total over the limit
            hex("01 20 00 00  00000001  00000002  0000"),  // too short for its id
        ]
        for bytes in bad {
            let expected = Self.plain([stream + bytes])
            guard case .failure = expected.last else {
                Issue.record("expected a failure for \(bytes)")
                continue
            }
            #expect(Self.lendingMessages(stream + bytes) == expected)
        }
    }

    @Test func badHeadersFailAsTheyDoWithoutCutThrough() throws {
        let good = try FrameEncoder().encode(.channelData(channel: 1, bytes: [1, 2, 3]))
        let cases: [[UInt8]] = [
            good + hex("01 11 00 00  00000000  00000001  AA"),  // stream data on channel 0
            good + hex("01 11 00 00  00000001  FFFFFFFF"),  // a 4 GB payload
            good + hex("01 11 01 00  00000001  00000001  AA"),  // flags set
            good + hex("02 11 00 00  00000001  00000001  AA"),  // unknown version
            hex("01 11 00 00  00000001  00010001") + [UInt8](repeating: 0, count: 20),  // one byte over the limit
        ]
        for bytes in cases {
            let expected = Self.plain([bytes])
            guard case .failure = expected.last else {
                Issue.record("expected a failure for \(bytes.prefix(24))")
                continue
            }
            for cut in 0...bytes.count {
                #expect(Self.cutThrough([Array(bytes[..<cut]), Array(bytes[cut...])]) == expected, "cut at \(cut)")
            }
        }
    }
}
