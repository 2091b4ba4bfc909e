import MulticastDNS
import MultipeerIO
import Testing

@Suite struct DNSMessageDecoderTests {
    let decoder = DNSMessageDecoder()

    @Test(arguments: GoldenVectors.all.map(\.name))
    func goldenVectorDecodesAllAtOnce(_ name: String) throws {
        let vector = GoldenVectors.all.first { $0.name == name }!
        let message = try decoder.decode(vector.bytes)
        #expect(message == vector.message)
    }

    @Test(arguments: GoldenVectors.all.map(\.name))
    func everyTruncationThrows(_ name: String) {
        let bytes = GoldenVectors.all.first { $0.name == name }!.bytes
        for length in 0..<bytes.count {
            #expect(throws: DNSDecodingError.self, "prefix of \(length) bytes") {
                try decoder.decode(Array(bytes[..<length]))
            }
        }
    }

    @Test(arguments: GoldenVectors.all.map(\.name))
    func growingByteByByteOnlyTheWholeMessageDecodes(_ name: String) throws {
        let vector = GoldenVectors.all.first { $0.name == name }!
        var buffer: [UInt8] = []
        for byte in vector.bytes {
            #expect(throws: DNSDecodingError.self) { try decoder.decode(buffer) }
            buffer.append(byte)
        }
        #expect(try decoder.decode(buffer) == vector.message)
    }

    @Test func quQueryKeepsTheQUBitOutOfTheClass() throws {
        let question = try #require(try decoder.decode(GoldenVectors.quPTRQuery).questions.first)
        #expect(question.unicastResponse)
        #expect(question.questionClass == dnsClassIN)
    }

    @Test func cacheFlushBitIsMaskedOutOfTheClass() throws {
        let message = try decoder.decode(GoldenVectors.fullResponse)
        #expect(message.answers[0].cacheFlush == false)
        #expect(message.additionals.allSatisfy { $0.cacheFlush && $0.recordClass == dnsClassIN })
    }

    @Test func goodbyeHasTTLZero() throws {
        #expect(try decoder.decode(GoldenVectors.goodbye).answers[0].ttl == 0)
    }

    @Test func legacyUnicastQueryKeepsIDAndFlags() throws {
        let message = try decoder.decode(GoldenVectors.legacyUnicastQuery)
        #expect(message.id == 0x1234)
        #expect(message.flags == 0x0100)
        #expect(!message.isResponse)
    }

    @Test func opaqueNSECSurvivesReEncodingIntoAnotherLayout() throws {
        // The malformed NSEC's next name is a compression pointer; kept verbatim it would point elsewhere once
        // re-encoded (found by the fuzzer). It is stored uncompressed instead.
        let first = try decoder.decode(GoldenVectors.zeroconfMalformedNSEC)
        var reordered = first
        reordered.answers = first.additionals.reversed()
        reordered.additionals = first.answers
        let second = try decoder.decode(try DNSMessageEncoder().encode(reordered))
        #expect(second == reordered)
    }

    @Test func zeroconf047MalformedNSECIsKeptOpaqueAndTheRestOfThePacketIsUsed() throws {
        let message = try decoder.decode(GoldenVectors.zeroconfMalformedNSEC)
        let nsec = try #require(
            message.answers.first { $0.type == .nsec } ?? message.additionals.first { $0.type == .nsec })
        guard case .unknown(.nsec, let bytes) = nsec.data else {
            Issue.record("malformed NSEC should decode as opaque bytes, got \(nsec.data)")
            return
        }
        #expect(!bytes.isEmpty)
    }

    // MARK: Hostile input

    /// A header with the given counts followed by `body`.
    func message(qd: UInt16 = 0, an: UInt16 = 0, ns: UInt16 = 0, ar: UInt16 = 0, _ body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = [0, 0, 0, 0]
        for count in [qd, an, ns, ar] { bytes += [UInt8(count >> 8), UInt8(count & 0xff)] }
        return bytes + body
    }

    @Test func pointerToItselfIsALoop() {
        #expect(throws: DNSDecodingError.compressionLoop(offset: 12)) {
            try decoder.decode(message(qd: 1, [0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01]))
        }
    }

    @Test func twoPointersToEachOtherAreALoop() {
        // 12: pointer to 14; 14: pointer to 12.
        #expect(throws: DNSDecodingError.compressionLoop(offset: 12)) {
            try decoder.decode(message(qd: 1, [0xc0, 0x0e, 0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01]))
        }
    }

    @Test func backwardPointerIntoItsOwnLabelsIsALoop() {
        // Question 1 at 12 is the root; question 2 at 17: "a" then pointer to 17 (itself, via its label).
        let bytes = message(qd: 2, [0x00, 0x00, 0x01, 0x00, 0x01, 0x01, 0x61, 0xc0, 0x11, 0x00, 0x01, 0x00, 0x01])
        #expect(throws: DNSDecodingError.compressionLoop(offset: 19)) { try decoder.decode(bytes) }
    }

    @Test func forwardPointerIsRejected() {
        // 12: pointer to 18, a valid name later in the message; only backward pointers are allowed.
        let bytes = message(qd: 2, [0xc0, 0x12, 0x00, 0x01, 0x00, 0x01, 0x01, 0x61, 0x00, 0x00, 0x01, 0x00, 0x01])
        #expect(throws: DNSDecodingError.compressionLoop(offset: 12)) { try decoder.decode(bytes) }
    }

    @Test func pointerPastTheEndIsOutOfRange() {
        #expect(throws: DNSDecodingError.pointerOutOfRange(offset: 12)) {
            try decoder.decode(message(qd: 1, [0xc0, 0xff, 0x00, 0x01, 0x00, 0x01]))
        }
    }

    @Test func longBackwardPointerChainHitsThePointerLimit() throws {
        func chain(_ links: Int) -> [UInt8] {
            // Answer 1 at 12: root owner, private type 0xff00, RDATA at 23 = "a" + pointers each to the previous.
            var rdata: [UInt8] = [0x01, 0x61, 0x00]
            var previous = 23
            for link in 0..<links {
                rdata += [0xc0, UInt8(previous)]
                previous = 26 + 2 * link
            }
            var body: [UInt8] = [0x00, 0xff, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, UInt8(rdata.count)] + rdata
            // Answer 2: owner is a pointer to the last link.
            body += [0xc0, UInt8(previous), 0x00, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x04, 10, 0, 0, 1]
            return message(an: 2, body)
        }
        #expect(try decoder.decode(chain(20)).answers[1].name == GoldenVectors.name("a."))
        #expect(throws: DNSDecodingError.tooManyPointers) { try decoder.decode(chain(40)) }
    }

    @Test(arguments: [0x40, 0x41, 0x80, 0xbf] as [UInt8])
    func reservedLabelTypesAreRejected(_ lengthByte: UInt8) {
        #expect(throws: DNSDecodingError.invalidLabelType(offset: 12)) {
            try decoder.decode(message(qd: 1, [lengthByte, 0x61, 0x00, 0x00, 0x01, 0x00, 0x01]))
        }
    }

    @Test func sixtyFourByteLabelIsRejected() {
        // A length byte of 64 is label type 0x40 on the wire.
        let body = [0x40] + [UInt8](repeating: 0x61, count: 64) + [0x00, 0x00, 0x01, 0x00, 0x01]
        #expect(throws: DNSDecodingError.invalidLabelType(offset: 12)) { try decoder.decode(message(qd: 1, body)) }
    }

    @Test func nameOver255BytesIsRejected() {
        let label = [0x3f] + [UInt8](repeating: 0x61, count: 63)
        let body = label + label + label + label + [0x00, 0x00, 0x01, 0x00, 0x01]
        #expect(throws: DNSDecodingError.nameTooLong) { try decoder.decode(message(qd: 1, body)) }
    }

    @Test func nameOf255BytesIsAccepted() throws {
        let label = [0x3f] + [UInt8](repeating: 0x61, count: 63)
        let last = [0x3d] + [UInt8](repeating: 0x62, count: 61)
        let body = label + label + label + last + [0x00, 0x00, 0x01, 0x00, 0x01]
        #expect(try decoder.decode(message(qd: 1, body)).questions[0].name.wireLength == 255)
    }

    @Test func hugeCountsWithATinyBodyThrowBeforeAllocating() {
        let bytes = message(qd: 0xffff, an: 0xffff, ns: 0xffff, ar: 0xffff, [0x00])
        #expect(throws: DNSDecodingError.tooManyRecords(count: 4 * 0xffff, limit: 512)) {
            try decoder.decode(bytes)
        }
        // Without the count limit the body still runs out at once.
        let unlimited = DNSMessageDecoder(limits: DNSLimits(maximumRecordCount: .max))
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            #expect(throws: DNSDecodingError.truncated(offset: 13, needed: 2)) { try unlimited.decode(bytes) }
        }
        #expect(elapsed < .milliseconds(100))
    }

    @Test func rdlengthPastTheEndIsTruncated() {
        let body: [UInt8] = [0x00, 0x00, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0xff, 1, 2, 3, 4]
        #expect(throws: DNSDecodingError.truncated(offset: 23, needed: 251)) {
            try decoder.decode(message(an: 1, body))
        }
    }

    @Test func threeByteARecordIsALengthMismatch() {
        let body: [UInt8] = [0x00, 0x00, 0x01, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x03, 1, 2, 3]
        #expect(throws: DNSDecodingError.rdataLengthMismatch(type: .a, declared: 3, used: 4)) {
            try decoder.decode(message(an: 1, body))
        }
    }

    @Test func srvWithSpareBytesIsALengthMismatch() {
        // SRV data: priority, weight, port, root target, then one extra byte inside RDLENGTH.
        let body: [UInt8] = [0x00, 0x00, 0x21, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x08, 0, 0, 0, 0, 0, 1, 0x00, 0xee]
        #expect(throws: DNSDecodingError.rdataLengthMismatch(type: .srv, declared: 8, used: 7)) {
            try decoder.decode(message(an: 1, body))
        }
    }

    @Test func ptrNameRunningPastRDLENGTHIsInvalid() {
        // RDLENGTH 2 but the name "ab" needs 4 bytes; the next bytes would parse as its continuation.
        let body: [UInt8] = [0x00, 0x00, 0x0c, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x02, 0x02, 0x61, 0x62, 0x00]
        #expect(throws: DNSDecodingError.self) { try decoder.decode(message(an: 1, body)) }
        do {
            _ = try decoder.decode(message(an: 1, body))
        } catch {
            guard case .invalidRData(type: .ptr, _) = error else {
                Issue.record("unexpected \(error)")
                return
            }
        }
    }

    @Test func invalidUTF8LabelIsRejected() {
        #expect(throws: DNSDecodingError.invalidUTF8(offset: 12)) {
            try decoder.decode(message(qd: 1, [0x02, 0xc3, 0x28, 0x00, 0x00, 0x01, 0x00, 0x01]))
        }
    }

    @Test func utf8LabelsDecode() throws {
        let label = Array("Pièce".utf8)
        let body = [UInt8(label.count)] + label + [0x00, 0x00, 0x01, 0x00, 0x01]
        #expect(try decoder.decode(message(qd: 1, body)).questions[0].name.labels == ["Pièce"])
    }

    @Test func oversizeMessageIsRejected() {
        let bytes = [UInt8](repeating: 0, count: 9001)
        #expect(throws: DNSDecodingError.messageTooLarge(size: 9001, limit: 9000)) { try decoder.decode(bytes) }
    }

    @Test func trailingGarbageIsRejected() {
        #expect(throws: DNSDecodingError.trailingBytes(count: 2)) {
            try decoder.decode(GoldenVectors.goodbye + [0xde, 0xad])
        }
    }

    /// An NSEC record for the root with RDATA `rdata` (next name already included).
    func nsec(_ rdata: [UInt8]) -> [UInt8] {
        message(an: 1, [0x00, 0x00, 0x2f, 0x00, 0x01, 0, 0, 0, 0, 0x00, UInt8(rdata.count)] + rdata)
    }

    @Test func nsecDecodesEveryWindow() throws {
        // Next name root; window 0: type 1 (A); window 1: type 256 + 2 = 258; window 255: type 65535.
        let rdata: [UInt8] =
            [0x00, 0x00, 0x01, 0x40, 0x01, 0x01, 0x20, 0xff, 0x20] + [UInt8](repeating: 0, count: 31)
            + [0x01]
        let message = try decoder.decode(nsec(rdata))
        #expect(
            message.answers[0].data
                == .nsec(
                    next: .root,
                    types: [.a, DNSRecordType(rawValue: 258), DNSRecordType(rawValue: 65535)]))
    }

    @Test func nsecTypesRoundTripThroughTheEncoder() throws {
        let types = [DNSRecordType.a, .txt, .aaaa, .srv, .nsec, DNSRecordType(rawValue: 258), .init(rawValue: 65535)]
        let original = DNSMessage(answers: [
            DNSResourceRecord(name: GoldenVectors.host, ttl: 1, data: .nsec(next: GoldenVectors.host, types: types))
        ])
        let decoded = try decoder.decode(try DNSMessageEncoder().encode(original))
        #expect(decoded == original)
    }

    @Test(arguments: [
        [0x00, 0x00, 0x00] as [UInt8],  // bitmap length 0
        [0x00, 0x00, 0x21] + [UInt8](repeating: 1, count: 33),  // bitmap length 33
        [0x00, 0x01, 0x01, 0x40, 0x00, 0x01, 0x40],  // window 1 then window 0
        [0x00, 0x00, 0x01, 0x40, 0x00, 0x01, 0x40],  // window 0 twice
    ])
    func malformedNSECBitmapsWithinTheirLengthAreKeptOpaque(_ rdata: [UInt8]) throws {
        let message = try decoder.decode(nsec(rdata))
        #expect(message.answers.map(\.data) == [.unknown(type: .nsec, bytes: rdata)])
    }

    @Test(arguments: [
        [0x00, 0x00, 0x04, 0x40] as [UInt8],  // bitmap shorter than its length
        [0x00, 0x00],  // window without length
    ])
    func nsecBitmapsRunningPastTheRecordAreRejected(_ rdata: [UInt8]) {
        #expect(throws: DNSDecodingError.self) { try decoder.decode(nsec(rdata)) }
    }

    @Test func txtWithTooManyStringsIsRejected() {
        let rdata = [UInt8](repeating: 0, count: 257)
        let body: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x01, 0, 0, 0, 0, 0x01, 0x01] + rdata
        #expect(throws: DNSDecodingError.invalidRData(type: .txt, reason: "more than 256 strings")) {
            try decoder.decode(message(an: 1, body))
        }
    }

    @Test func emptyTXTDecodesAsNoStrings() throws {
        let single: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x01, 0x00]
        #expect(try decoder.decode(message(an: 1, single)).answers[0].data == .txt([]))
        let zeroLength: [UInt8] = [0x00, 0x00, 0x10, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x00]
        #expect(try decoder.decode(message(an: 1, zeroLength)).answers[0].data == .txt([]))
    }

    @Test func unknownTypesAreKeptRaw() throws {
        let body: [UInt8] = [0x00, 0x00, 0x63, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x03, 0xc0, 0x0c, 0x07]
        let data = try decoder.decode(message(an: 1, body)).answers[0].data
        #expect(data == .unknown(type: DNSRecordType(rawValue: 99), bytes: [0xc0, 0x0c, 0x07]))
    }

    @Test func errorsDescribeThemselves() {
        #expect(DNSDecodingError.compressionLoop(offset: 12).description.contains("offset 12"))
        #expect(DNSDecodingError.messageTooLarge(size: 9001, limit: 9000).description.contains("RFC 6762"))
        #expect(
            DNSDecodingError.rdataLengthMismatch(type: .a, declared: 3, used: 4).description
                == "A record declares 3 bytes of data but its fields use 4")
    }
}
