import MultipeerIO

// Goodbyes (RFC 6762 section 10.1): a withdrawn service's records go out with TTL 0, so caches drop them at
// once instead of waiting for them to expire.
extension ResponderStateMachine {
    /// Sends the service's next round of goodbyes on every link; after the last, forgets the service.
    mutating func sayGoodbye(_ id: ServiceID, sent: Int, now: IOInstant, into actions: inout [Action]) {
        guard var entry = entries[id] else { return }
        for link in links.keys.sorted() {
            var records = goodbyeRecords(entry, includeHost: isLastAnnounced(id), on: link)
            for index in records.indices {
                records[index].ttl = 0
                records[index].cacheFlush = false
            }
            send(response(answers: records), .multicast(link), &actions)
        }
        if sent + 1 >= configuration.goodbyeCount {
            entries[id] = nil
            for link in pending.keys {
                pending[link] = pending[link]?.filter { !belongs($0.key, to: entry) }
            }
            forgetUnpublishedRecords()
            actions.append(.event(.unregistered(id)))
            return
        }
        entry.phase = .goodbye(sent: sent + 1, next: now + configuration.goodbyeInterval)
        entries[id] = entry
    }

    /// Whether no other service keeps the host's address records published.
    func isLastAnnounced(_ id: ServiceID) -> Bool {
        !entries.contains { $0.key != id && $0.value.announcedOnce && !$0.value.isGoingAway }
    }

    /// The records a goodbye withdraws: the service's own, the host's addresses if no other service needs
    /// them, and the service type enumeration PTR if no other live service has this type.
    func goodbyeRecords(_ entry: RegisteredService, includeHost: Bool, on link: MulticastLink)
        -> [DNSResourceRecord]
    {
        var records = [sharedRecords(entry)[0]] + uniqueServiceRecords(entry)
        if includeHost { records += hostRecords(on: link) }
        // The enumeration PTR stays while another live service of the same type remains.
        let typeStillServed = entries.values.contains {
            $0.instanceName != entry.instanceName && $0.announcedOnce && !$0.isGoingAway
                && $0.service.serviceType == entry.service.serviceType
        }
        if !typeStillServed { records.append(sharedRecords(entry)[1]) }
        return records
    }
}
