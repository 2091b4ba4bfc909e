import Testing

@testable import Multipeer

/// One frame in its exact wire form, written out by hand from `docs/PROTOCOL.md` section 2.
struct FrameVector: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let frame: Frame

    var testDescription: String { name }

    init(_ name: String, _ hexBytes: String, _ frame: Frame) {
        self.name = name
        self.bytes = hex(hexBytes)
        self.frame = frame
    }
}

/// Parses whitespace-separated hex ("01 0a ff", "010aff"); comments start with `#` and run to the line end.
func hex(_ text: String) -> [UInt8] {
    let digits = text.split(separator: "\n").map { line in
        line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
    }.joined().filter { !$0.isWhitespace }
    precondition(digits.count.isMultiple(of: 2), "odd number of hex digits")
    var bytes: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        bytes.append(UInt8(digits[index..<next], radix: 16)!)
        index = next
    }
    return bytes
}

/// Header: version | type | flags | reserved | channel (4, big-endian) | length (4, big-endian).
let frameVectors: [FrameVector] = [
    FrameVector(
        "hello with fingerprint",
        """
        01 01 00 00  00000000  0000000F   # version 1, hello, channel 0, 15-byte payload
        01 00                             # protocol 1.0
        00000001                          # capabilities: unreliableDatagrams
        03 416461                         # display name "Ada"
        04 DEADBEEF                       # 4-byte fingerprint
        """,
        .hello(
            Frame.Hello(
                capabilities: .unreliableDatagrams, displayName: "Ada", fingerprint: [0xDE, 0xAD, 0xBE, 0xEF]))),
    FrameVector(
        "hello, newer minor, no fingerprint",
        """
        01 01 00 00  00000000  0000000A
        01 07                             # protocol 1.7: a newer minor is accepted
        80000000                          # an unknown capability bit, kept
        02 C3A9                           # display name "é" (2 bytes of UTF-8)
        00                                # no fingerprint
        """,
        .hello(
            Frame.Hello(minorVersion: 7, capabilities: Frame.Capabilities(rawValue: 0x8000_0000), displayName: "é"))),
    FrameVector(
        "hello with every field",
        """
        01 01 00 00  00000000  00000041
        01 00  00000001  03 416461  04 DEADBEEF
        01 04 01020304                    # group proof
        02 02 C350                        # datagram port 50000
        03 20 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA  # verification-code commitment
        05 04 00400000                    # longest message accepted: 4 MiB
        """,
        .hello(
            Frame.Hello(
                capabilities: .unreliableDatagrams, displayName: "Ada", fingerprint: [0xDE, 0xAD, 0xBE, 0xEF],
                groupProof: [1, 2, 3, 4], datagramPort: 50_000, codeCommitment: [UInt8](repeating: 0xAA, count: 32),
                maximumMessageLength: 4 << 20))),
    FrameVector(
        "codeReveal",
        "01 06 00 00  00000000  00000020  1111111111111111111111111111111111111111111111111111111111111111",
        .codeReveal(nonce: [UInt8](repeating: 0x11, count: 32))),
    FrameVector(
        "session message, critical",
        "01 30 01 00  00000000  00000005  0102  AABBCC  # kind 0x0102, body",
        .session(SessionMessage(kind: 0x0102, isCritical: true, body: [0xAA, 0xBB, 0xCC]))),
    FrameVector(
        "session message that may be ignored, empty",
        "01 30 00 00  00000000  00000002  FFFF",
        .session(SessionMessage(kind: 0xFFFF, isCritical: false, body: []))),
    FrameVector(
        "ping",
        "01 02 00 00  00000000  00000008  0102030405060708  # token",
        .ping(token: 0x0102_0304_0506_0708)),
    FrameVector(
        "pong",
        "01 03 00 00  00000000  00000008  FFFFFFFFFFFFFFFF  # token",
        .pong(token: .max)),
    FrameVector(
        "goodbye",
        "01 04 00 00  00000000  00000007  00000001  627965  # reason 1, text \"bye\"",
        .goodbye(reason: 1, text: "bye")),
    FrameVector(
        "error without text",
        "01 05 00 00  00000000  00000004  00000002  # code 2, empty text",
        .error(code: 2, text: "")),
    FrameVector(
        "channelOpen, named stream",
        """
        01 10 00 00  00000003  0000000A   # channel 3, 10-byte payload
        02                                # kind: stream
        00010000                          # initial window 65536
        04 63686174                       # name "chat"
        """,
        .channelOpen(channel: 3, kind: .stream, name: "chat", initialWindow: 65_536)),
    FrameVector(
        "channelOpen, unnamed message channel, zero window",
        "01 10 00 00  00000001  00000006  01  00000000  00  # kind message, window 0, no name",
        .channelOpen(channel: 1, kind: .message, name: "", initialWindow: 0)),
    FrameVector(
        "channelOpen, resource at the largest window",
        "01 10 00 00  FFFFFFFF  00000008  03  7FFFFFFF  02 612E  # kind resource, window 2^31-1, name \"a.\"",
        .channelOpen(channel: .max, kind: .resource, name: "a.", initialWindow: 0x7FFF_FFFF)),
    FrameVector(
        "channelData",
        "01 11 00 00  00000003  00000003  00FF7F",
        .channelData(channel: 3, bytes: [0x00, 0xFF, 0x7F])),
    FrameVector(
        "channelData, empty",
        "01 11 00 00  00000003  00000000",
        .channelData(channel: 3, bytes: [])),
    FrameVector(
        "channelClose",
        "01 12 00 00  00000003  00000000",
        .channelClose(channel: 3)),
    FrameVector(
        "channelReset",
        "01 13 00 00  00000003  00000004  00000008  # code 8",
        .channelReset(channel: 3, code: 8)),
    FrameVector(
        "windowUpdate, connection",
        "01 14 00 00  00000000  00000004  00010000  # channel 0 = connection, +65536",
        .windowUpdate(channel: 0, increment: 65_536)),
    FrameVector(
        "windowUpdate, channel, largest increment",
        "01 14 00 00  00000005  00000004  7FFFFFFF",
        .windowUpdate(channel: 5, increment: 0x7FFF_FFFF)),
    FrameVector(
        "message in one fragment",
        """
        01 20 03 00  00000001  0000000E   # flags FIRST|LAST, channel 1, 14-byte payload
        00000007                          # message id 7
        0000000000000002                  # total length 2 (FIRST only)
        6869                              # "hi"
        """,
        .message(channel: 1, fragment: Frame.MessageFragment(id: 7, totalLength: 2, isLast: true, bytes: [0x68, 0x69]))),
    FrameVector(
        "message, first fragment",
        "01 20 01 00  00000001  0000000F  00000009  0000000000000005  616263  # FIRST, id 9, total 5, \"abc\"",
        .message(
            channel: 1,
            fragment: Frame.MessageFragment(id: 9, totalLength: 5, isLast: false, bytes: [0x61, 0x62, 0x63]))),
    FrameVector(
        "message, middle fragment",
        "01 20 00 00  00000001  00000005  00000009  64  # no flags, id 9, \"d\"",
        .message(channel: 1, fragment: Frame.MessageFragment(id: 9, totalLength: nil, isLast: false, bytes: [0x64]))),
    FrameVector(
        "message, last fragment",
        "01 20 02 00  00000001  00000005  00000009  65  # LAST, id 9, \"e\"",
        .message(channel: 1, fragment: Frame.MessageFragment(id: 9, totalLength: nil, isLast: true, bytes: [0x65]))),
    FrameVector(
        "message, empty, declared 1 GiB",
        "01 20 01 00  00000002  0000000C  00000000  0000000040000000  # FIRST, id 0, total 2^30, no bytes yet",
        .message(channel: 2, fragment: Frame.MessageFragment(id: 0, totalLength: 1 << 30, isLast: false, bytes: []))),
    FrameVector(
        "unknown type",
        "01 7F 80 00  00000009  00000001  AB  # type 0x7F, flags 0x80: passed up whole",
        .unknown(type: FrameType(rawValue: 0x7F), flags: 0x80, channel: 9, payload: [0xAB])),
]

@Suite("Frame golden vectors")
struct FrameGoldenVectorTests {
    @Test("every known frame type has a vector")
    func coverage() {
        let covered = Set(frameVectors.map(\.frame.type))
        for type in FrameType.known {
            #expect(covered.contains(type), "no vector for \(type)")
        }
    }

    @Test("decoded all at once", arguments: frameVectors)
    func decodeAllAtOnce(vector: FrameVector) throws {
        var decoder = FrameDecoder()
        decoder.append(vector.bytes)
        #expect(try decoder.next() == vector.frame)
        #expect(try decoder.next() == nil)
        #expect(decoder.bufferedByteCount == 0)
        try decoder.finish()
    }

    @Test("decoded byte by byte", arguments: frameVectors)
    func decodeByteByByte(vector: FrameVector) throws {
        var decoder = FrameDecoder()
        for (index, byte) in vector.bytes.enumerated() {
            decoder.append(CollectionOfOne(byte))
            let frame = try decoder.next()
            if index < vector.bytes.count - 1 {
                #expect(frame == nil, "frame returned after \(index + 1) of \(vector.bytes.count) bytes")
            } else {
                #expect(frame == vector.frame)
            }
        }
    }

    @Test("every strict prefix needs more bytes", arguments: frameVectors)
    func truncatedAtEveryOffset(vector: FrameVector) throws {
        for length in 0..<vector.bytes.count {
            var decoder = FrameDecoder()
            decoder.append(vector.bytes[..<length])
            #expect(try decoder.next() == nil, "prefix of \(length) bytes")
            if length > 0 {
                #expect(throws: FrameDecodingError.truncatedStream(buffered: length)) { try decoder.finish() }
            } else {
                try decoder.finish()
            }
        }
    }

    @Test("encoded to exactly the vector", arguments: frameVectors)
    func encode(vector: FrameVector) throws {
        #expect(try FrameEncoder().encode(vector.frame) == vector.bytes)
    }

    @Test("all vectors in one stream, in seeded random chunks")
    func concatenatedStream() throws {
        let stream = frameVectors.flatMap(\.bytes)
        for seed in UInt64(1)...20 {
            var random = SplitMix64(seed: seed)
            var decoder = FrameDecoder()
            var frames: [Frame] = []
            var offset = 0
            while offset < stream.count {
                let chunk = Int.random(in: 1...40, using: &random)
                let end = min(stream.count, offset + chunk)
                decoder.append(stream[offset..<end])
                offset = end
                while let frame = try decoder.next() { frames.append(frame) }
            }
            #expect(frames == frameVectors.map(\.frame))
            try decoder.finish()
        }
    }
}

/// A small seeded generator (SplitMix64) so random tests repeat exactly.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
