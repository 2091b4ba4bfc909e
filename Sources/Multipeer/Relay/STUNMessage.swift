internal import MultipeerIO

/// A STUN message (RFC 8489) as TURN (RFC 8656, RFC 6062) uses it: a 20-byte header (type, length, the magic
/// cookie, a 96-bit transaction ID) and type-length-value attributes padded to four bytes.
///
/// Decoding bounds everything by the message itself and by ``maximumLength``: a relay (or someone spoofing it)
/// cannot make us hold more than that for one message, and every attribute accessor checks its value's length.
struct STUNMessage: Hashable, Sendable {
    /// The method (12 bits).
    struct Method: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        var rawValue: UInt16
        static let binding = Method(rawValue: 0x001)
        static let allocate = Method(rawValue: 0x003)
        static let refresh = Method(rawValue: 0x004)
        static let createPermission = Method(rawValue: 0x008)
        static let connect = Method(rawValue: 0x00A)
        static let connectionBind = Method(rawValue: 0x00B)
        static let connectionAttempt = Method(rawValue: 0x00C)

        var description: String {
            switch self {
            case .binding: "Binding"
            case .allocate: "Allocate"
            case .refresh: "Refresh"
            case .createPermission: "CreatePermission"
            case .connect: "Connect"
            case .connectionBind: "ConnectionBind"
            case .connectionAttempt: "ConnectionAttempt"
            default: "method \(rawValue)"
            }
        }
    }

    /// The class: request, indication, success or error response.
    enum Class: UInt16, Hashable, Sendable {
        case request = 0
        case indication = 1
        case success = 2
        case error = 3
    }

    /// Attribute types this client reads or writes.
    enum AttributeType {
        static let username: UInt16 = 0x0006
        static let messageIntegrity: UInt16 = 0x0008
        static let errorCode: UInt16 = 0x0009
        static let lifetime: UInt16 = 0x000D
        static let xorPeerAddress: UInt16 = 0x0012
        static let realm: UInt16 = 0x0014
        static let nonce: UInt16 = 0x0015
        static let xorRelayedAddress: UInt16 = 0x0016
        static let requestedTransport: UInt16 = 0x0019
        static let xorMappedAddress: UInt16 = 0x0020
        static let connectionID: UInt16 = 0x002A
        static let software: UInt16 = 0x8022
        static let fingerprint: UInt16 = 0x8028
    }

    /// One attribute.
    struct Attribute: Hashable, Sendable {
        var type: UInt16
        var value: [UInt8]
    }

    /// The magic cookie (RFC 8489 section 5).
    static let magicCookie: UInt32 = 0x2112_A442
    /// The header's length.
    static let headerLength = 20
    /// The longest message accepted: TURN's control messages are a few hundred bytes; 4 KiB leaves room for
    /// long nonces and realms while bounding what one message makes us hold.
    static let maximumLength = 4096
    /// The most attributes one message may carry.
    static let maximumAttributes = 32

    var method: Method
    var messageClass: Class
    var transactionID: [UInt8]
    var attributes: [Attribute]

    init(method: Method, messageClass: Class, transactionID: [UInt8], attributes: [Attribute] = []) {
        precondition(transactionID.count == 12, "a STUN transaction ID is 96 bits")
        self.method = method
        self.messageClass = messageClass
        self.transactionID = transactionID
        self.attributes = attributes
    }

    /// The type field: method and class bits interleaved (RFC 8489 section 5).
    var typeField: UInt16 {
        let m = method.rawValue
        let c = messageClass.rawValue
        return (m & 0x000F) | ((c & 1) << 4) | ((m & 0x0070) << 1) | ((c & 2) << 7) | ((m & 0x0F80) << 2)
    }

    static func split(_ type: UInt16) -> (Method, Class) {
        let method = (type & 0x000F) | ((type >> 1) & 0x0070) | ((type >> 2) & 0x0F80)
        let messageClass = ((type >> 4) & 1) | ((type >> 7) & 2)
        return (Method(rawValue: method), Class(rawValue: messageClass)!)
    }

    // MARK: Encoding

    /// The message's bytes, with MESSAGE-INTEGRITY (HMAC-SHA1 under `integrityKey`) and FINGERPRINT appended
    /// when asked for (RFC 8489 sections 14.5 and 14.7).
    func encoded(integrityKey: [UInt8]? = nil, fingerprint: Bool = false) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.headerLength + attributes.reduce(0) { $0 + 4 + $1.value.count + 3 } + 32)
        Self.append16(typeField, to: &bytes)
        Self.append16(0, to: &bytes)
        Self.append32(Self.magicCookie, to: &bytes)
        bytes += transactionID
        for attribute in attributes { Self.append(attribute, to: &bytes) }
        if let integrityKey {
            // The length covers the integrity attribute itself when it is computed.
            Self.setLength(bytes.count - Self.headerLength + 24, in: &bytes)
            let mac = STUNCrypto.hmacSHA1(key: integrityKey, message: bytes)
            Self.append(Attribute(type: AttributeType.messageIntegrity, value: mac), to: &bytes)
        }
        if fingerprint {
            Self.setLength(bytes.count - Self.headerLength + 8, in: &bytes)
            let crc = STUNCrypto.crc32(bytes) ^ 0x5354_554E
            Self.append(Attribute(type: AttributeType.fingerprint, value: Self.bytes32(crc)), to: &bytes)
        }
        Self.setLength(bytes.count - Self.headerLength, in: &bytes)
        return bytes
    }

    // MARK: Decoding

    /// Why bytes are not a STUN message.
    struct DecodingError: Error, Hashable, Sendable, CustomStringConvertible {
        var description: String
    }

    /// How long the message at the start of `bytes` is (header included), once its header has arrived: a relay's
    /// control connection is a stream of messages.
    /// - Throws: ``DecodingError`` when the header is not STUN's or declares more than ``maximumLength``.
    static func frameLength(_ bytes: some RandomAccessCollection<UInt8>) throws(DecodingError) -> Int? {
        guard bytes.count >= headerLength else { return nil }
        let start = bytes.startIndex
        let first = bytes[start]
        guard first & 0xC0 == 0 else {
            throw DecodingError(description: "not a STUN message (first byte \(first))")
        }
        let length = Int(bytes[bytes.index(start, offsetBy: 2)]) << 8 | Int(bytes[bytes.index(start, offsetBy: 3)])
        guard length % 4 == 0 else {
            throw DecodingError(description: "a STUN length of \(length) is not a multiple of 4")
        }
        guard headerLength + length <= maximumLength else {
            throw DecodingError(
                description: "a STUN message of \(headerLength + length) bytes; at most \(maximumLength) are accepted")
        }
        return headerLength + length
    }

    /// Decodes one whole message.
    /// - Throws: ``DecodingError`` naming the first problem: length, cookie, attribute framing, too many attributes.
    init(decoding bytes: [UInt8]) throws(DecodingError) {
        guard bytes.count >= Self.headerLength else {
            throw DecodingError(description: "\(bytes.count) bytes are shorter than a STUN header")
        }
        guard bytes.count <= Self.maximumLength else {
            throw DecodingError(description: "a STUN message of \(bytes.count) bytes; at most \(Self.maximumLength)")
        }
        guard bytes[0] & 0xC0 == 0 else { throw DecodingError(description: "not a STUN message") }
        let length = Int(bytes[2]) << 8 | Int(bytes[3])
        guard length == bytes.count - Self.headerLength, length % 4 == 0 else {
            throw DecodingError(
                description:
                    "the header declares \(length) bytes of attributes; \(bytes.count - Self.headerLength) follow")
        }
        guard Self.read32(bytes, 4) == Self.magicCookie else {
            throw DecodingError(description: "the magic cookie is missing (not RFC 5389 STUN)")
        }
        let (method, messageClass) = Self.split(UInt16(bytes[0]) << 8 | UInt16(bytes[1]))
        var attributes: [Attribute] = []
        var offset = Self.headerLength
        while offset < bytes.count {
            guard bytes.count - offset >= 4 else { throw DecodingError(description: "an attribute header is cut off") }
            guard attributes.count < Self.maximumAttributes else {
                throw DecodingError(description: "more than \(Self.maximumAttributes) attributes")
            }
            let type = UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
            let valueLength = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            let padded = (valueLength + 3) & ~3
            guard padded <= bytes.count - offset - 4 else {
                throw DecodingError(
                    description: "attribute \(type) declares \(valueLength) bytes past the message's end")
            }
            attributes.append(Attribute(type: type, value: Array(bytes[offset + 4..<offset + 4 + valueLength])))
            offset += 4 + padded
        }
        self.init(
            method: method, messageClass: messageClass, transactionID: Array(bytes[8..<20]), attributes: attributes)
    }

    /// Whether the message's MESSAGE-INTEGRITY verifies under `key` (over the bytes before it, with the length
    /// as it was when it was computed).
    static func verifiesIntegrity(_ bytes: [UInt8], key: [UInt8]) -> Bool {
        var offset = headerLength
        while offset + 4 <= bytes.count {
            let type = UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
            let valueLength = Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            if type == AttributeType.messageIntegrity {
                guard valueLength == 20, offset + 24 <= bytes.count else { return false }
                var covered = Array(bytes[0..<offset])
                setLength(offset - headerLength + 24, in: &covered)
                let mac = STUNCrypto.hmacSHA1(key: key, message: covered)
                return HMACSHA256.constantTimeEqual(mac, Array(bytes[offset + 4..<offset + 24]))
            }
            offset += 4 + ((valueLength + 3) & ~3)
        }
        return false
    }

    // MARK: Attributes

    func attribute(_ type: UInt16) -> [UInt8]? { attributes.first { $0.type == type }?.value }

    /// ERROR-CODE: the number (300-699) and the reason phrase.
    var errorCode: (code: Int, reason: String)? {
        guard let value = attribute(AttributeType.errorCode), value.count >= 4 else { return nil }
        let code = Int(value[2] & 0x07) * 100 + Int(value[3])
        // Some relays count the reason phrase's padding in its length: trailing NULs are not part of it.
        let phrase = value[4...].prefix(256)
        let reason = String(
            decoding: phrase[..<(phrase.lastIndex { $0 != 0 }.map { $0 + 1 } ?? phrase.startIndex)], as: UTF8.self)
        return (code, Self.printable(reason))
    }

    /// A text attribute (REALM, NONCE, SOFTWARE), at most 763 bytes as RFC 8489 allows.
    func text(_ type: UInt16) -> String? {
        guard let value = attribute(type), value.count <= 763 else { return nil }
        return String(decoding: value, as: UTF8.self)
    }

    /// A 32-bit attribute (LIFETIME, CONNECTION-ID).
    func number(_ type: UInt16) -> UInt32? {
        guard let value = attribute(type), value.count == 4 else { return nil }
        return Self.read32(value, 0)
    }

    /// An XOR-…-ADDRESS attribute.
    func address(_ type: UInt16) -> SocketAddress? {
        guard let value = attribute(type) else { return nil }
        return Self.decodeXORAddress(value, transactionID: transactionID)
    }

    static func decodeXORAddress(_ value: [UInt8], transactionID: [UInt8]) -> SocketAddress? {
        guard value.count >= 4 else { return nil }
        let port = (UInt16(value[2]) << 8 | UInt16(value[3])) ^ UInt16(magicCookie >> 16)
        let mask = bytes32(magicCookie) + transactionID
        switch value[1] {
        case 0x01 where value.count == 8:
            let a = (0..<4).map { value[4 + $0] ^ mask[$0] }
            return SocketAddress(.v4(IPv4Address(a[0], a[1], a[2], a[3])), port: port)
        case 0x02 where value.count == 20:
            guard let address = IPv6Address(bytes: (0..<16).map { value[4 + $0] ^ mask[$0] }) else { return nil }
            return SocketAddress(.v6(address), port: port)
        default:
            return nil
        }
    }

    static func xorAddress(_ type: UInt16, _ address: SocketAddress, transactionID: [UInt8]) -> Attribute {
        var value: [UInt8] = [0]
        let mask = bytes32(magicCookie) + transactionID
        let port = address.port ^ UInt16(magicCookie >> 16)
        switch address.address {
        case .v4(let v4):
            value += [0x01, UInt8(port >> 8), UInt8(port & 0xff)]
            value += zip(v4.byteArray, mask).map { $0 ^ $1 }
        case .v6(let v6):
            value += [0x02, UInt8(port >> 8), UInt8(port & 0xff)]
            value += zip(v6.byteArray, mask).map { $0 ^ $1 }
        }
        return Attribute(type: type, value: value)
    }

    static func numberAttribute(_ type: UInt16, _ value: UInt32) -> Attribute {
        Attribute(type: type, value: bytes32(value))
    }

    static func textAttribute(_ type: UInt16, _ text: String) -> Attribute {
        Attribute(type: type, value: Array(text.utf8))
    }

    /// Control characters escaped, so a relay's reason phrase cannot forge lines in a log.
    static func printable(_ text: String) -> String { text.escapingControlCharacters }

    // MARK: Bytes

    private static func append(_ attribute: Attribute, to bytes: inout [UInt8]) {
        append16(attribute.type, to: &bytes)
        append16(UInt16(attribute.value.count), to: &bytes)
        bytes += attribute.value
        bytes += [UInt8](repeating: 0, count: (4 - attribute.value.count % 4) % 4)
    }

    private static func setLength(_ length: Int, in bytes: inout [UInt8]) {
        bytes[2] = UInt8(length >> 8)
        bytes[3] = UInt8(length & 0xff)
    }

    static func append16(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xff))
    }

    static func append32(_ value: UInt32, to bytes: inout [UInt8]) { bytes += bytes32(value) }

    static func bytes32(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8((value >> 16) & 0xff), UInt8((value >> 8) & 0xff), UInt8(value & 0xff)]
    }

    static func read32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8
            | UInt32(bytes[offset + 3])
    }
}
