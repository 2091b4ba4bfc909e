/// A domain name: a sequence of labels such as `["My Peer", "_chat", "_tcp", "local"]`.
///
/// Labels hold UTF-8 text (RFC 6762 section 16) and may contain any character, dots included; the
/// text form escapes `.` and `\` with a backslash. Names compare and hash case-insensitively for ASCII
/// letters only, as RFC 6762 section 16 requires, and keep their case for display.
public struct DNSName: Hashable, Sendable, CustomStringConvertible {
    /// The labels, most specific first, without the empty root label.
    public let labels: [String]

    /// The longest label in bytes (RFC 1035 section 2.3.4).
    public static let maximumLabelLength = 63
    /// The longest name in bytes in wire form, length bytes and the root byte included (RFC 1035 section 2.3.4).
    public static let maximumWireLength = 255

    /// The root name.
    public static let root = DNSName(uncheckedLabels: [])

    /// Creates a name from labels.
    /// - Throws: ``DNSNameError`` if a label is empty or longer than 63 bytes, or the name is longer than
    ///   255 bytes in wire form.
    public init(labels: [String]) throws(DNSNameError) {
        var wire = 1
        for label in labels {
            let count = label.utf8.count
            if count == 0 { throw .emptyLabel }
            if count > DNSName.maximumLabelLength { throw .labelTooLong(label: label, bytes: count) }
            wire += 1 + count
        }
        if wire > DNSName.maximumWireLength { throw .nameTooLong(bytes: wire) }
        self.labels = labels
    }

    /// Creates a name from labels that the caller has already checked.
    package init(uncheckedLabels: [String]) {
        labels = uncheckedLabels
    }

    /// Parses the text form: labels separated by dots, `\.` and `\\` as escapes, an optional final dot.
    /// - Throws: ``DNSNameError`` as ``init(labels:)`` does, or `.badEscape` for a dangling backslash.
    public init(_ text: String) throws(DNSNameError) {
        var labels: [String] = []
        var current = ""
        var escaping = false
        for character in text {
            if escaping {
                current.append(character)
                escaping = false
            } else if character == "\\" {
                escaping = true
            } else if character == "." {
                labels.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        if escaping { throw .badEscape }
        if !current.isEmpty { labels.append(current) }
        if labels.isEmpty && text != "." && !text.isEmpty { throw .emptyLabel }
        try self.init(labels: labels)
    }

    /// The name in wire form length: one length byte per label plus its bytes, plus the root byte.
    public var wireLength: Int { labels.reduce(1) { $0 + 1 + $1.utf8.count } }

    /// The name in wire form, uncompressed: each label's length and bytes, then the root byte.
    package var wire: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(wireLength)
        for label in labels {
            bytes.append(UInt8(truncatingIfNeeded: label.utf8.count))
            bytes.append(contentsOf: label.utf8)
        }
        bytes.append(0)
        return bytes
    }

    /// The canonical wire form (RFC 4034 section 6.2): uncompressed, ASCII letters lowercased. Transaction
    /// signatures (RFC 8945) cover key and algorithm names in this form.
    package var canonicalWire: [UInt8] { wire.map(DNSName.asciiLower) }

    /// A new name with `label` prepended.
    /// - Throws: ``DNSNameError`` if the result breaks a length limit.
    public func prepending(_ label: String) throws(DNSNameError) -> DNSName {
        try DNSName(labels: [label] + labels)
    }

    /// The name without its first label; the root stays the root.
    public var parent: DNSName { DNSName(uncheckedLabels: Array(labels.dropFirst())) }

    /// `true` if the name ends with `suffix` (compared case-insensitively).
    public func hasSuffix(_ suffix: DNSName) -> Bool {
        guard suffix.labels.count <= labels.count else { return false }
        return zip(labels.suffix(suffix.labels.count), suffix.labels).allSatisfy {
            DNSName.labelsEqual($0, $1)
        }
    }

    /// The text form with a trailing dot, escaping `.` and `\` inside labels.
    public var description: String {
        if labels.isEmpty { return "." }
        return labels.map { label in
            var out = ""
            for character in label {
                if character == "." || character == "\\" { out.append("\\") }
                out.append(character)
            }
            return out
        }.joined(separator: ".") + "."
    }

    /// Compares two labels byte by byte, folding ASCII letters to lowercase only.
    static func labelsEqual(_ a: String, _ b: String) -> Bool {
        let x = a.utf8
        let y = b.utf8
        guard x.count == y.count else { return false }
        return zip(x, y).allSatisfy { asciiLower($0) == asciiLower($1) }
    }

    @inline(__always) static func asciiLower(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5a) ? byte | 0x20 : byte
    }

    public static func == (a: DNSName, b: DNSName) -> Bool {
        a.labels.count == b.labels.count && zip(a.labels, b.labels).allSatisfy { labelsEqual($0, $1) }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(labels.count)
        for label in labels {
            for byte in label.utf8 { hasher.combine(DNSName.asciiLower(byte)) }
            hasher.combine(0xff as UInt8)
        }
    }
}

/// Why a domain name is not valid.
public enum DNSNameError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A label was empty (two dots in a row, or a leading dot).
    case emptyLabel
    /// A label was longer than 63 bytes of UTF-8.
    case labelTooLong(label: String, bytes: Int)
    /// The whole name was longer than 255 bytes in wire form.
    case nameTooLong(bytes: Int)
    /// The text ended with a single backslash.
    case badEscape

    public var description: String {
        switch self {
        case .emptyLabel: "DNS name has an empty label"
        case .labelTooLong(let label, let bytes):
            "DNS label \"\(label)\" is \(bytes) bytes; at most \(DNSName.maximumLabelLength) are allowed (RFC 1035 2.3.4)"
        case .nameTooLong(let bytes):
            "DNS name is \(bytes) bytes in wire form; at most \(DNSName.maximumWireLength) are allowed (RFC 1035 2.3.4)"
        case .badEscape: "DNS name ends with a dangling backslash"
        }
    }
}
