import MulticastDNS
import MultipeerIO
import Testing

@Suite struct DNSMessageEncoderTests {
    let encoder = DNSMessageEncoder()
    let decoder = DNSMessageDecoder()

    @Test(arguments: GoldenVectors.all.map(\.name))
    func goldenMessagesEncodeToTheGoldenBytes(_ name: String) throws {
        let vector = GoldenVectors.all.first { $0.name == name }!
        #expect(try encoder.encode(vector.message) == vector.bytes)
    }

    @Test func emptyTXTIsWrittenAsOneZeroByte() throws {
        let message = DNSMessage(answers: [DNSResourceRecord(name: GoldenVectors.instance, ttl: 1, data: .txt([]))])
        let bytes = try encoder.encode(message)
        #expect(bytes.suffix(3) == [0x00, 0x01, 0x00])
        #expect(try decoder.decode(bytes) == message)
    }

    @Test func compressionKeepsTheCaseOfEveryName() throws {
        let message = DNSMessage(answers: [
            DNSResourceRecord(name: GoldenVectors.name("Host.LOCAL."), ttl: 1, data: .a(.loopback)),
            DNSResourceRecord(name: GoldenVectors.name("host.local."), ttl: 1, data: .a(.loopback)),
        ])
        let decoded = try decoder.decode(try encoder.encode(message))
        #expect(decoded.answers.map(\.name.labels) == [["Host", "LOCAL"], ["host", "local"]])
    }

    @Test func compressedEncodingIsSmallerAndDecodesIdentically() throws {
        var plain = DNSMessageEncoder()
        plain.usesNameCompression = false
        for (_, _, message) in GoldenVectors.all where message.answers.count + message.additionals.count > 1 {
            let compressed = try encoder.encode(message)
            let uncompressed = try plain.encode(message)
            #expect(compressed.count < uncompressed.count)
            #expect(!uncompressed.contains { $0 >= 0xc0 } || message.additionals.isEmpty == false)
            #expect(try decoder.decode(compressed) == decoder.decode(uncompressed))
            #expect(try decoder.decode(uncompressed) == message)
        }
    }

    @Test func randomMessagesRoundTrip() throws {
        var generator = MessageGenerator(seed: 0x5eed)
        for _ in 0..<500 {
            let message = generator.message()
            let bytes = try encoder.encode(message)
            #expect(try decoder.decode(bytes) == message)
            var plain = DNSMessageEncoder()
            plain.usesNameCompression = false
            let uncompressed = try plain.encode(message)
            #expect(bytes.count <= uncompressed.count)
            #expect(try decoder.decode(uncompressed) == message)
        }
    }

    @Test func oversizeMessageThrows() {
        let strings = [[UInt8]](repeating: [UInt8](repeating: 0x61, count: 255), count: 40)
        let message = DNSMessage(answers: [DNSResourceRecord(name: .root, ttl: 1, data: .txt(strings))])
        #expect(throws: DNSEncodingError.messageTooLarge(size: 12 + 11 + 40 * 256, limit: 9000)) {
            try encoder.encode(message)
        }
    }

    @Test func txtStringOver255BytesThrows() {
        let message = DNSMessage(answers: [
            DNSResourceRecord(name: .root, ttl: 1, data: .txt([[UInt8](repeating: 0x61, count: 256)]))
        ])
        #expect(throws: DNSEncodingError.txtStringTooLong(bytes: 256)) { try encoder.encode(message) }
    }

    @Test func tooManyRecordsThrows() {
        let record = DNSResourceRecord(name: .root, ttl: 1, data: .a(.loopback))
        let message = DNSMessage(answers: Array(repeating: record, count: 513))
        #expect(throws: DNSEncodingError.tooManyRecords(count: 513, limit: 512)) { try encoder.encode(message) }
    }

    // MARK: Splitting

    func knownAnswerQuery(_ count: Int) throws -> DNSMessage {
        let service = GoldenVectors.name("_chat._tcp.local.")
        let answers = try (0..<count).map { index in
            DNSResourceRecord(
                name: service, ttl: 4500, data: .ptr(try service.prepending("Peer number \(index)")))
        }
        return DNSMessage(questions: [DNSQuestion(name: service, type: .ptr)], answers: answers)
    }

    @Test(arguments: [512, 1500, 4000])
    func queryWithManyKnownAnswersSplitsWithTC(_ size: Int) throws {
        let message = try knownAnswerQuery(200)
        let packets = try encoder.encode(message, splittingAt: size)
        #expect(packets.count > 1)
        let decoded = try packets.map { try decoder.decode($0) }
        for (index, packet) in packets.enumerated() {
            #expect(packet.count <= size)
            #expect(decoded[index].isTruncated == (index < packets.count - 1))
            #expect(decoded[index].questions == (index == 0 ? message.questions : []))
        }
        #expect(decoded.flatMap(\.answers) == message.answers)
    }

    @Test func jumboPacketHoldsTwoHundredKnownAnswers() throws {
        let message = try knownAnswerQuery(200)
        let packets = try encoder.encode(message, splittingAt: 9000)
        #expect(packets.count == 1)
        #expect(try decoder.decode(packets[0]) == message)
    }

    @Test func messageThatFitsIsOnePacketWithoutTC() throws {
        let packets = try encoder.encode(GoldenVectors.quPTRQueryMessage, splittingAt: 1500)
        #expect(packets == [GoldenVectors.quPTRQuery])
    }

    @Test func responsesSplitWithoutTCAndDropAdditionalsThatDoNotFit() throws {
        var message = try knownAnswerQuery(60)
        message.questions = []
        message.flags = DNSMessage.responseFlags
        let big = DNSResourceRecord(
            name: GoldenVectors.instance, ttl: 1,
            data: .txt([[UInt8]](repeating: [UInt8](repeating: 0x61, count: 200), count: 6)))
        let small = DNSResourceRecord(name: GoldenVectors.host, ttl: 1, data: .a(.loopback))
        message.additionals = [big, small]
        let packets = try encoder.encode(message, splittingAt: 1000)
        let decoded = try packets.map { try decoder.decode($0) }
        #expect(decoded.allSatisfy { !$0.isTruncated && $0.isResponse })
        #expect(decoded.flatMap(\.answers) == message.answers)
        #expect(decoded.flatMap(\.additionals) == [small])
        #expect(packets.allSatisfy { $0.count <= 1000 })
    }

    @Test func recordLargerThanThePacketThrows() {
        let big = DNSResourceRecord(
            name: GoldenVectors.instance, ttl: 1,
            data: .txt([[UInt8]](repeating: [UInt8](repeating: 0x61, count: 200), count: 3)))
        let message = DNSMessage(answers: [big])
        #expect(throws: DNSEncodingError.self) { try encoder.encode(message, splittingAt: 512) }
        #expect(throws: DNSEncodingError.invalidMaximumSize(11)) { try encoder.encode(message, splittingAt: 11) }
        #expect(throws: DNSEncodingError.invalidMaximumSize(9001)) { try encoder.encode(message, splittingAt: 9001) }
    }

    @Test func splittingAtTheRecordCountLimitStartsANewPacket() throws {
        let encoder = DNSMessageEncoder(limits: DNSLimits(maximumRecordCount: 10))
        let message = try knownAnswerQuery(25)
        let packets = try encoder.encode(message, splittingAt: 9000)
        let decoded = try packets.map { try DNSMessageDecoder(limits: DNSLimits(maximumRecordCount: 10)).decode($0) }
        #expect(decoded.map { $0.questions.count + $0.answers.count } == [10, 10, 6])
        #expect(decoded.flatMap(\.answers) == message.answers)
    }
}

/// A deterministic pseudo-random message source (SplitMix64), so failures reproduce.
struct MessageGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }

    static let labels = ["local", "_chat", "_tcp", "_udp", "Peer", "peer", "Pièce", "host-1", "a.b", "x", "_sub"]

    mutating func name() -> DNSName {
        let count = below(5)
        return try! DNSName(labels: (0..<count).map { _ in Self.labels[below(Self.labels.count)] })
    }

    mutating func bytes(_ maximum: Int) -> [UInt8] { (0..<below(maximum + 1)).map { _ in UInt8(below(256)) } }

    mutating func data() -> DNSRecordData {
        switch below(7) {
        case 0: .a(IPv4Address(value: UInt32(truncatingIfNeeded: next())))
        case 1: .aaaa(IPv6Address(bytes: (0..<16).map { _ in UInt8(below(256)) })!)
        case 2: .ptr(name())
        case 3:
            .srv(
                priority: UInt16(below(65536)), weight: UInt16(below(65536)), port: UInt16(below(65536)),
                target: name())
        case 4: .txt((0..<below(4)).map { _ in bytes(20) }.filter { !$0.isEmpty })
        case 5:
            .nsec(
                next: name(),
                types: Set((0..<below(6)).map { _ in UInt16(below(3) == 0 ? below(65536) : below(64)) })
                    .sorted().map(DNSRecordType.init(rawValue:)))
        default: .unknown(type: DNSRecordType(rawValue: UInt16(100 + below(100))), bytes: bytes(30))
        }
    }

    mutating func record() -> DNSResourceRecord {
        DNSResourceRecord(
            name: name(), ttl: UInt32(truncatingIfNeeded: next()), cacheFlush: below(2) == 0,
            recordClass: below(4) == 0 ? 255 : dnsClassIN, data: data())
    }

    mutating func message() -> DNSMessage {
        DNSMessage(
            id: UInt16(below(65536)), flags: UInt16(below(65536)),
            questions: (0..<below(4)).map { _ in
                DNSQuestion(
                    name: name(), type: DNSRecordType(rawValue: UInt16(below(300))), unicastResponse: below(2) == 0)
            },
            answers: (0..<below(6)).map { _ in record() }, authorities: (0..<below(3)).map { _ in record() },
            additionals: (0..<below(5)).map { _ in record() })
    }
}
