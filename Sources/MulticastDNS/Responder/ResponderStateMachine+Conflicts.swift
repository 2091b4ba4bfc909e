import MultipeerIO

// Conflicts (RFC 6762 sections 7.4, 9 and RFC 6763 appendix D): a received response that claims one of our
// names with other data sends a claimed name back to probing, and renames a name still being probed.
extension ResponderStateMachine {
    /// Handles a received response: drops answers another responder just gave, and finds conflicts.
    mutating func handleResponse(_ message: DNSMessage, on link: MulticastLink, now: IOInstant) {
        let records = message.answers + message.additionals
        // RFC 6762 section 7.4: another responder just multicast a shared record we were about to send.
        for record in message.answers where record.ttl > 0 {
            let k = key(record)
            if let item = pending[link]?[k], !isUnique(record), !item.unsolicited,
                let ours = currentRecord(matching: k, on: link), record.ttl >= ours.ttl
            {
                pending[link]![k] = nil
                statistics.suppressedAnswers += 1
            }
        }
        let hostRecords = allHostRecords()
        var hostConflicts = false
        var conflicted = Set<ServiceID>()
        for record in records where record.ttl > 0 && isUnique(record) && record.type != .nsec {
            if record.name == hostName {
                if !hostRecords.contains(key(record)) && (record.type == .a || record.type == .aaaa) {
                    hostConflicts = true
                }
                continue
            }
            for (id, entry) in entries where record.name == entry.instanceName {
                let ours = Set(uniqueServiceRecords(entry).map(key))
                if !ours.contains(key(record)) { conflicted.insert(id) }
            }
        }
        // One decision per name per packet, taken on the phase the packet found: a conflicting SRV and TXT in
        // one packet must not first send a claimed service back to probing and then rename it.
        if hostConflicts {
            hostConflict(now: now)
            return
        }
        for id in conflicted.sorted(by: { $0.rawValue < $1.rawValue }) { serviceConflict(id, now: now) }
    }

    /// Counts a conflict that renames something.
    /// - Returns: how long to wait before probing the new name.
    mutating func noteConflict(now: IOInstant) -> Duration {
        statistics.conflicts += 1
        return conflicts.delayAfterConflict(now: now, configuration: configuration)
    }

    /// Another host claims the service's name with other data.
    mutating func serviceConflict(_ id: ServiceID, now: IOInstant) {
        guard var entry = entries[id] else { return }
        switch entry.phase {
        case .probing:
            // RFC 6762 section 9 and RFC 6763 appendix D: choose a new name and probe again.
            let delay = noteConflict(now: now)
            let old = entry.service.instanceName
            entry.takeNextName()
            entry.phase = .probing(sent: 0, next: now + delay)
            // The new name is claimed afresh: its first announcement reports `registered` again.
            entry.announcedOnce = false
            entries[id] = entry
            forgetUnpublishedRecords()
            pendingEvents.append(.renamed(id, from: old, to: entry.service.instanceName))
        case .announcing, .established:
            // Someone claims our name with other data: probe again; the probe settles who keeps it.
            entry.phase = .probing(sent: 0, next: now)
            entries[id] = entry
        case .goodbye:
            break
        }
    }

    /// Another host claims our host name with other addresses.
    mutating func hostConflict(now: IOInstant) {
        guard entries.values.contains(where: \.isProbing) else {
            // RFC 6762 section 9: a conflict on a claimed name sends us back to probing; only a conflict
            // while probing renames, so one stray packet cannot rename the host.
            for id in entries.keys where !entries[id]!.isGoingAway {
                entries[id]!.phase = .probing(sent: 0, next: now)
            }
            return
        }
        let delay = noteConflict(now: now)
        let old = hostName
        host.takeNextName()
        pending.removeAll()
        for id in entries.keys where !entries[id]!.isGoingAway {
            entries[id]!.phase = .probing(sent: 0, next: now + delay)
        }
        forgetUnpublishedRecords()
        pendingEvents.append(.hostRenamed(from: old.description, to: hostName.description))
    }
}
