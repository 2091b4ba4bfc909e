import MultipeerIO

// Announcing (RFC 6762 sections 8.3 and 8.4): a claimed name's records go out several times with a doubling
// interval, and again after a TXT update or a change of links.
extension ResponderStateMachine {
    /// Sends the service's next announcement on every link and schedules the one after it.
    mutating func announce(_ id: ServiceID, sent: Int, now: IOInstant, into actions: inout [Action]) {
        guard var entry = entries[id] else { return }
        for link in links.keys.sorted() {
            // RFC 6762 section 6: no record twice within a second on a link. A series restarted by a TXT
            // update or a link change carries the new records at once and the unchanged ones in the
            // later rounds.
            let records = serviceRecords(entry, on: link).compactMap { record -> DNSResourceRecord? in
                if let last = history.lastSent(key(record), on: link), now - last < configuration.recordRateLimit {
                    return nil
                }
                var record = record
                record.cacheFlush = isUnique(record)
                return record
            }
            guard !records.isEmpty else { continue }
            for record in records {
                let recordKey = key(record)
                history.noteSent(recordKey, on: link, at: now)
                // An answer already scheduled for this record would repeat what just went out.
                pending[link]?[recordKey] = nil
            }
            send(response(answers: records, additionals: nsecRecords(entry, on: link)), .multicast(link), &actions)
        }
        if entry.updatePending {
            entry.updatePending = false
            entry.lastUpdateAnnouncement = now
        }
        if !entry.announcedOnce {
            entry.announcedOnce = true
            actions.append(.event(.registered(id, name: entry.service.instanceName)))
        }
        let interval = configuration.announceInterval * (1 << min(sent, 16))
        entry.phase =
            sent + 1 >= configuration.announceCount
            ? .established : .announcing(sent: sent + 1, next: now + interval)
        entries[id] = entry
    }
}
