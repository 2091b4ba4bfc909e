import MultipeerIO

/// When each record last went out by multicast, per link: RFC 6762 section 6 multicasts no record twice
/// within a second on a link, and section 5.4 answers a QU question by unicast when the link saw the record
/// recently.
///
/// Records are keyed by their identity (``DNSResourceRecord/identity``). The owner drops the records it no
/// longer publishes (``keeping(where:)``), so the history is as large as what is published.
struct MulticastHistory {
    private var sent: [MulticastLink: [DNSResourceRecord: IOInstant]] = [:]

    /// When `key` last went out on `link`, or nil.
    func lastSent(_ key: DNSResourceRecord, on link: MulticastLink) -> IOInstant? {
        sent[link]?[key]
    }

    /// Notes that `key` went out on `link` at `now`.
    mutating func noteSent(_ key: DNSResourceRecord, on link: MulticastLink, at now: IOInstant) {
        sent[link, default: [:]][key] = now
    }

    /// Forgets the links not in `links`.
    mutating func keepLinks(_ links: [MulticastLink: [IPAddress]]) {
        for link in sent.keys where links[link] == nil { sent[link] = nil }
    }

    /// The history without the records `isKept` refuses.
    func keeping(where isKept: (DNSResourceRecord, MulticastLink) -> Bool) -> MulticastHistory {
        var kept = self
        for (link, records) in sent { kept.sent[link] = records.filter { isKept($0.key, link) } }
        return kept
    }

    /// Entries held, over all links.
    var count: Int { sent.values.reduce(0) { $0 + $1.count } }
}
