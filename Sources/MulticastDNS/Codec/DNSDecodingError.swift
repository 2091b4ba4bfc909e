/// Why a received DNS message was rejected. Offsets count bytes from the start of the message.
public enum DNSDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The message is longer than ``DNSLimits/maximumMessageSize``.
    case messageTooLarge(size: Int, limit: Int)
    /// The message ended early: `needed` more bytes were required at `offset`.
    case truncated(offset: Int, needed: Int)
    /// The header declares more questions and records than ``DNSLimits/maximumRecordCount``.
    case tooManyRecords(count: Int, limit: Int)
    /// The compression pointer at `offset` does not point strictly before the labels already read for
    /// this name (it points to itself, forwards, or back into a name it came from), so it could loop.
    case compressionLoop(offset: Int)
    /// The compression pointer at `offset` points past the end of the message.
    case pointerOutOfRange(offset: Int)
    /// A name followed more than ``DNSLimits/maximumCompressionPointers`` pointers.
    case tooManyPointers
    /// A label was longer than 63 bytes.
    ///
    /// On the wire a length byte above 63 carries label-type bits instead, so the decoder reports such
    /// bytes as ``invalidLabelType(offset:)``; this case exists for callers that check label lengths from
    /// other sources.
    case labelTooLong
    /// A name was longer than 255 bytes in wire form (RFC 1035 section 2.3.4).
    case nameTooLong
    /// The length byte at `offset` has label type 0x40 (extended) or 0x80 (reserved) (RFC 6891 section 4.2).
    case invalidLabelType(offset: Int)
    /// The label at `offset` is not valid UTF-8 (RFC 6762 section 16).
    case invalidUTF8(offset: Int)
    /// The record's RDLENGTH says `declared` bytes but its typed data used `used` bytes.
    case rdataLengthMismatch(type: DNSRecordType, declared: Int, used: Int)
    /// The record's data is malformed for its type.
    case invalidRData(type: DNSRecordType, reason: String)
    /// `count` bytes followed the last record the header declared.
    case trailingBytes(count: Int)

    /// What went wrong and which rule it breaks, for logs and error messages.
    public var description: String {
        switch self {
        case .messageTooLarge(let size, let limit):
            "DNS message is \(size) bytes; at most \(limit) are accepted (RFC 6762 section 17)"
        case .truncated(let offset, let needed):
            "DNS message truncated: \(needed) more byte(s) needed at offset \(offset)"
        case .tooManyRecords(let count, let limit):
            "DNS message declares \(count) questions and records; at most \(limit) are accepted"
        case .compressionLoop(let offset):
            "compression pointer at offset \(offset) does not point strictly backwards (possible loop)"
        case .pointerOutOfRange(let offset):
            "compression pointer at offset \(offset) points past the end of the message"
        case .tooManyPointers:
            "DNS name follows too many compression pointers"
        case .labelTooLong:
            "DNS label longer than \(DNSName.maximumLabelLength) bytes (RFC 1035 section 2.3.4)"
        case .nameTooLong:
            "DNS name longer than \(DNSName.maximumWireLength) bytes in wire form (RFC 1035 section 2.3.4)"
        case .invalidLabelType(let offset):
            "length byte at offset \(offset) uses a label type other than a plain label or a pointer"
        case .invalidUTF8(let offset):
            "DNS label at offset \(offset) is not valid UTF-8 (RFC 6762 section 16)"
        case .rdataLengthMismatch(let type, let declared, let used):
            "\(type) record declares \(declared) bytes of data but its fields use \(used)"
        case .invalidRData(let type, let reason):
            "\(type) record data is invalid: \(reason)"
        case .trailingBytes(let count):
            "\(count) byte(s) follow the last record of the DNS message"
        }
    }
}
