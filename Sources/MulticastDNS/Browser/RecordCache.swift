import MultipeerIO

/// The browser's cache of received records, indexed by owner name so that resolving one instance looks
/// only at that instance's records.
struct RecordCache {
    struct Key: Hashable {
        var link: MulticastLink
        /// The record with TTL 0 and the cache-flush bit clear, so equal data gives equal keys.
        var record: DNSResourceRecord
    }

    struct Entry {
        var record: DNSResourceRecord
        var receivedAt: IOInstant
        var expiresAt: IOInstant
        /// Refresh points still to come.
        var refreshAt: [IOInstant]
        /// Kept only for the goodbye grace period; not used for answers.
        var dead: Bool
    }

    private var byName: [DNSName: [Key: Entry]] = [:]
    private(set) var count = 0
    /// SRV target host → owner instance → number of cached SRV entries, so "which instances use this
    /// host" is a lookup rather than a scan of the cache.
    private var ownersByTarget: [DNSName: [DNSName: Int]] = [:]

    static func key(_ record: DNSResourceRecord, on link: MulticastLink) -> Key {
        Key(link: link, record: record.identity)
    }

    subscript(key: Key) -> Entry? {
        get { byName[key.record.name]?[key] }
        set {
            let old = byName[key.record.name]?[key]
            if newValue == nil {
                guard old != nil else { return }
                byName[key.record.name]![key] = nil
                if byName[key.record.name]!.isEmpty { byName[key.record.name] = nil }
                count -= 1
                index(key, delta: -1)
            } else {
                byName[key.record.name, default: [:]][key] = newValue
                if old == nil {
                    count += 1
                    index(key, delta: 1)
                }
            }
        }
    }

    private mutating func index(_ key: Key, delta: Int) {
        guard case .srv(_, _, _, let target) = key.record.data else { return }
        let owner = key.record.name
        let updated = (ownersByTarget[target]?[owner] ?? 0) + delta
        ownersByTarget[target, default: [:]][owner] = updated > 0 ? updated : nil
        if ownersByTarget[target]!.isEmpty { ownersByTarget[target] = nil }
    }

    /// `true` if a cached SRV record (live or in its goodbye grace) points at `host`.
    func isSRVTarget(_ host: DNSName) -> Bool { ownersByTarget[host] != nil }

    /// The instances whose cached SRV records point at `host`.
    func owners(ofTarget host: DNSName) -> Dictionary<DNSName, Int>.Keys? { ownersByTarget[host]?.keys }

    /// Every record owned by `name`.
    func entries(named name: DNSName) -> [Key: Entry] { byName[name] ?? [:] }

    /// Every entry; costs a pass over the whole cache.
    var all: [(key: Key, value: Entry)] { byName.values.flatMap { $0.map { (key: $0.key, value: $0.value) } } }

    /// Live records of `type` owned by `name`, newest first.
    func live(_ type: DNSRecordType, named name: DNSName) -> [(link: MulticastLink, entry: Entry)] {
        (byName[name] ?? [:]).filter { $0.key.record.type == type && !$0.value.dead }
            .map { (link: $0.key.link, entry: $0.value) }
            .sorted { $0.entry.receivedAt > $1.entry.receivedAt }
    }

    mutating func removeAll(where shouldRemove: (Key, Entry) -> Bool) {
        for (_, entries) in byName {
            for (key, entry) in entries where shouldRemove(key, entry) { self[key] = nil }
        }
    }

    /// Marks a record unusable and schedules its deletion (goodbye, or flushed by a cache-flush record).
    mutating func kill(_ key: Key, until: IOInstant) {
        guard var entry = self[key] else { return }
        entry.dead = true
        entry.expiresAt = until
        entry.refreshAt = []
        self[key] = entry
    }
}
