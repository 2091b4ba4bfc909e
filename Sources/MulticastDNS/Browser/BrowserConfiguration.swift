/// Timings and limits of a browser. Defaults follow RFC 6762; tests and benchmarks may shorten them.
public struct BrowserConfiguration: Sendable, Hashable {
    /// Interval after the first query; it doubles after each query (RFC 6762 section 5.2: at least 1 s).
    public var initialQueryInterval: Duration = .seconds(1)
    /// Cap of the doubling query interval (RFC 6762 section 5.2 suggests 60 minutes).
    public var maximumQueryInterval: Duration = .seconds(3600)
    /// Fractions of a record's TTL at which refresh queries go out (RFC 6762 section 5.2).
    public var refreshFractions: [Double] = [0.80, 0.85, 0.90, 0.95]
    /// Random extra fraction added to each refresh point (RFC 6762 section 5.2: 2 %).
    public var refreshJitter = 0.02
    /// An advertiser that stops answering (crashed, unplugged) is reported lost within this time of the
    /// last packet heard from it. The browser asks for its SRV record at 50 %, 70 % and 90 % of this time
    /// since it was last heard; `nil` relies on TTLs and goodbyes only.
    public var lostTimeout: Duration? = .seconds(10)
    /// Questions due within this window are sent together, so liveness checks of many services share packets.
    public var batchWindow: Duration = .seconds(1)
    /// After a goodbye the record stays cached, unused, this long (RFC 6762 section 10.1: one second).
    public var goodbyeGrace: Duration = .seconds(1)
    /// Longest TTL honoured, so records with absurd TTLs (up to 136 years on the wire) still expire; RFC 6762
    /// section 10 recommends 75 minutes for the longest-lived records, and refresh queries renew them.
    public var maximumTTL: UInt32 = 4500
    /// How often resolution of a half-known instance (PTR without SRV, TXT or addresses) is retried after the
    /// first quick retries.
    public var slowResolveInterval: Duration = .seconds(60)
    /// Most records kept; beyond it new records are dropped and counted. A service needs about 6.
    public var maximumCachedRecords = 8192
    /// Most service instances tracked at once, so a flood of fake announcements cannot grow memory.
    public var maximumInstances = 1024

    /// The defaults.
    public init() {}
}
