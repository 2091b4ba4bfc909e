/// A DNS-SD naming rule that a service type, TXT record or instance name breaks. Each description names the
/// rule and where it comes from.
public enum ServiceValidationError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The service type has no name.
    case serviceTypeEmpty
    /// The service name is longer than 15 characters.
    case serviceTypeTooLong(String, length: Int)
    /// The service name contains a character other than an ASCII letter, digit or hyphen.
    case serviceTypeInvalidCharacter(String, Character)
    /// The service name has no letter.
    case serviceTypeNoLetter(String)
    /// The service name starts or ends with a hyphen, or has two hyphens in a row.
    case serviceTypeHyphenPlacement(String)
    /// The text is not `name`, `_name._tcp`, `_name._udp` or one of those followed by `.local`.
    case serviceTypeMalformed(String, reason: String)
    /// A TXT key is empty.
    case txtKeyEmpty
    /// A TXT key contains a character outside printable US-ASCII (0x20 to 0x7E).
    case txtKeyInvalidCharacter(key: String, Character)
    /// A TXT key contains `=`.
    case txtKeyContainsEquals(String)
    /// A TXT entry (`key=value`) is longer than 255 bytes.
    case txtEntryTooLong(key: String, bytes: Int)
    /// Two TXT entries have the same key, compared case-insensitively.
    case txtDuplicateKey(String)
    /// The encoded TXT record is longer than ``TXTRecord/maximumEncodedSize``.
    case txtRecordTooLong(bytes: Int, limit: Int)
    /// The instance name is empty.
    case instanceNameEmpty
    /// The instance name is longer than 63 bytes of UTF-8.
    case instanceNameTooLong(String, bytes: Int)
    /// The instance name is not acceptable text; `reason` says why.
    case instanceNameInvalid(String, reason: String)

    /// What went wrong and which rule it breaks, for logs and error messages.
    public var description: String {
        switch self {
        case .serviceTypeEmpty:
            "service type is empty; RFC 6335 section 5.1 requires 1 to 15 characters"
        case .serviceTypeTooLong(let name, let length):
            "service type \"\(name)\" is \(length) characters; RFC 6335 section 5.1 allows at most 15"
        case .serviceTypeInvalidCharacter(let name, let character):
            "service type \"\(name)\": character \"\(character)\" is not allowed; RFC 6335 section 5.1 allows only "
                + "ASCII letters, digits and hyphens"
        case .serviceTypeNoLetter(let name):
            "service type \"\(name)\" has no letter; RFC 6335 section 5.1 requires at least one"
        case .serviceTypeHyphenPlacement(let name):
            "service type \"\(name)\" starts or ends with a hyphen or has two in a row; RFC 6335 section 5.1 "
                + "forbids leading, trailing and adjacent hyphens"
        case .serviceTypeMalformed(let text, let reason):
            "service type \"\(text)\" is malformed: \(reason); expected \"name\", \"_name._tcp\" or "
                + "\"_name._tcp.local.\" (RFC 6763 section 7)"
        case .txtKeyEmpty:
            "TXT key is empty; RFC 6763 section 6.4 requires at least one character"
        case .txtKeyInvalidCharacter(let key, let character):
            "TXT key \"\(key)\": character \"\(character)\" is not allowed; RFC 6763 section 6.4 allows only "
                + "printable US-ASCII (0x20 to 0x7E)"
        case .txtKeyContainsEquals(let key):
            "TXT key \"\(key)\" contains \"=\"; RFC 6763 section 6.4 forbids it because \"=\" ends the key"
        case .txtEntryTooLong(let key, let bytes):
            "TXT entry \"\(key)\" is \(bytes) bytes; a DNS character string holds at most 255 (RFC 6763 section 6.1)"
        case .txtDuplicateKey(let key):
            "TXT key \"\(key)\" appears more than once; RFC 6763 section 6.4 makes keys case-insensitive and unique"
        case .txtRecordTooLong(let bytes, let limit):
            "TXT record is \(bytes) bytes; at most \(limit) are allowed so the service's records fit one packet "
                + "(RFC 6763 section 6.2)"
        case .instanceNameEmpty:
            "instance name is empty; RFC 6763 section 4.1.1 requires at least one character"
        case .instanceNameTooLong(let name, let bytes):
            "instance name \"\(name)\" is \(bytes) bytes of UTF-8; a DNS label holds at most 63 "
                + "(RFC 6763 section 4.1.1)"
        case .instanceNameInvalid(let name, let reason):
            "instance name \"\(name)\" is invalid: \(reason)"
        }
    }
}
