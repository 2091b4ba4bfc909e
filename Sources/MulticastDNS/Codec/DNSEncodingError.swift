/// Why a DNS message could not be encoded.
public enum DNSEncodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The message (or, when splitting, the first packet with all questions) exceeds the size limit.
    case messageTooLarge(size: Int, limit: Int)
    /// One record alone does not fit in a packet of the requested size.
    case recordTooLarge(name: DNSName, type: DNSRecordType, size: Int, limit: Int)
    /// The message holds more questions and records than ``DNSLimits/maximumRecordCount``.
    case tooManyRecords(count: Int, limit: Int)
    /// A record's data is longer than the 65535 bytes RDLENGTH can express.
    case rdataTooLong(type: DNSRecordType, bytes: Int)
    /// A TXT character string is longer than 255 bytes (RFC 1035 section 3.3).
    case txtStringTooLong(bytes: Int)
    /// The packet size requested for splitting is smaller than a header or larger than the limit.
    case invalidMaximumSize(Int)

    /// What went wrong and which rule it breaks, for logs and error messages.
    public var description: String {
        switch self {
        case .messageTooLarge(let size, let limit):
            "DNS message would be \(size) bytes; at most \(limit) are allowed"
        case .recordTooLarge(let name, let type, let size, let limit):
            "\(type) record for \(name) alone needs \(size) bytes; packets hold at most \(limit)"
        case .tooManyRecords(let count, let limit):
            "DNS message holds \(count) questions and records; at most \(limit) are allowed"
        case .rdataTooLong(let type, let bytes):
            "\(type) record data is \(bytes) bytes; RDLENGTH allows at most 65535"
        case .txtStringTooLong(let bytes):
            "TXT string is \(bytes) bytes; at most 255 are allowed (RFC 1035 section 3.3)"
        case .invalidMaximumSize(let size):
            "packet size \(size) is not between the 12-byte header and the message size limit"
        }
    }
}
