import Testing

@testable import Multipeer

@Suite("Frame decoder")
struct FrameDecoderTests {
    /// Decodes `bytes` all at once and byte by byte; both must fail with the same error.
    func expectFailure(_ expected: FrameDecodingError, _ bytes: [UInt8], limits: FrameLimits = .standard) {
        var whole = FrameDecoder(limits: limits)
        whole.append(bytes)
        #expect(throws: expected) { _ = try whole.next() }
        // The failure is sticky: the stream position is lost.
        #expect(throws: expected) { _ = try whole.next() }
        #expect(throws: expected) { try whole.finish() }

        var bytewise = FrameDecoder(limits: limits)
        var result: Result<Frame?, FrameDecodingError> = .success(nil)
        for byte in bytes {
            bytewise.append(CollectionOfOne(byte))
            result = Result { () throws(FrameDecodingError) in try bytewise.next() }
            if case .failure = result { break }
        }
        #expect(result == .failure(expected))
    }

    @Test("a header claiming a 4 GB payload fails from the header alone")
    func fourGigabytePayload() {
        let header = hex("01 11 00 00  00000001  FFFFFFFF")
        expectFailure(.payloadTooLarge(length: 0xFFFF_FFFF, limit: 65_536), header)
        var decoder = FrameDecoder()
        decoder.append(header)
        #expect(throws: FrameDecodingError.payloadTooLarge(length: 0xFFFF_FFFF, limit: 65_536)) {
            _ = try decoder.next()
        }
        // Nothing of the stream is kept after the failure.
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("one byte over the payload limit is refused; exactly the limit is accepted")
    func payloadLimitBoundary() throws {
        expectFailure(.payloadTooLarge(length: 65_537, limit: 65_536), hex("01 11 00 00  00000001  00010001"))
        let limits = FrameLimits(maximumPayloadLength: 16)
        expectFailure(.payloadTooLarge(length: 17, limit: 16), hex("01 11 00 00  00000001  00000011"), limits: limits)
        var decoder = FrameDecoder(limits: limits)
        decoder.append(hex("01 11 00 00  00000001  00000010") + [UInt8](repeating: 7, count: 16))
        #expect(try decoder.next() == .channelData(channel: 1, bytes: [UInt8](repeating: 7, count: 16)))
    }

    @Test("an unknown frame type is passed up, and the stream continues after it")
    func unknownType() throws {
        var decoder = FrameDecoder()
        decoder.append(
            hex("01 FE 00 00  00000000  00000002  0102") + hex("01 02 00 00 00000000 00000008 0000000000000001"))
        #expect(try decoder.next() == .unknown(type: FrameType(rawValue: 0xFE), flags: 0, channel: 0, payload: [1, 2]))
        #expect(try decoder.next() == .ping(token: 1))
    }

    @Test("an unknown header version is refused")
    func unknownHeaderVersion() {
        expectFailure(.unknownVersion(2), hex("02 02 00 00  00000000  00000008  0000000000000000"))
    }

    @Test("hello with an unknown major version is refused with the version it named")
    func unsupportedMajorVersion() {
        let bytes = hex("01 01 00 00  00000000  0000000A  02 05  00000000  02 4142  00")
        expectFailure(.unsupportedVersion(major: 2, minor: 5), bytes)
        #expect(
            FrameDecodingError.unsupportedVersion(major: 2, minor: 5).description
                == "peer speaks protocol version 2.5; only major version 1 is supported")
    }

    @Test("hello with a 64-byte display name is refused before the name is read")
    func oversizedDisplayName() {
        let name = [UInt8](repeating: 0x61, count: 64)
        let payload = hex("01 00  00000000  40") + name + [0]
        let bytes = hex("01 01 00 00  00000000") + bigEndian(UInt32(payload.count)) + payload
        expectFailure(.fieldLength(type: .hello, field: "display name", length: 64, limit: 63), bytes)
    }

    @Test("hello with a 63-byte display name is accepted")
    func longestDisplayName() throws {
        let name = String(repeating: "a", count: 63)
        let bytes = try FrameEncoder().encode(.hello(Frame.Hello(displayName: name)))
        var decoder = FrameDecoder()
        decoder.append(bytes)
        #expect(try decoder.next() == .hello(Frame.Hello(displayName: name)))
    }

    @Test("hello with an empty display name is refused")
    func emptyDisplayName() {
        expectFailure(
            .fieldLength(type: .hello, field: "display name", length: 0, limit: 63),
            hex("01 01 00 00  00000000  00000008  01 00  00000000  00  00"))
    }

    @Test("hello with a too long fingerprint is refused")
    func oversizedFingerprint() {
        let payload = hex("01 00  00000000  01 41  41") + [UInt8](repeating: 0, count: 65)
        let bytes = hex("01 01 00 00  00000000") + bigEndian(UInt32(payload.count)) + payload
        expectFailure(.fieldLength(type: .hello, field: "fingerprint", length: 65, limit: 64), bytes)
    }

    @Test("hello may carry fields from a later minor version, which are ignored")
    func helloExtension() throws {
        var decoder = FrameDecoder()
        // After the fingerprint (empty): the datagram port field (tag 2) and a field of unknown tag 0x7F.
        decoder.append(hex("01 01 00 00  00000000  00000012  01 01  00000000  01 41  00  02 02 1234  7F 03 FFFFFF"))
        #expect(try decoder.next() == .hello(Frame.Hello(minorVersion: 1, displayName: "A", datagramPort: 0x1234)))
    }

    @Test("hello fields: a known tag twice, or with a length its value cannot have, is refused")
    func helloFieldsAreChecked() {
        expectFailure(
            .malformed(type: .hello, reason: "field datagramPort appears twice"),
            hex("01 01 00 00  00000000  00000011  01 00  00000000  01 41  00  02 02 1234  02 02 5678"))
        expectFailure(
            .malformed(type: .hello, reason: "a datagram port has 2 bytes, not 3"),
            hex("01 01 00 00  00000000  0000000E  01 00  00000000  01 41  00  02 03 123456"))
        expectFailure(
            .malformed(type: .hello, reason: "codeNonce has 31 bytes, not 32"),
            hex("01 01 00 00  00000000  0000002A  01 00  00000000  01 41  00  04 1F") + [UInt8](repeating: 0, count: 31)
        )
        // A length byte that runs past the payload.
        expectFailure(
            .truncated(type: .hello, needed: 3),
            hex("01 01 00 00  00000000  0000000D  01 00  00000000  01 41  00  7F 05 AABB"))
    }

    @Test("texts: invalid UTF-8 and more than 256 bytes are refused")
    func texts() {
        expectFailure(
            .invalidUTF8(type: .goodbye, field: "text"), hex("01 04 00 00  00000000  00000006  00000000  C328"))
        let payload = hex("00000000") + [UInt8](repeating: 0x41, count: 257)
        expectFailure(
            .fieldLength(type: .error, field: "text", length: 257, limit: 256),
            hex("01 05 00 00  00000000") + bigEndian(UInt32(payload.count)) + payload)
    }

    @Test("connection frames on a channel and channel frames on channel 0 are refused")
    func channelRules() {
        expectFailure(
            .unexpectedChannel(type: .ping, channel: 4), hex("01 02 00 00  00000004  00000008  0000000000000000"))
        expectFailure(.unexpectedChannel(type: .channelData, channel: 0), hex("01 11 00 00  00000000  00000000"))
        expectFailure(
            .unexpectedChannel(type: .message, channel: 0),
            hex("01 20 03 00  00000000  0000000C  00000000 0000000000000000"))
    }

    @Test("reserved byte and undefined flags are refused")
    func reservedAndFlags() {
        expectFailure(.reservedBitsSet(1), hex("01 12 00 01  00000001  00000000"))
        expectFailure(.unknownFlags(type: .channelClose, flags: 0x01), hex("01 12 01 00  00000001  00000000"))
        expectFailure(
            .unknownFlags(type: .message, flags: 0x07),
            hex("01 20 07 00  00000001  0000000C  00000000 0000000000000000"))
    }

    @Test("fixed-size payloads that are too short or too long are refused")
    func payloadSizes() {
        expectFailure(.truncated(type: .ping, needed: 1), hex("01 02 00 00  00000000  00000007  01020304050607"))
        expectFailure(
            .malformed(type: .pong, reason: "1 byte(s) after the last field"),
            hex("01 03 00 00  00000000  00000009  010203040506070809"))
        expectFailure(
            .malformed(type: .channelClose, reason: "1 byte(s) after the last field"),
            hex("01 12 00 00  00000001  00000001  00"))
        expectFailure(.truncated(type: .channelReset, needed: 4), hex("01 13 00 00  00000001  00000000"))
        expectFailure(
            .truncated(type: .channelOpen, needed: 2), hex("01 10 00 00  00000001  00000007  02 00000010 03 41"))
    }

    @Test("channel kinds, windows and increments out of range are refused")
    func fieldRanges() {
        expectFailure(
            .malformed(type: .channelOpen, reason: "unknown channel kind 4"),
            hex("01 10 00 00  00000001  00000006  04 00000000 00"))
        expectFailure(
            .malformed(type: .channelOpen, reason: "initial window 2147483648 exceeds 2^31-1"),
            hex("01 10 00 00  00000001  00000006  01 80000000 00"))
        expectFailure(
            .malformed(type: .windowUpdate, reason: "increment 0 is not in 1...2^31-1"),
            hex("01 14 00 00  00000000  00000004  00000000"))
        expectFailure(
            .malformed(type: .windowUpdate, reason: "increment 2147483648 is not in 1...2^31-1"),
            hex("01 14 00 00  00000001  00000004  80000000"))
    }

    @Test("message fragments: declared length over 1 GiB, and first fragments contradicting it, are refused")
    func messageRules() {
        expectFailure(
            .messageTooLarge(length: (1 << 30) + 1, limit: 1 << 30),
            hex("01 20 01 00  00000001  0000000C  00000000  0000000040000001"))
        expectFailure(
            .messageTooLarge(length: .max, limit: 1 << 30),
            hex("01 20 01 00  00000001  0000000C  00000000  FFFFFFFFFFFFFFFF"))
        expectFailure(
            .malformed(type: .message, reason: "first fragment of 2 bytes contradicts total length 1"),
            hex("01 20 01 00  00000001  0000000E  00000000  0000000000000001  4142"))
        expectFailure(
            .malformed(type: .message, reason: "first fragment of 1 bytes contradicts total length 2"),
            hex("01 20 03 00  00000001  0000000D  00000000  0000000000000002  41"))
        expectFailure(.truncated(type: .message, needed: 1), hex("01 20 02 00  00000001  00000003  000000"))
    }

    @Test("the buffer never holds more than one frame plus the last read")
    func bufferBound() throws {
        let limits = FrameLimits(maximumPayloadLength: 1024)
        let encoder = FrameEncoder(limits: limits)
        var random = SplitMix64(seed: 42)
        var stream: [UInt8] = []
        for index in 0..<200 {
            let count = Int.random(in: 0...1024, using: &random)
            stream += try encoder.encode(
                .channelData(channel: 1, bytes: [UInt8](repeating: UInt8(index % 256), count: count)))
        }
        var decoder = FrameDecoder(limits: limits)
        var offset = 0
        var frames = 0
        let readSize = 700
        while offset < stream.count {
            let end = min(stream.count, offset + readSize)
            decoder.append(stream[offset..<end])
            offset = end
            #expect(decoder.bufferedByteCount <= Frame.headerLength + 1024 + readSize)
            while try decoder.next() != nil { frames += 1 }
            #expect(decoder.bufferedByteCount < Frame.headerLength + 1024)
        }
        #expect(frames == 200)
        try decoder.finish()
    }

    /// A deterministic stand-in for the libFuzzer target (which needs a package target of its own): mutated
    /// golden vectors and random bytes never crash the decoder, and whatever it accepts encodes to a frame
    /// that decodes to the same value.
    @Test("mutated vectors and random bytes: no crash, and accepted frames round-trip", arguments: UInt64(1)...4)
    func mutations(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let limits = FrameLimits(maximumPayloadLength: 512)
        let encoder = FrameEncoder(limits: limits)
        var accepted = 0
        for round in 0..<3000 {
            var bytes: [UInt8]
            if round.isMultiple(of: 4) {
                bytes = (0..<Int.random(in: 0...64, using: &random)).map { _ in
                    UInt8.random(in: 0...255, using: &random)
                }
                // Mostly valid headers, so the payload parsers are reached.
                if bytes.count >= 4 && Bool.random(using: &random) {
                    bytes[0] = 1
                    bytes[3] = 0
                }
            } else {
                bytes = frameVectors.randomElement(using: &random)!.bytes
                for _ in 0..<Int.random(in: 1...3, using: &random) {
                    let index = Int.random(in: 0..<bytes.count, using: &random)
                    switch Int.random(in: 0..<3, using: &random) {
                    case 0: bytes[index] ^= 1 << UInt8.random(in: 0...7, using: &random)
                    case 1: bytes[index] = .random(in: 0...255, using: &random)
                    default: bytes.removeSubrange(index...)
                    }
                    if bytes.isEmpty { break }
                }
            }
            var decoder = FrameDecoder(limits: limits)
            decoder.append(bytes)
            while true {
                let frame: Frame?
                do { frame = try decoder.next() } catch { break }
                guard let frame else { break }
                accepted += 1
                var again = FrameDecoder(limits: limits)
                again.append(try encoder.encode(frame))
                #expect(try again.next() == frame)
            }
        }
        #expect(accepted > 100)
    }

    @Test("errors describe themselves")
    func descriptions() {
        #expect(
            FrameDecodingError.payloadTooLarge(length: 0xFFFF_FFFF, limit: 65_536).description
                == "frame declares a 4294967295-byte payload; at most 65536 bytes are accepted")
        #expect(
            FrameDecodingError.unexpectedChannel(type: .hello, channel: 2).description
                == "hello frame must be sent on channel 0, not channel 2")
        #expect(FrameType(rawValue: 0xAB).description == "type 0xab")
    }
}

func bigEndian(_ value: UInt32) -> [UInt8] {
    [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
}
