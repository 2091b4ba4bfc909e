/// An IPv4 address as four bytes in network order.
public struct IPv4Address: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The address bytes in network order.
    public var bytes: (UInt8, UInt8, UInt8, UInt8)

    /// Creates an address from its four bytes in network order.
    public init(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) {
        bytes = (a, b, c, d)
    }

    /// Creates an address from exactly four bytes; returns `nil` for any other count.
    public init?<C: Collection>(bytes collection: C) where C.Element == UInt8 {
        guard collection.count == 4 else { return nil }
        let b = Array(collection)
        bytes = (b[0], b[1], b[2], b[3])
    }

    /// Parses dotted-quad notation such as `"192.0.2.1"`; returns `nil` if it is not exactly that.
    public init?(_ string: String) {
        let parts = string.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var out: [UInt8] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }),
                let value = UInt8(part)
            else { return nil }
            out.append(value)
        }
        bytes = (out[0], out[1], out[2], out[3])
    }

    /// The address bytes as an array, network order.
    public var byteArray: [UInt8] { [bytes.0, bytes.1, bytes.2, bytes.3] }

    /// The address as a 32-bit integer in host order.
    public var value: UInt32 {
        UInt32(bytes.0) << 24 | UInt32(bytes.1) << 16 | UInt32(bytes.2) << 8 | UInt32(bytes.3)
    }

    /// Creates an address from a 32-bit integer in host order.
    public init(value: UInt32) {
        self.init(UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff))
    }

    /// `true` for 127.0.0.0/8.
    public var isLoopback: Bool { bytes.0 == 127 }
    /// `true` for 169.254.0.0/16.
    public var isLinkLocal: Bool { bytes.0 == 169 && bytes.1 == 254 }
    /// `true` for 224.0.0.0/4.
    public var isMulticast: Bool { bytes.0 & 0xf0 == 0xe0 }

    /// The mDNS IPv4 group, 224.0.0.251 (RFC 6762 section 3).
    public static let mdnsGroup = IPv4Address(224, 0, 0, 251)
    /// 0.0.0.0.
    public static let any = IPv4Address(0, 0, 0, 0)
    /// 127.0.0.1.
    public static let loopback = IPv4Address(127, 0, 0, 1)

    /// Dotted-quad text, such as `"192.0.2.1"`.
    public var description: String { "\(bytes.0).\(bytes.1).\(bytes.2).\(bytes.3)" }

    /// Equal when all four bytes are equal.
    public static func == (l: IPv4Address, r: IPv4Address) -> Bool { l.value == r.value }
    /// Numeric order of the 32-bit value.
    public static func < (l: IPv4Address, r: IPv4Address) -> Bool { l.value < r.value }
    /// Hashes the 32-bit value.
    public func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

/// An IPv6 address as sixteen bytes in network order.
public struct IPv6Address: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The address bytes in network order.
    public let byteArray: [UInt8]

    /// Creates an address from exactly sixteen bytes; returns `nil` for any other count.
    public init?<C: Collection>(bytes collection: C) where C.Element == UInt8 {
        guard collection.count == 16 else { return nil }
        byteArray = Array(collection)
    }

    /// Parses RFC 4291 text form (`"fe80::1"`, `"::ffff:192.0.2.1"`); a `%zone` suffix is not accepted here.
    public init?(_ string: String) {
        guard !string.isEmpty, string.count <= 45, !string.contains("%") else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var halves: [String] = []
        if let range = string.firstRange(of: "::") {
            halves = [String(string[..<range.lowerBound]), String(string[range.upperBound...])]
            guard !halves[1].contains("::") else { return nil }
        } else {
            halves = [string]
        }
        func parseGroups(_ text: String, allowV4Tail: Bool) -> [UInt16]? {
            if text.isEmpty { return [] }
            var groups: [UInt16] = []
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            for (i, part) in parts.enumerated() {
                if i == parts.count - 1, allowV4Tail, part.contains("."), let v4 = IPv4Address(String(part)) {
                    groups.append(UInt16(v4.bytes.0) << 8 | UInt16(v4.bytes.1))
                    groups.append(UInt16(v4.bytes.2) << 8 | UInt16(v4.bytes.3))
                    continue
                }
                guard (1...4).contains(part.count), let g = UInt16(part, radix: 16) else { return nil }
                groups.append(g)
            }
            return groups
        }
        if halves.count == 2 {
            guard let h = parseGroups(halves[0], allowV4Tail: false),
                let t = parseGroups(halves[1], allowV4Tail: true), h.count + t.count <= 7
            else { return nil }
            head = h
            tail = t
        } else {
            guard let h = parseGroups(halves[0], allowV4Tail: true), h.count == 8 else { return nil }
            head = h
        }
        let groups = head + Array(repeating: 0, count: 8 - head.count - tail.count) + tail
        byteArray = groups.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }
    }

    /// `true` for ::1.
    public var isLoopback: Bool { byteArray == IPv6Address.loopback.byteArray }
    /// `true` for fe80::/10.
    public var isLinkLocal: Bool { byteArray[0] == 0xfe && byteArray[1] & 0xc0 == 0x80 }
    /// `true` for ff00::/8.
    public var isMulticast: Bool { byteArray[0] == 0xff }

    /// The mDNS IPv6 group, ff02::fb (RFC 6762 section 3).
    public static let mdnsGroup = IPv6Address("ff02::fb")!
    /// ::.
    public static let any = IPv6Address(bytes: [UInt8](repeating: 0, count: 16))!
    /// ::1.
    public static let loopback = IPv6Address("::1")!

    /// RFC 5952 canonical text: lowercase, longest run of two or more zero groups shortened to `::`;
    /// IPv4-mapped addresses in mixed notation (`::ffff:192.0.2.1`, RFC 5952 section 5).
    public var description: String {
        if byteArray[0..<10].allSatisfy({ $0 == 0 }), byteArray[10] == 0xff, byteArray[11] == 0xff {
            return "::ffff:\(byteArray[12]).\(byteArray[13]).\(byteArray[14]).\(byteArray[15])"
        }
        var groups: [UInt16] = []
        for i in stride(from: 0, to: 16, by: 2) { groups.append(UInt16(byteArray[i]) << 8 | UInt16(byteArray[i + 1])) }
        var bestStart = -1
        var bestLength = 0
        var i = 0
        while i < 8 {
            if groups[i] == 0 {
                var j = i
                while j < 8 && groups[j] == 0 { j += 1 }
                if j - i > bestLength && j - i >= 2 {
                    bestStart = i
                    bestLength = j - i
                }
                i = j
            } else {
                i += 1
            }
        }
        func hex(_ range: Range<Int>) -> String {
            groups[range].map { String($0, radix: 16) }.joined(separator: ":")
        }
        if bestStart < 0 { return hex(0..<8) }
        return hex(0..<bestStart) + "::" + hex((bestStart + bestLength)..<8)
    }

    /// Lexicographic order of the sixteen bytes (numeric order).
    public static func < (l: IPv6Address, r: IPv6Address) -> Bool {
        l.byteArray.lexicographicallyPrecedes(r.byteArray)
    }
}

/// An IPv4 or IPv6 address.
public enum IPAddress: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// An IPv4 address.
    case v4(IPv4Address)
    /// An IPv6 address.
    case v6(IPv6Address)

    /// Parses either family's text form.
    public init?(_ string: String) {
        if let v4 = IPv4Address(string) {
            self = .v4(v4)
        } else if let v6 = IPv6Address(string) {
            self = .v6(v6)
        } else {
            return nil
        }
    }

    /// The address's text form (dotted quad or RFC 5952).
    public var description: String {
        switch self {
        case .v4(let a): a.description
        case .v6(let a): a.description
        }
    }

    /// `true` for loopback addresses of either family.
    public var isLoopback: Bool {
        switch self {
        case .v4(let a): a.isLoopback
        case .v6(let a): a.isLoopback
        }
    }

    /// `true` for link-local addresses of either family.
    public var isLinkLocal: Bool {
        switch self {
        case .v4(let a): a.isLinkLocal
        case .v6(let a): a.isLinkLocal
        }
    }

    /// Numeric order within a family; every IPv4 address sorts before every IPv6 address.
    public static func < (l: IPAddress, r: IPAddress) -> Bool {
        switch (l, r) {
        case (.v4(let a), .v4(let b)): a < b
        case (.v6(let a), .v6(let b)): a < b
        case (.v4, .v6): true
        case (.v6, .v4): false
        }
    }
}
