/// Timings and limits of the responder. Defaults follow RFC 6762; tests and benchmarks may shorten them.
public struct ResponderConfiguration: Sendable, Hashable {
    /// Number of probes before a unique name is claimed (RFC 6762 section 8.1: three).
    public var probeCount = 3
    /// Time between probes, and after the last probe before claiming (RFC 6762 section 8.1: 250 ms).
    public var probeInterval: Duration = .milliseconds(250)
    /// Random delay before the first probe, in milliseconds (RFC 6762 section 8.1: 0-250 ms).
    public var probeInitialDelayMilliseconds: ClosedRange<Int> = 0...250
    /// Wait after losing a simultaneous-probe tie-break before probing again (RFC 6762 section 8.2: 1 s).
    public var probeTieBreakDefer: Duration = .seconds(1)
    /// Number of announcements after claiming (RFC 6762 section 8.3: at least two).
    public var announceCount = 3
    /// Interval before the second announcement; it doubles after each (RFC 6762 section 8.3: 1 s).
    public var announceInterval: Duration = .seconds(1)
    /// Random delay for answers that include shared records, in milliseconds (RFC 6762 section 6: 20-120 ms).
    public var sharedAnswerDelayMilliseconds: ClosedRange<Int> = 20...120
    /// Random delay when the query says more known answers follow (TC bit; RFC 6762 section 7.2: 400-500 ms).
    public var truncatedQueryDelayMilliseconds: ClosedRange<Int> = 400...500
    /// A record is multicast on a link at most once per this interval (RFC 6762 section 6: one second).
    public var recordRateLimit: Duration = .seconds(1)
    /// Defending a name against a probe may repeat this often (RFC 6762 section 6: 250 ms).
    public var probeDefenseRateLimit: Duration = .milliseconds(250)
    /// TTL of records naming the host (SRV, A, AAAA) (RFC 6762 section 10: 120 s).
    public var hostRecordTTL: UInt32 = 120
    /// TTL of other records (PTR, TXT) (RFC 6762 section 10: 75 minutes).
    public var otherRecordTTL: UInt32 = 4500
    /// TTL cap in answers to legacy unicast queries (RFC 6762 section 6.7: at most 10 s).
    public var legacyUnicastTTL: UInt32 = 10
    /// Largest packet we send: a 1500-byte Ethernet MTU less IPv6 and UDP headers, with margin.
    public var maximumPacketSize = 1440
    /// Unicast answers (QU and legacy) allowed per second, so a flood of queries with spoofed sources cannot
    /// turn the responder into an amplifier; beyond it QU questions fall back to rate-limited multicast and
    /// legacy queries are dropped.
    public var unicastAnswersPerSecond = 50
    /// How many times goodbye packets are sent on stop, and how far apart.
    public var goodbyeCount = 2
    /// Interval between goodbye packets.
    public var goodbyeInterval: Duration = .milliseconds(250)
    /// Conflicts tolerated in `conflictWindow` before probing slows to once per `conflictBackoff`
    /// (RFC 6762 section 8.1: 15 conflicts in 10 s, then wait 5 s).
    public var conflictLimit = 15
    /// Window for `conflictLimit`.
    public var conflictWindow: Duration = .seconds(10)
    /// Wait before probing again when conflicts come too fast.
    public var conflictBackoff: Duration = .seconds(5)
    /// Most services one responder publishes; each adds records to every answer packet's candidates.
    public var maximumServices = 256

    /// The defaults.
    public init() {}
}
