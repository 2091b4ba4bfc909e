public import MulticastDNS

/// Why a peer advertisement could not be built or read: an application key in the library's reserved
/// namespace, a TXT record that breaks RFC 6763's rules, or a received record whose reserved keys are
/// missing or malformed.
///
/// `code` says which kind of failure it was, for code to switch on; `reason` explains it to a person; `file`
/// and `line` say where in this library the error was raised.
public struct PeerAdvertisementError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Hashable, Sendable {
        /// An application discovery-info key starts with ``PeerAdvertisement/reservedPrefix`` (compared
        /// case-insensitively, as TXT keys are).
        case reservedKey(String)
        /// The TXT record would break a DNS-SD rule: an invalid or duplicate key, an entry over 255 bytes, or
        /// a record over ``TXTRecord/maximumEncodedSize`` bytes with the reserved keys included.
        case invalidTXTRecord(ServiceValidationError)
        /// A received TXT record lacks one of the reserved keys.
        case missingKey(String)
        /// A reserved key's value is not what this library writes there (or, when building an
        /// advertisement, the display name breaks ``DisplayName``'s rules).
        case malformedValue(key: String)
    }

    /// The kind of failure.
    public let code: Code
    /// A sentence explaining what failed and why, for people.
    public let reason: String
    /// The source file in this library that raised the error.
    public let file: String
    /// The line in `file` that raised the error.
    public let line: Int

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: A sentence explaining it.
    ///   - file: The source file raising the error.
    ///   - line: The line raising the error.
    public init(code: Code, reason: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    /// The reason, followed by where the error was raised.
    public var description: String {
        "PeerAdvertisementError.\(code): \(reason) (\(file):\(line))"
    }
}
