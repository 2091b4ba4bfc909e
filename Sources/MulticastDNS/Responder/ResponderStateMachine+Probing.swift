import MultipeerIO

// Probing (RFC 6762 sections 8.1 and 8.2): before a name is used, three probes ask whether anyone owns it;
// a probe from another host for a name we hold is defended, and simultaneous probes are settled by comparing
// the proposed records.
extension ResponderStateMachine {
    /// Sends the service's next probe on every link, or, after the last one, claims the name and announces it.
    mutating func probe(_ id: ServiceID, sent: Int, now: IOInstant, into actions: inout [Action]) {
        guard var entry = entries[id] else { return }
        if sent < configuration.probeCount {
            for link in links.keys.sorted() {
                send(probeMessage(for: entry, on: link, first: sent == 0), .multicast(link), &actions)
            }
            entry.phase = .probing(sent: sent + 1, next: now + configuration.probeInterval)
            entries[id] = entry
        } else {
            entry.phase = .announcing(sent: 0, next: now)
            entries[id] = entry
            advance(id, now: now, into: &actions)
        }
    }

    /// A probe for the service's name and the host name.
    func probeMessage(for entry: RegisteredService, on link: MulticastLink, first: Bool) -> DNSMessage {
        // RFC 6762 section 8.1: questions of type ANY for each name, the proposed records in the authority
        // section; the first probe asks for a unicast reply.
        DNSMessage(
            questions: [
                DNSQuestion(name: entry.instanceName, type: .any, unicastResponse: first),
                DNSQuestion(name: hostName, type: .any, unicastResponse: first),
            ],
            authorities: uniqueServiceRecords(entry) + hostRecords(on: link))
    }

    /// Handles the authority section of a received query: another host probing for a name we hold or probe.
    mutating func handleProbe(_ message: DNSMessage, on link: MulticastLink, now: IOInstant) {
        for question in message.questions {
            let theirs = message.authorities.filter { $0.name == question.name }
            guard !theirs.isEmpty else { continue }
            // Our own probe, looped back or heard on another interface of this host, carries only records we
            // publish on some link; it is not a rival.
            let published =
                question.name == hostName
                ? allHostRecords() : Set(entries.values.flatMap { uniqueServiceRecords($0).map(key) })
            if Set(theirs.map(key)).isSubset(of: published) { continue }
            for (id, entry) in entries where question.name == entry.instanceName || question.name == hostName {
                let ours = (question.name == hostName ? hostRecords(on: link) : uniqueServiceRecords(entry))
                switch entry.phase {
                case .probing(let sent, _) where sent > 0:
                    // RFC 6762 section 8.2: simultaneous probes; the lexicographically later set wins.
                    let order = ProbeTieBreak.compare(ours, theirs)
                    if order < 0 {
                        entries[id]!.phase = .probing(sent: 0, next: now + configuration.probeTieBreakDefer)
                    }
                case .announcing, .established:
                    // Defend the name at once, at most every 250 ms (RFC 6762 sections 6 and 8.1).
                    if Set(ours.map(key)) != Set(theirs.map(key)) {
                        schedule(
                            ours, on: link, at: now, requester: nil, now: now,
                            rateLimit: configuration.probeDefenseRateLimit)
                    }
                default:
                    break
                }
            }
        }
    }
}
