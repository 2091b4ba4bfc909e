import MultipeerIO

/// Decodes DNS messages (RFC 1035 section 4) as multicast DNS uses them, refusing anything malformed.
///
/// Every length and offset is checked against the bytes actually received, counts are checked against
/// ``DNSLimits`` before anything is read, and nothing is allocated from a count field, so a hostile packet
/// costs at most a pass over its own bytes. The decoder is a value with no state; one instance can decode
/// packets from any number of threads.
public struct DNSMessageDecoder: Sendable {
    /// The bounds enforced on every message.
    public let limits: DNSLimits

    /// Creates a decoder.
    /// - Parameter limits: The bounds to enforce; multicast DNS defaults.
    public init(limits: DNSLimits = .mdns) {
        self.limits = limits
    }

    /// Decodes one complete message.
    /// - Parameter bytes: The UDP payload.
    /// - Returns: The message, with names decompressed, the cache-flush bit taken out of record classes and
    ///   the unicast-response bit out of question classes.
    /// - Throws: ``DNSDecodingError`` naming the first problem found.
    public func decode(_ bytes: [UInt8]) throws(DNSDecodingError) -> DNSMessage {
        guard bytes.count <= limits.maximumMessageSize else {
            throw .messageTooLarge(size: bytes.count, limit: limits.maximumMessageSize)
        }
        var reader = DNSReader(bytes: bytes, limits: limits)
        return try reader.readMessage()
    }

    /// Decodes a message as ``decode(_:)`` does, and says where its last record begins: a transaction signature
    /// (RFC 8945) covers the bytes before it.
    /// - Parameter bytes: The message.
    /// - Returns: The message, and the offset of its last record (nil when it has none).
    /// - Throws: ``DNSDecodingError`` as ``decode(_:)``.
    package func decodeLocatingLastRecord(_ bytes: [UInt8]) throws(DNSDecodingError) -> (DNSMessage, Int?) {
        guard bytes.count <= limits.maximumMessageSize else {
            throw .messageTooLarge(size: bytes.count, limit: limits.maximumMessageSize)
        }
        var reader = DNSReader(bytes: bytes, limits: limits)
        let message = try reader.readMessage()
        return (message, reader.lastRecordStart)
    }
}

/// A cursor over one received message. `end` is where sequential reads must stop: the message end, or the
/// end of the record data being parsed.
struct DNSReader {
    let bytes: [UInt8]
    let limits: DNSLimits
    var offset = 0
    var end: Int
    /// Where the record read last began.
    var lastRecordStart: Int?

    init(bytes: [UInt8], limits: DNSLimits) {
        self.bytes = bytes
        self.limits = limits
        self.end = bytes.count
    }

    /// The cache-flush bit of a record class and the QU bit of a question class (RFC 6762 sections 10.2, 5.4).
    static let classTopBit: UInt16 = 0x8000

    mutating func readMessage() throws(DNSDecodingError) -> DNSMessage {
        let id = try readUInt16()
        let flags = try readUInt16()
        let questionCount = Int(try readUInt16())
        let answerCount = Int(try readUInt16())
        let authorityCount = Int(try readUInt16())
        let additionalCount = Int(try readUInt16())
        let total = questionCount + answerCount + authorityCount + additionalCount
        guard total <= limits.maximumRecordCount else {
            throw .tooManyRecords(count: total, limit: limits.maximumRecordCount)
        }
        // Arrays grow as entries are actually read: a count field never decides an allocation.
        var questions: [DNSQuestion] = []
        for _ in 0..<questionCount { questions.append(try readQuestion()) }
        let answers = try readRecords(answerCount)
        let authorities = try readRecords(authorityCount)
        let additionals = try readRecords(additionalCount)
        guard offset == bytes.count else { throw .trailingBytes(count: bytes.count - offset) }
        return DNSMessage(
            id: id, flags: flags, questions: questions, answers: answers, authorities: authorities,
            additionals: additionals)
    }

    @inline(__always) mutating func need(_ count: Int) throws(DNSDecodingError) {
        if offset + count > end {
            throw .truncated(offset: offset, needed: offset + count - end)
        }
    }

    @inline(__always) mutating func readUInt8() throws(DNSDecodingError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    @inline(__always) mutating func readUInt16() throws(DNSDecodingError) -> UInt16 {
        try need(2)
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    @inline(__always) mutating func readUInt32() throws(DNSDecodingError) -> UInt32 {
        try need(4)
        defer { offset += 4 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8
            | UInt32(bytes[offset + 3])
    }

    mutating func readBytes(_ count: Int) throws(DNSDecodingError) -> [UInt8] {
        try need(count)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    /// Reads a possibly compressed name (RFC 1035 section 4.1.4).
    ///
    /// Each pointer must target a byte strictly before every byte already read for this name, so the
    /// positions visited only ever decrease and no loop is possible; the hop count is bounded as well.
    mutating func readName() throws(DNSDecodingError) -> DNSName {
        var labels: [String] = []
        var position = offset
        var lowestRead = offset
        var jumped = false
        var hops = 0
        var wireLength = 1
        // Before the first jump the name lies in the current field and must stay within `end`; after it,
        // labels are earlier in the message.
        var bound = end
        while true {
            guard position < bound else { throw .truncated(offset: position, needed: 1) }
            let length = Int(bytes[position])
            switch length & 0xC0 {
            case 0x00:
                if length == 0 {
                    if !jumped { offset = position + 1 }
                    return DNSName(uncheckedLabels: labels)
                }
                let start = position + 1
                guard start + length <= bound else {
                    throw .truncated(offset: start, needed: start + length - bound)
                }
                wireLength += 1 + length
                guard wireLength <= DNSName.maximumWireLength else { throw .nameTooLong }
                guard let label = String(validating: bytes[start..<start + length], as: UTF8.self) else {
                    throw .invalidUTF8(offset: position)
                }
                labels.append(label)
                position = start + length
            case 0xC0:
                guard position + 1 < bound else { throw .truncated(offset: position + 1, needed: 1) }
                let target = (length & 0x3F) << 8 | Int(bytes[position + 1])
                guard target < bytes.count else { throw .pointerOutOfRange(offset: position) }
                guard target < lowestRead else { throw .compressionLoop(offset: position) }
                hops += 1
                guard hops <= limits.maximumCompressionPointers else { throw .tooManyPointers }
                if !jumped {
                    offset = position + 2
                    jumped = true
                    bound = bytes.count
                }
                lowestRead = target
                position = target
            default:
                throw .invalidLabelType(offset: position)
            }
        }
    }

    mutating func readQuestion() throws(DNSDecodingError) -> DNSQuestion {
        let name = try readName()
        let type = DNSRecordType(rawValue: try readUInt16())
        let questionClass = try readUInt16()
        return DNSQuestion(
            name: name, type: type, unicastResponse: questionClass & Self.classTopBit != 0,
            questionClass: questionClass & ~Self.classTopBit)
    }

    mutating func readRecords(_ count: Int) throws(DNSDecodingError) -> [DNSResourceRecord] {
        var records: [DNSResourceRecord] = []
        for _ in 0..<count { records.append(try readRecord()) }
        return records
    }

    mutating func readRecord() throws(DNSDecodingError) -> DNSResourceRecord {
        lastRecordStart = offset
        let name = try readName()
        let type = DNSRecordType(rawValue: try readUInt16())
        let recordClass = try readUInt16()
        let ttl = try readUInt32()
        let length = Int(try readUInt16())
        try need(length)
        let start = offset
        end = start + length
        defer { end = bytes.count }
        let data: DNSRecordData
        do throws(DNSDecodingError) {
            data = try readRData(type: type, length: length)
        } catch .truncated {
            throw .invalidRData(type: type, reason: "fields run past the declared length of \(length) bytes")
        } catch .invalidRData(.nsec, _) {
            // python-zeroconf before 0.71 writes NSEC bitmaps with 16-bit window and length fields. The record's
            // length is right, so the packet's framing holds: keep that one record as opaque bytes and use the
            // rest of the packet, rather than losing every answer it carries.
            // The next name is stored uncompressed, so the opaque bytes still mean the same once re-encoded
            // into another message (a compression pointer would point somewhere else there).
            offset = start
            var writer = DNSWriter(compressing: false)
            writer.writeName(try readName())
            data = .unknown(type: .nsec, bytes: writer.bytes + (try readBytes(end - offset)))
        }
        guard offset == end else {
            throw .rdataLengthMismatch(type: type, declared: length, used: offset - start)
        }
        return DNSResourceRecord(
            name: name, ttl: ttl, cacheFlush: recordClass & Self.classTopBit != 0,
            recordClass: recordClass & ~Self.classTopBit, data: data)
    }

    mutating func readRData(type: DNSRecordType, length: Int) throws(DNSDecodingError) -> DNSRecordData {
        switch type {
        case .a:
            guard length == 4 else { throw .rdataLengthMismatch(type: type, declared: length, used: 4) }
            let address = IPv4Address(bytes[offset], bytes[offset + 1], bytes[offset + 2], bytes[offset + 3])
            offset += 4
            return .a(address)
        case .aaaa:
            guard length == 16 else { throw .rdataLengthMismatch(type: type, declared: length, used: 16) }
            defer { offset += 16 }
            return .aaaa(IPv6Address(bytes: bytes[offset..<offset + 16])!)
        case .ptr:
            return .ptr(try readName())
        case .srv:
            let priority = try readUInt16()
            let weight = try readUInt16()
            let port = try readUInt16()
            return .srv(priority: priority, weight: weight, port: port, target: try readName())
        case .txt:
            return .txt(try readTXTStrings())
        case .nsec:
            let next = try readName()
            return .nsec(next: next, types: try readTypeBitmaps())
        default:
            return .unknown(type: type, bytes: try readBytes(length))
        }
    }

    /// Reads the character strings of a TXT record up to `end`. A single empty string, the encoding of an
    /// empty TXT record (RFC 6763 section 6.1), and an empty RDATA both decode as no strings.
    mutating func readTXTStrings() throws(DNSDecodingError) -> [[UInt8]] {
        var strings: [[UInt8]] = []
        while offset < end {
            guard strings.count < limits.maximumTXTStrings else {
                throw .invalidRData(type: .txt, reason: "more than \(limits.maximumTXTStrings) strings")
            }
            let length = Int(try readUInt8())
            strings.append(try readBytes(length))
        }
        if strings.count == 1 && strings[0].isEmpty { return [] }
        return strings
    }

    /// Reads NSEC type bitmaps (RFC 4034 section 4.1.2): window blocks in strictly increasing order, each
    /// 1 to 32 bytes long. Trailing zero bytes are tolerated although RFC 4034 says to omit them.
    mutating func readTypeBitmaps() throws(DNSDecodingError) -> [DNSRecordType] {
        var types: [DNSRecordType] = []
        var previousWindow = -1
        while offset < end {
            let window = Int(try readUInt8())
            let length = Int(try readUInt8())
            guard window > previousWindow else {
                throw .invalidRData(type: .nsec, reason: "window \(window) follows window \(previousWindow)")
            }
            guard (1...32).contains(length) else {
                throw .invalidRData(type: .nsec, reason: "bitmap length \(length) is not between 1 and 32")
            }
            try need(length)
            for index in 0..<length {
                let byte = bytes[offset + index]
                guard byte != 0 else { continue }
                for bit in 0..<8 where byte & (0x80 >> bit) != 0 {
                    types.append(DNSRecordType(rawValue: UInt16(window << 8 | index << 3 | bit)))
                }
            }
            offset += length
            previousWindow = window
        }
        return types
    }
}
