import MultipeerIO

// The record cache (RFC 6762 sections 5.2, 7.1, 10): what a response adds, what a goodbye or a cache-flush bit
// removes, the known answers our queries carry, and when the cache next needs attention.
extension BrowserStateMachine {
    mutating func noteCacheEvent(_ instant: IOInstant) {
        if cacheWakeup == nil || instant < cacheWakeup! { cacheWakeup = instant }
    }

    mutating func recomputeCacheWakeup() {
        cacheWakeup = nil
        for (_, entry) in cache.all {
            noteCacheEvent(entry.refreshAt.first.map { min($0, entry.expiresAt) } ?? entry.expiresAt)
        }
    }

    /// PTR records for our type with more than half their TTL left (RFC 6762 section 7.1).
    func knownAnswers(on link: MulticastLink, now: IOInstant) -> [DNSResourceRecord] {
        cache.entries(named: serviceType).filter { key, entry in
            key.link == link && !entry.dead && entry.record.type == .ptr
                && (entry.expiresAt - now) * 2 > (entry.expiresAt - entry.receivedAt)
        }.map { _, entry in
            var record = entry.record
            let remaining = (entry.expiresAt - now).components.seconds
            record.ttl = UInt32(clamping: remaining)
            record.cacheFlush = false
            return record
        }.sorted { "\($0.data)" < "\($1.data)" }
    }

    func isRelevant(_ record: DNSResourceRecord) -> Bool {
        switch record.data {
        case .ptr: return record.name == serviceType
        case .srv, .txt:
            return record.name.parent == serviceType && record.name.labels.count == serviceType.labels.count + 1
        case .a, .aaaa: return cache.isSRVTarget(record.name)
        default: return false
        }
    }

    /// Caches the relevant records of a packet; returns the instances whose view may have changed.
    mutating func absorb(_ records: [DNSResourceRecord], on link: MulticastLink, now: IOInstant) -> Set<DNSName> {
        var dirty = Set<DNSName>()
        // Service records first, so addresses in the same packet find their SRV target.
        let ordered =
            records.filter { $0.type != .a && $0.type != .aaaa } + records.filter { $0.type == .a || $0.type == .aaaa }
        for record in ordered {
            // SRV records are cached before the addresses of the same packet are judged relevant.
            guard record.recordClass == dnsClassIN, isRelevant(record) else { continue }
            let key = RecordCache.key(record, on: link)
            if let instance = instanceName(of: record) {
                dirty.insert(instance)
            } else if let owners = cache.owners(ofTarget: record.name) {
                dirty.formUnion(owners)
            }
            if record.cacheFlush {
                // RFC 6762 section 10.2: other data for this name and type, older than a second, is stale.
                for (otherKey, other) in cache.entries(named: record.name)
                where otherKey.link == link && otherKey.record.type == record.type
                    && otherKey.record != key.record && now - other.receivedAt > .seconds(1) && !other.dead
                {
                    cache.kill(otherKey, until: now + configuration.goodbyeGrace)
                    noteCacheEvent(now + configuration.goodbyeGrace)
                }
            }
            if record.ttl == 0 {
                // Goodbye (RFC 6762 section 10.1): unusable now, deleted after a second.
                cache.kill(key, until: now + configuration.goodbyeGrace)
                noteCacheEvent(now + configuration.goodbyeGrace)
                continue
            }
            if cache[key] == nil && cache.count >= configuration.maximumCachedRecords {
                statistics.recordsDroppedCacheFull += 1
                continue
            }
            let lifetime = Duration.seconds(Int64(min(record.ttl, configuration.maximumTTL)))
            var refresh: [IOInstant] = []
            for fraction in configuration.refreshFractions {
                let jitter = Double.random(in: 0...configuration.refreshJitter, using: &random)
                refresh.append(now + lifetime * (fraction + jitter))
            }
            var stored = record
            stored.cacheFlush = false
            cache[key] = RecordCache.Entry(
                record: stored, receivedAt: now, expiresAt: now + lifetime, refreshAt: refresh, dead: false)
            noteCacheEvent(refresh.first.map { min($0, now + lifetime) } ?? now + lifetime)
            // Anything about an instance shows it is alive.
            if let instance = instanceName(of: record) {
                instances[instance]?.lastHeard = now
            } else if record.type == .a || record.type == .aaaa {
                for (name, state) in instances where state.reported?.hostName == record.name {
                    instances[name]!.lastHeard = max(instances[name]!.lastHeard, now)
                }
            }
        }
        return dirty
    }

    func instanceName(of record: DNSResourceRecord) -> DNSName? {
        switch record.data {
        case .ptr(let target): target
        case .srv, .txt: record.name
        default: nil
        }
    }

    mutating func forget(instance name: DNSName, now: IOInstant) {
        let host = instances[name]?.reported?.hostName
        for (key, _) in cache.entries(named: name) { cache[key] = nil }
        for (key, _) in cache.entries(named: serviceType) where key.record.data == .ptr(name) { cache[key] = nil }
        if let host, !cache.isSRVTarget(host) {
            for (key, _) in cache.entries(named: host) { cache[key] = nil }
        }
    }
}
