/// The attributes of a DNS-SD service: the strings of its TXT record (RFC 6763 section 6).
///
/// Records built from keys and values are validated; records decoded from the network are read leniently
/// and never throw, as RFC 6763 sections 6.4 and 6.5 ask of receivers.
public struct TXTRecord: Hashable, Sendable {
    /// The attributes in wire order; keys are unique, compared case-insensitively.
    public private(set) var entries: [TXTEntry]

    /// The largest encoded record accepted, in bytes.
    ///
    /// 1300: RFC 6763 section 6.2 says TXT records above 1300 bytes are not recommended, because with the
    /// PTR, SRV and address records and headers the whole answer must still fit one 1500-byte Ethernet
    /// packet, which a multicast response cannot split per record set without loss.
    public static let maximumEncodedSize = 1300

    /// The longest `key=value` string, the capacity of a DNS character string.
    public static let maximumEntrySize = 255

    /// Creates an empty record (sent as one empty string, RFC 6763 section 6.1).
    public init() {
        entries = []
    }

    /// Creates a record from text keys and values, in the given order.
    /// - Parameter pairs: Keys and UTF-8 values; an empty value is written `key=`.
    /// - Throws: ``ServiceValidationError`` for an invalid or duplicate key or an entry or record too long.
    public init(_ pairs: KeyValuePairs<String, String>) throws(ServiceValidationError) {
        try self.init(entries: pairs.map { TXTEntry(key: $0.key, value: $0.value) })
    }

    /// Creates a record from a dictionary, entries sorted by key so the encoding is deterministic.
    /// - Parameter dictionary: Keys and UTF-8 values.
    /// - Throws: ``ServiceValidationError`` as ``init(entries:)`` does.
    public init(_ dictionary: [String: String]) throws(ServiceValidationError) {
        try self.init(entries: dictionary.sorted { $0.key < $1.key }.map { TXTEntry(key: $0.key, value: $0.value) })
    }

    /// Creates a record from entries, in the given order.
    /// - Parameter entries: The attributes.
    /// - Throws: ``ServiceValidationError`` for an empty key, a key with `=` or a character outside printable
    ///   US-ASCII, a duplicate key (case-insensitive), an entry over 255 bytes, or a record over
    ///   ``maximumEncodedSize``.
    public init(entries: [TXTEntry]) throws(ServiceValidationError) {
        var seen = Set<String>()
        var total = 0
        for entry in entries {
            try Self.validateKey(entry.key)
            let size = entry.encoded.count
            guard size <= Self.maximumEntrySize else { throw .txtEntryTooLong(key: entry.key, bytes: size) }
            guard seen.insert(Self.foldedKey(entry.key)).inserted else { throw .txtDuplicateKey(entry.key) }
            total += 1 + size
        }
        guard total <= Self.maximumEncodedSize else {
            throw .txtRecordTooLong(bytes: total, limit: Self.maximumEncodedSize)
        }
        self.entries = entries
    }

    /// Reads received TXT strings leniently (RFC 6763 sections 6.4 and 6.5): empty strings and strings
    /// starting with `=` are skipped, keys are compared case-insensitively and the first occurrence of a key
    /// wins. Key bytes that are not valid UTF-8 are replaced, never rejected.
    /// - Parameter strings: The character strings of a TXT record.
    public init(decoding strings: [[UInt8]]) {
        var seen = Set<String>()
        var entries: [TXTEntry] = []
        for string in strings {
            guard let first = string.first, first != UInt8(ascii: "=") else { continue }
            let entry: TXTEntry
            if let equals = string.firstIndex(of: UInt8(ascii: "=")) {
                entry = TXTEntry(
                    key: String(decoding: string[..<equals], as: UTF8.self), value: Array(string[(equals + 1)...]))
            } else {
                entry = TXTEntry(key: String(decoding: string, as: UTF8.self), value: nil)
            }
            guard seen.insert(Self.foldedKey(entry.key)).inserted else { continue }
            entries.append(entry)
        }
        self.entries = entries
    }

    /// The entry for `key`, compared case-insensitively.
    /// - Parameter key: The key to look up.
    /// - Returns: The entry, or `nil` if the key is absent.
    public func entry(forKey key: String) -> TXTEntry? {
        let folded = Self.foldedKey(key)
        return entries.first { Self.foldedKey($0.key) == folded }
    }

    /// The value for `key` (case-insensitive) as UTF-8 text, invalid bytes replaced; `""` for a boolean
    /// attribute, `nil` if the key is absent. Use ``entry(forKey:)`` to tell `key` from `key=`.
    public subscript(key: String) -> String? {
        guard let entry = entry(forKey: key) else { return nil }
        return String(decoding: entry.value ?? [], as: UTF8.self)
    }

    /// All attributes as text, keys as written; boolean attributes map to `""`.
    public var dictionary: [String: String] {
        var result: [String: String] = [:]
        for entry in entries { result[entry.key] = String(decoding: entry.value ?? [], as: UTF8.self) }
        return result
    }

    /// The wire strings, one per entry; an empty record gives `[]` (the encoder writes one zero byte for it).
    public var strings: [[UInt8]] { entries.map(\.encoded) }

    /// RFC 6763 section 6.4: at least one character, printable US-ASCII, no `=`.
    static func validateKey(_ key: String) throws(ServiceValidationError) {
        guard !key.isEmpty else { throw .txtKeyEmpty }
        for character in key {
            if character == "=" { throw .txtKeyContainsEquals(key) }
            guard let ascii = character.asciiValue, (0x20...0x7E).contains(ascii) else {
                throw .txtKeyInvalidCharacter(key: key, character)
            }
        }
    }

    /// The key with ASCII letters lowercased, for case-insensitive comparison.
    static func foldedKey(_ key: String) -> String {
        String(decoding: key.utf8.map(DNSName.asciiLower), as: UTF8.self)
    }
}
