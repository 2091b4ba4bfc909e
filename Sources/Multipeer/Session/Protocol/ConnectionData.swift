internal import MultipeerIO

/// What one peer gives another, out of band, to connect without discovery (Apple's `nearbyConnectionData`):
/// who it is, where its session listens, and a one-time ticket its session issued for that other peer only.
///
/// ```
/// version (1) = 1 | fingerprint (32) | display name (text) | ticket (16) | address count (1, at most 8)
/// | addresses (family 4 or 6, 4 or 16 bytes, port 2)
/// ```
/// Text is a 2-byte length and UTF-8 (at most 512 bytes). The whole is at most 1 KiB, and decoding refuses
/// anything else: it comes from the application, which may have carried it from anyone.
struct ConnectionData: Hashable, Sendable {
    static let version: UInt8 = 1
    static let maximumAddresses = 8
    static let maximumLength = 1_024
    static let ticketLength = 16

    var fingerprint: PeerFingerprint
    var displayName: String
    var ticket: [UInt8]
    var addresses: [SocketAddress]

    var encoded: [UInt8] {
        var w = SessionWire.Writer()
        w.u8(Self.version)
        w.fixed(fingerprint.bytes)
        w.text(displayName)
        w.fixed(ticket)
        let kept = addresses.prefix(Self.maximumAddresses)
        w.u8(UInt8(kept.count))
        for address in kept { w.address(address) }
        return w.bytes
    }

    init(fingerprint: PeerFingerprint, displayName: String, ticket: [UInt8], addresses: [SocketAddress]) {
        self.fingerprint = fingerprint
        self.displayName = displayName
        self.ticket = ticket
        self.addresses = addresses
    }

    init(decoding bytes: [UInt8]) throws(SessionWireError) {
        guard bytes.count <= Self.maximumLength else {
            throw SessionWireError("connection data: \(bytes.count) bytes, more than \(Self.maximumLength)")
        }
        var r = SessionWire.Reader(bytes, what: "connection data")
        let version = try r.u8("version")
        guard version == Self.version else { throw r.error("version \(version); this side reads \(Self.version)") }
        fingerprint = PeerFingerprint(bytes: try r.fixed(PeerFingerprint.byteCount, "fingerprint"))!
        displayName = try r.text("display name")
        do {
            try DisplayName.validate(displayName)
        } catch {
            throw r.error("display name: \(error.reason)")
        }
        ticket = try r.fixed(Self.ticketLength, "ticket")
        let count = Int(try r.u8("address count"))
        guard count <= Self.maximumAddresses else {
            throw r.error("\(count) addresses, more than \(Self.maximumAddresses)")
        }
        addresses = []
        for _ in 0..<count { addresses.append(try r.address()) }
        guard r.isAtEnd else { throw r.error("\(r.remaining) bytes after the last field") }
    }
}
