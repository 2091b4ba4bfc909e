/// The bounds the DNS codec enforces on every message, so hostile input meets a limit and a clear error
/// instead of unbounded memory or time.
public struct DNSLimits: Sendable, Hashable {
    /// The largest message accepted or produced, in bytes.
    ///
    /// 9000 because RFC 6762 section 17 allows mDNS messages up to 9000 bytes (the jumbo-frame payload),
    /// even though most fit one 1500-byte Ethernet frame.
    public var maximumMessageSize: Int

    /// The most questions plus records one message may declare.
    ///
    /// 512: the smallest possible question is 5 bytes and the smallest record 11, so a 9000-byte message
    /// could in theory declare ~1800 entries of root-name junk. The densest legitimate content, a query with
    /// compressed known-answer PTR records (about 30 bytes each), holds about 300 in 9000 bytes; 512 leaves
    /// headroom for that while capping the per-packet work a peer can cause.
    public var maximumRecordCount: Int

    /// The most compression pointers followed while reading one name.
    ///
    /// 32: real encoders jump once per name (to the longest known suffix); a chain of 32 already means a
    /// deliberately odd packet. Pointers must also point strictly backwards, which alone rules out loops;
    /// this bound stops long backward chains from making every name cost thousands of hops.
    public var maximumCompressionPointers: Int

    /// The most character strings one TXT record may hold.
    ///
    /// 256: RFC 6763 section 6.2 expects TXT records of a few hundred bytes with a handful of keys; 256
    /// one-byte strings already exceed what any DNS-SD service publishes.
    public var maximumTXTStrings: Int

    /// The limits for multicast DNS: 9000 bytes, 512 entries, 32 pointers per name, 256 TXT strings.
    public static let mdns = DNSLimits()

    /// The limits for unicast DNS (wide-area DNS-SD): messages up to 65,535 bytes, the most a TCP reply can
    /// carry (RFC 1035 section 4.2.2), and 4096 entries, enough for a PTR answer that fills such a reply with
    /// compressed records (about 16 bytes each for a short instance name).
    public static let unicast = DNSLimits(maximumMessageSize: 65_535, maximumRecordCount: 4096)

    /// Creates limits; every default is the ``mdns`` value.
    /// - Parameters:
    ///   - maximumMessageSize: The largest message in bytes.
    ///   - maximumRecordCount: The most questions plus records per message.
    ///   - maximumCompressionPointers: The most pointer hops per name.
    ///   - maximumTXTStrings: The most strings per TXT record.
    public init(
        maximumMessageSize: Int = 9000, maximumRecordCount: Int = 512, maximumCompressionPointers: Int = 32,
        maximumTXTStrings: Int = 256
    ) {
        self.maximumMessageSize = maximumMessageSize
        self.maximumRecordCount = maximumRecordCount
        self.maximumCompressionPointers = maximumCompressionPointers
        self.maximumTXTStrings = maximumTXTStrings
    }
}
