public import MulticastDNS
public import MultipeerIO

/// What a peer says about itself in its DNS-SD TXT record: its identity, display name and protocol version,
/// under keys this library reserves, next to the application's own discovery info.
///
/// The reserved keys all start with ``reservedPrefix``, which application keys may not use, so the two never
/// collide. TXT keys are compared case-insensitively (RFC 6763 section 6.4), and so is the prefix:
///
/// | key       | value                                                        |
/// |-----------|--------------------------------------------------------------|
/// | `mp.id`   | the identity's ``PeerFingerprint`` in its readable form       |
/// | `mp.name` | the display name, UTF-8, at most 63 bytes                    |
/// | `mp.v`    | the protocol version, `MAJOR.MINOR` in decimal, such as `1.0` |
/// | `mp.relay` | optional: the peer's relayed address on a TURN relay, `IP:PORT` (`[IPv6]:PORT`) |
///
/// The keys are short because RFC 6763 section 6.4 asks for keys of at most nine characters and a record
/// of a few hundred bytes: the reserved entries take at most ``maximumReservedSize`` bytes, leaving the
/// rest of ``TXTRecord/maximumEncodedSize`` to the application. A received record may carry reserved keys
/// this version does not know (a newer peer's); they are ignored, and never passed on as discovery info.
public struct PeerAdvertisement: Hashable, Sendable {
    /// The prefix of every key this library reserves; application keys must not start with it, in any case.
    public static let reservedPrefix = "mp."
    /// The key of the identity's fingerprint.
    public static let fingerprintKey = "mp.id"
    /// The key of the display name.
    public static let displayNameKey = "mp.name"
    /// The key of the protocol version.
    public static let versionKey = "mp.v"
    /// The key of the relayed address.
    public static let relayKey = "mp.relay"
    /// The most bytes the reserved entries take in an encoded TXT record (each with its length byte): a
    /// 64-character fingerprint, a 63-byte display name, a version as long as `255.255`, and a relayed address as
    /// long as `[ffff:...:ffff]:65535` (47 characters).
    public static let maximumReservedSize =
        (1 + fingerprintKey.utf8.count + 1 + 64) + (1 + displayNameKey.utf8.count + 1 + DisplayName.maximumByteCount)
        + (1 + versionKey.utf8.count + 1 + 7) + (1 + relayKey.utf8.count + 1 + 47)

    /// A protocol version as advertised: peers with the same major version can connect.
    public struct ProtocolVersion: Hashable, Sendable, CustomStringConvertible {
        /// Incompatible revisions of the wire protocol.
        public var major: UInt8
        /// Additions a peer of the same major version may ignore.
        public var minor: UInt8

        /// Creates a version.
        /// - Parameters:
        ///   - major: The major version.
        ///   - minor: The minor version.
        public init(major: UInt8, minor: UInt8) {
            self.major = major
            self.minor = minor
        }

        /// The version this library speaks.
        public static let current = ProtocolVersion(
            major: Frame.protocolMajorVersion, minor: Frame.protocolMinorVersion)

        /// Parses `MAJOR.MINOR`: two decimal numbers of at most three digits, each at most 255.
        init?(_ text: String) {
            let parts = text.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 2,
                parts.allSatisfy({ (1...3).contains($0.count) && $0.allSatisfy { $0.isASCII && $0.isNumber } }),
                let major = UInt8(parts[0]), let minor = UInt8(parts[1])
            else { return nil }
            self.init(major: major, minor: minor)
        }

        /// `MAJOR.MINOR`, such as `1.0`.
        public var description: String { "\(major).\(minor)" }
    }

    /// The peer's identity.
    public let fingerprint: PeerFingerprint
    /// The peer's display name.
    public let displayName: String
    /// The protocol version the peer speaks.
    public let protocolVersion: ProtocolVersion
    /// Where the peer can be reached through a TURN relay, after its direct addresses; nil when it has no relay (a
    /// malformed value in a received record reads as none).
    public let relayedAddress: SocketAddress?
    /// The application's keys and values, without the reserved ones. A received attribute without a value
    /// (a bare `key`) reads as `""`; values that are not UTF-8 have the invalid bytes replaced.
    public let discoveryInfo: [String: String]
    /// The TXT record to advertise, or the one that was received: the reserved entries first, then the
    /// application's sorted by key.
    public let txtRecord: TXTRecord

    /// An advertisement for this side, checked against the rules so it can be published as it is.
    /// - Parameters:
    ///   - fingerprint: The identity to advertise.
    ///   - displayName: The display name to advertise.
    ///   - protocolVersion: The protocol version; this library's own by default.
    ///   - discoveryInfo: The application's keys and values.
    /// - Throws: ``PeerAdvertisementError`` for an application key in the reserved namespace, a display name
    ///   that breaks ``DisplayName``'s rules, or a record that breaks RFC 6763's limits.
    ///   - relayedAddress: The peer's relayed address on a TURN relay, if it holds one.
    public init(
        fingerprint: PeerFingerprint, displayName: String, protocolVersion: ProtocolVersion = .current,
        discoveryInfo: [String: String] = [:], relayedAddress: SocketAddress? = nil
    ) throws(PeerAdvertisementError) {
        do {
            try DisplayName.validate(displayName)
        } catch {
            throw PeerAdvertisementError(
                code: .malformedValue(key: Self.displayNameKey),
                reason: "the display name cannot be advertised: \(error.reason)")
        }
        var entries = [
            TXTEntry(key: Self.fingerprintKey, value: fingerprint.description),
            TXTEntry(key: Self.displayNameKey, value: displayName),
            TXTEntry(key: Self.versionKey, value: protocolVersion.description),
        ]
        if let relayedAddress { entries.append(TXTEntry(key: Self.relayKey, value: Self.text(relayedAddress))) }
        for (key, value) in discoveryInfo.sorted(by: { $0.key < $1.key }) {
            guard !Self.isReserved(key) else {
                throw PeerAdvertisementError(
                    code: .reservedKey(key),
                    reason: "the discovery-info key '\(key)' starts with '\(Self.reservedPrefix)', which this "
                        + "library reserves for its own keys (identity, display name, protocol version) in any "
                        + "letter case; choose a key that does not")
            }
            entries.append(TXTEntry(key: key, value: value))
        }
        do {
            txtRecord = try TXTRecord(entries: entries)
        } catch {
            throw PeerAdvertisementError(
                code: .invalidTXTRecord(error), reason: "the advertisement breaks a DNS-SD TXT rule: \(error)")
        }
        self.fingerprint = fingerprint
        self.displayName = displayName
        self.protocolVersion = protocolVersion
        self.discoveryInfo = discoveryInfo
        self.relayedAddress = relayedAddress
    }

    /// An advertisement for an identity: its fingerprint and display name.
    /// - Parameters:
    ///   - identity: This side's identity.
    ///   - discoveryInfo: The application's keys and values.
    /// - Throws: ``PeerAdvertisementError`` as ``init(fingerprint:displayName:protocolVersion:discoveryInfo:)``.
    public init(identity: PeerIdentity, discoveryInfo: [String: String] = [:]) throws(PeerAdvertisementError) {
        try self.init(
            fingerprint: identity.fingerprint, displayName: identity.displayName, discoveryInfo: discoveryInfo)
    }

    /// Reads a received TXT record (such as `DiscoveredService.txt`, or `TXTRecord(decoding:)` of a
    /// `DiscoveredInstance`'s strings).
    /// - Parameter txt: The record.
    /// - Throws: ``PeerAdvertisementError`` naming the first reserved key that is missing
    ///   (``PeerAdvertisementError/Code/missingKey(_:)``) or does not hold what this library writes there
    ///   (``PeerAdvertisementError/Code/malformedValue(key:)``), in the order identity, display name, version.
    public init(parsing txt: TXTRecord) throws(PeerAdvertisementError) {
        let fingerprintText = try Self.value(of: Self.fingerprintKey, in: txt)
        guard let fingerprint = PeerFingerprint(fingerprintText) else {
            throw PeerAdvertisementError(
                code: .malformedValue(key: Self.fingerprintKey),
                reason: "'\(Self.fingerprintKey)' holds '\(Self.printable(fingerprintText))', not a fingerprint "
                    + "(13 groups of 4 lowercase base32 characters separated by '-')")
        }
        let displayName = try Self.value(of: Self.displayNameKey, in: txt)
        do {
            try DisplayName.validate(displayName)
        } catch {
            throw PeerAdvertisementError(
                code: .malformedValue(key: Self.displayNameKey),
                reason: "'\(Self.displayNameKey)' is not a valid display name: \(error.reason)")
        }
        let versionText = try Self.value(of: Self.versionKey, in: txt)
        guard let version = ProtocolVersion(versionText) else {
            throw PeerAdvertisementError(
                code: .malformedValue(key: Self.versionKey),
                reason: "'\(Self.versionKey)' holds '\(Self.printable(versionText))', not a version such as "
                    + "'\(ProtocolVersion.current)' (MAJOR.MINOR, each 0 to 255)")
        }
        var info: [String: String] = [:]
        for entry in txt.entries where !Self.isReserved(entry.key) {
            info[entry.key] = String(decoding: entry.value ?? [], as: UTF8.self)
        }
        self.fingerprint = fingerprint
        self.displayName = displayName
        protocolVersion = version
        discoveryInfo = info
        relayedAddress = txt.entry(forKey: Self.relayKey)?.value.flatMap {
            Self.relayedAddress(String(decoding: $0, as: UTF8.self))
        }
        txtRecord = txt
    }

    /// `IP:PORT`, or `[IPv6]:PORT`.
    static func text(_ address: SocketAddress) -> String {
        switch address.address {
        case .v4(let v4): "\(v4):\(address.port)"
        case .v6(let v6): "[\(v6)]:\(address.port)"
        }
    }

    /// Parses `IP:PORT` or `[IPv6]:PORT` (a port of 1 to 65535); nil for anything else.
    static func relayedAddress(_ text: String) -> SocketAddress? {
        guard text.utf8.count <= 47, let colon = text.lastIndex(of: ":"),
            let port = UInt16(text[text.index(after: colon)...]), port != 0
        else { return nil }
        var host = text[..<colon]
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = host.dropFirst().dropLast()
            guard let v6 = IPv6Address(String(host)) else { return nil }
            return SocketAddress(.v6(v6), port: port)
        }
        guard let v4 = IPv4Address(String(host)) else { return nil }
        return SocketAddress(.v4(v4), port: port)
    }

    /// Whether `key` is in the reserved namespace: it starts with ``reservedPrefix``, ignoring ASCII case.
    /// - Parameter key: A TXT key.
    /// - Returns: true if an application may not use it.
    public static func isReserved(_ key: String) -> Bool {
        key.utf8.count >= reservedPrefix.utf8.count
            && zip(key.utf8, reservedPrefix.utf8).allSatisfy { key, prefix in
                // ASCII letters folded to lowercase: RFC 6763 section 6.4 compares keys case-insensitively.
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(key) ? key | 0x20 == prefix : key == prefix
            }
    }

    /// A reserved key's value as text; a missing key or a bare key without `=` is an error.
    private static func value(of key: String, in txt: TXTRecord) throws(PeerAdvertisementError) -> String {
        guard let entry = txt.entry(forKey: key) else {
            throw PeerAdvertisementError(
                code: .missingKey(key),
                reason: "the TXT record has no '\(key)' key, so it is not a swift-multipeer peer's advertisement "
                    + "(it needs '\(fingerprintKey)', '\(displayNameKey)' and '\(versionKey)')")
        }
        guard let value = entry.value else {
            throw PeerAdvertisementError(
                code: .malformedValue(key: key), reason: "'\(entry.key)' has no value (no '=' after the key)")
        }
        return String(decoding: value, as: UTF8.self)
    }

    /// A received value for an error message: control characters escaped, so a hostile advertisement cannot
    /// forge lines in a log.
    private static func printable(_ text: String) -> String { text.escapingControlCharacters }
}
