/// One attribute of a DNS-SD TXT record (RFC 6763 section 6.4).
public struct TXTEntry: Hashable, Sendable {
    /// The key; printable US-ASCII without `=`, compared case-insensitively.
    public var key: String
    /// The value bytes; `nil` for a boolean attribute written as just `key` with no `=`. An empty array is
    /// `key=`, an attribute with an empty value, which RFC 6763 section 6.4 distinguishes from `nil`.
    public var value: [UInt8]?

    /// Creates an entry with raw value bytes, or `nil` for a boolean attribute.
    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }

    /// Creates an entry whose value is UTF-8 text.
    public init(key: String, value: String) {
        self.init(key: key, value: Array(value.utf8))
    }

    /// The wire string: `key`, or `key=value`.
    public var encoded: [UInt8] {
        guard let value else { return Array(key.utf8) }
        return Array(key.utf8) + [UInt8(ascii: "=")] + value
    }
}
