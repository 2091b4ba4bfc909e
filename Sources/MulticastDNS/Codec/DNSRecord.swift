public import MultipeerIO

/// A DNS resource record type (RFC 1035 section 3.2.2, RFC 3596, RFC 2782, RFC 4034).
public struct DNSRecordType: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The 16-bit type code.
    public var rawValue: UInt16
    /// Creates a type from its code.
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// An IPv4 address (RFC 1035).
    public static let a = DNSRecordType(rawValue: 1)
    /// The start of a zone of authority (RFC 1035): unicast DNS finds a name's zone by asking for it.
    public static let soa = DNSRecordType(rawValue: 6)
    /// A pointer to another name (RFC 1035).
    public static let ptr = DNSRecordType(rawValue: 12)
    /// Character strings (RFC 1035, RFC 6763 section 6).
    public static let txt = DNSRecordType(rawValue: 16)
    /// An IPv6 address (RFC 3596).
    public static let aaaa = DNSRecordType(rawValue: 28)
    /// Service location (RFC 2782).
    public static let srv = DNSRecordType(rawValue: 33)
    /// The EDNS(0) pseudo-record (RFC 6891): a unicast query's larger UDP payload size.
    public static let opt = DNSRecordType(rawValue: 41)
    /// Which types exist for a name (RFC 4034; RFC 6762 section 6.1).
    public static let nsec = DNSRecordType(rawValue: 47)
    /// A transaction signature (RFC 8945): the last record of a signed message.
    public static let tsig = DNSRecordType(rawValue: 250)
    /// Only valid in questions: matches every type.
    public static let any = DNSRecordType(rawValue: 255)

    public var description: String {
        switch self {
        case .a: "A"
        case .soa: "SOA"
        case .opt: "OPT"
        case .tsig: "TSIG"
        case .ptr: "PTR"
        case .txt: "TXT"
        case .aaaa: "AAAA"
        case .srv: "SRV"
        case .nsec: "NSEC"
        case .any: "ANY"
        default: "TYPE\(rawValue)"
        }
    }

    public static func < (a: DNSRecordType, b: DNSRecordType) -> Bool { a.rawValue < b.rawValue }
}

/// The data of a resource record, by type.
public enum DNSRecordData: Hashable, Sendable {
    /// An IPv4 host address.
    case a(IPv4Address)
    /// An IPv6 host address.
    case aaaa(IPv6Address)
    /// A pointer to another name (DNS-SD: service type to instance).
    case ptr(DNSName)
    /// Service location (RFC 2782).
    case srv(priority: UInt16, weight: UInt16, port: UInt16, target: DNSName)
    /// Character strings, each at most 255 bytes (RFC 6763 section 6). An empty list is encoded as one
    /// empty string, as RFC 6763 section 6.1 requires.
    case txt([[UInt8]])
    /// Which types exist for a name (RFC 4034 section 4; mDNS uses it for negative answers, RFC 6762
    /// section 6.1). `types` is kept sorted and free of duplicates by the codec.
    case nsec(next: DNSName, types: [DNSRecordType])
    /// Any other type, kept as raw bytes; names inside it are not decompressed.
    case unknown(type: DNSRecordType, bytes: [UInt8])

    /// The record type this data belongs to.
    public var type: DNSRecordType {
        switch self {
        case .a: .a
        case .aaaa: .aaaa
        case .ptr: .ptr
        case .srv: .srv
        case .txt: .txt
        case .nsec: .nsec
        case .unknown(let type, _): type
        }
    }
}

/// The Internet class (RFC 1035 section 3.2.4).
public let dnsClassIN: UInt16 = 1

/// A resource record.
public struct DNSResourceRecord: Hashable, Sendable, CustomStringConvertible {
    /// The owner name.
    public var name: DNSName
    /// The class without the cache-flush bit; 1 (IN) for everything mDNS uses.
    public var recordClass: UInt16
    /// The mDNS cache-flush bit, the top bit of the class field (RFC 6762 section 10.2).
    public var cacheFlush: Bool
    /// Time to live in seconds; 0 is a goodbye (RFC 6762 section 10.1).
    public var ttl: UInt32
    /// The typed data.
    public var data: DNSRecordData

    /// The record type.
    public var type: DNSRecordType { data.type }

    /// Creates a record.
    public init(
        name: DNSName, ttl: UInt32, cacheFlush: Bool = false, recordClass: UInt16 = dnsClassIN, data: DNSRecordData
    ) {
        self.name = name
        self.ttl = ttl
        self.cacheFlush = cacheFlush
        self.recordClass = recordClass
        self.data = data
    }

    /// The record with TTL 0 and the cache-flush bit clear: equal for two copies of the same record, so it
    /// keys caches, rate limits and known-answer lists.
    public var identity: DNSResourceRecord {
        DNSResourceRecord(name: name, ttl: 0, cacheFlush: false, recordClass: recordClass, data: data)
    }

    /// `true` if both records have the same name, type, class and data (TTL and cache-flush ignored).
    public func isSameRecord(as other: DNSResourceRecord) -> Bool {
        name == other.name && recordClass == other.recordClass && data == other.data
    }

    public var description: String { "\(name) \(ttl) \(type) \(data)" }
}

/// A question (RFC 1035 section 4.1.2) with the mDNS unicast-response (QU) bit.
public struct DNSQuestion: Hashable, Sendable, CustomStringConvertible {
    /// The name asked about.
    public var name: DNSName
    /// The type asked for; ``DNSRecordType/any`` matches all.
    public var type: DNSRecordType
    /// The class without the QU bit.
    public var questionClass: UInt16
    /// The QU bit, the top bit of the class field: the querier prefers a unicast reply (RFC 6762 section 5.4).
    public var unicastResponse: Bool

    /// Creates a question.
    public init(name: DNSName, type: DNSRecordType, unicastResponse: Bool = false, questionClass: UInt16 = dnsClassIN) {
        self.name = name
        self.type = type
        self.unicastResponse = unicastResponse
        self.questionClass = questionClass
    }

    /// `true` if `record` answers this question by name, type and class.
    public func isAnswered(by record: DNSResourceRecord) -> Bool {
        (type == .any || type == record.type)
            && (questionClass == record.recordClass || questionClass == 255)
            && name == record.name
    }

    public var description: String { "\(name) \(type)\(unicastResponse ? " QU" : "")" }
}

/// A DNS message (RFC 1035 section 4.1).
public struct DNSMessage: Hashable, Sendable {
    /// The transaction ID; 0 in multicast mDNS messages, echoed in legacy unicast replies.
    public var id: UInt16
    /// The header flags word (QR, opcode, AA, TC, RD, RA, Z, AD, CD, RCODE).
    public var flags: UInt16
    /// The question section.
    public var questions: [DNSQuestion]
    /// The answer section (known answers in an mDNS query).
    public var answers: [DNSResourceRecord]
    /// The authority section (proposed records in an mDNS probe).
    public var authorities: [DNSResourceRecord]
    /// The additional section.
    public var additionals: [DNSResourceRecord]

    /// Creates a message.
    public init(
        id: UInt16 = 0, flags: UInt16 = 0, questions: [DNSQuestion] = [], answers: [DNSResourceRecord] = [],
        authorities: [DNSResourceRecord] = [], additionals: [DNSResourceRecord] = []
    ) {
        self.id = id
        self.flags = flags
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    /// The flags of an authoritative mDNS response: QR and AA set (RFC 6762 section 18).
    public static let responseFlags: UInt16 = 0x8400
    /// The TC bit: in an mDNS query, more known answers follow in the next packet (RFC 6762 section 7.2).
    public static let truncatedFlag: UInt16 = 0x0200

    /// `true` for a response (QR bit set).
    public var isResponse: Bool { flags & 0x8000 != 0 }
    /// The opcode (0 for standard queries; mDNS ignores messages with any other).
    public var opcode: UInt8 { UInt8((flags >> 11) & 0xf) }
    /// The response code.
    public var responseCode: UInt8 { UInt8(flags & 0xf) }
    /// The TC bit.
    public var isTruncated: Bool { flags & DNSMessage.truncatedFlag != 0 }
}
