/// A validated DNS-SD service type such as `_chat._tcp` (RFC 6763 section 7, RFC 6335 section 5.1).
///
/// Service names are case-insensitive (RFC 6335 section 5.1): `MKSVC` and `mksvc` are the same service type,
/// equal and with the same hash; the name keeps the case it was written in, and is advertised so.
public struct ServiceType: Hashable, Sendable, CustomStringConvertible {
    /// The service name without underscore, e.g. `chat`, in the case it was written in.
    public let name: String
    /// The transport protocol.
    public let transport: ServiceTransport

    /// The longest service name (RFC 6335 section 5.1).
    public static let maximumNameLength = 15

    /// The DNS-SD service type enumeration name, `_services._dns-sd._udp.local.` (RFC 6763 section 9).
    public static let enumerationName = DNSName(uncheckedLabels: ["_services", "_dns-sd", "_udp", "local"])

    /// Parses and validates a service type.
    ///
    /// Accepts `chat`, `_chat._tcp`, `_chat._tcp.local` and `_chat._tcp.local.`; a transport label in the text
    /// takes precedence over `transport`.
    /// - Parameters:
    ///   - text: The service type.
    ///   - transport: The transport used when `text` names none.
    /// - Throws: ``ServiceValidationError`` naming the rule broken.
    public init(_ text: String, transport: ServiceTransport = .tcp) throws(ServiceValidationError) {
        guard !text.isEmpty else { throw .serviceTypeEmpty }
        var body = Substring(text)
        if body.hasSuffix(".") { body = body.dropLast() }
        let parts = body.split(separator: ".", omittingEmptySubsequences: false)
        var resolvedTransport = transport
        let name: Substring
        if parts.count == 1 && !parts[0].hasPrefix("_") {
            name = parts[0]
        } else {
            guard parts[0].hasPrefix("_") else {
                throw .serviceTypeMalformed(text, reason: "the service label must start with \"_\"")
            }
            name = parts[0].dropFirst()
            guard parts.count <= 3 else {
                throw .serviceTypeMalformed(text, reason: "too many labels")
            }
            if parts.count >= 2 {
                switch parts[1].lowercased() {
                case "_tcp": resolvedTransport = .tcp
                case "_udp": resolvedTransport = .udp
                default: throw .serviceTypeMalformed(text, reason: "\"\(parts[1])\" is not \"_tcp\" or \"_udp\"")
                }
            }
            if parts.count == 3 {
                guard parts[2].lowercased() == "local" else {
                    throw .serviceTypeMalformed(text, reason: "the domain \"\(parts[2])\" is not \"local\"")
                }
            }
        }
        try Self.validateName(String(name))
        self.name = String(name)
        self.transport = resolvedTransport
    }

    /// Reads a service type from its domain name, such as the data of a service enumeration PTR record.
    /// - Parameter domainName: A name of the form `_name._tcp.local.` or `_name._udp.local.`.
    /// - Throws: ``ServiceValidationError`` if the name is not a valid service type in `local.`.
    public init(domainName: DNSName) throws(ServiceValidationError) {
        let labels = domainName.labels
        guard labels.count == 3 else {
            throw .serviceTypeMalformed(domainName.description, reason: "expected three labels")
        }
        for label in labels where label.contains(".") {
            throw .serviceTypeMalformed(domainName.description, reason: "label \"\(label)\" contains a dot")
        }
        try self.init(labels.joined(separator: "."))
    }

    /// The service type's domain name in `local.`, e.g. `_chat._tcp.local.`.
    public var domainName: DNSName { DNSName(uncheckedLabels: ["_" + name, transport.label, "local"]) }

    /// `_name._tcp` or `_name._udp`.
    public var description: String { "_\(name).\(transport.label)" }

    /// Whether two service types are the same, folding ASCII case as DNS names do (no allocation).
    public static func == (a: ServiceType, b: ServiceType) -> Bool {
        a.transport == b.transport && DNSName.labelsEqual(a.name, b.name)
    }

    /// Hashes the name with ASCII case folded, so that equal service types hash alike.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(transport)
        for byte in name.utf8 { hasher.combine(DNSName.asciiLower(byte)) }
    }

    /// Checks RFC 6335 section 5.1: 1 to 15 characters; ASCII letters (either case), digits and hyphens; at least
    /// one letter; no leading, trailing or adjacent hyphens.
    static func validateName(_ name: String) throws(ServiceValidationError) {
        guard !name.isEmpty else { throw .serviceTypeEmpty }
        guard name.count <= maximumNameLength else { throw .serviceTypeTooLong(name, length: name.count) }
        var hasLetter = false
        for character in name {
            // By byte, not by Character: Swift compares characters up to canonical equivalence, so the Kelvin sign
            // (U+212A) would pass as "K" and put three non-ASCII bytes on the wire.
            guard character.utf8.count == 1, let byte = character.utf8.first else {
                throw .serviceTypeInvalidCharacter(name, character)
            }
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): hasLetter = true
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"): break
            default: throw .serviceTypeInvalidCharacter(name, character)
            }
        }
        if name.hasPrefix("-") || name.hasSuffix("-") || name.contains("--") {
            throw .serviceTypeHyphenPlacement(name)
        }
        guard hasLetter else { throw .serviceTypeNoLetter(name) }
    }
}
