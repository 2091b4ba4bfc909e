import MultipeerIO

// Answering queries (RFC 6762 sections 5-7): known-answer suppression, unicast replies within a budget,
// random delays for shared records, and at most one multicast of a record per second on a link.
extension ResponderStateMachine {
    /// Answers a received query: schedules multicast answers and unicast replies.
    mutating func handleQuery(
        _ message: DNSMessage, from source: MDNSEndpoint, on link: MulticastLink, now: IOInstant
    ) {
        if !message.authorities.isEmpty { handleProbe(message, on: link, now: now) }
        let legacy = source.port != mdnsPort
        let knownAnswers = Set(message.answers.filter { $0.ttl > 0 }.map(key))
        var knownTTL: [DNSResourceRecord: UInt32] = [:]
        for record in message.answers { knownTTL[key(record)] = max(knownTTL[key(record)] ?? 0, record.ttl) }

        // Known answers in a follow-up packet cancel answers this querier's earlier packet scheduled.
        if let items = pending[link] {
            for (record, item) in items where knownAnswers.contains(record) && item.requesters.contains(source.address)
            {
                guard let ours = currentRecord(matching: record, on: link), knownTTL[record]! >= ours.ttl / 2 else {
                    continue
                }
                var updated = item
                updated.requesters.remove(source.address)
                if updated.requesters.isEmpty && !updated.unsolicited {
                    pending[link]![record] = nil
                    statistics.suppressedAnswers += 1
                } else {
                    pending[link]![record] = updated
                }
            }
        }

        var multicastAnswers: [DNSResourceRecord] = []
        var unicastAnswers: [DNSResourceRecord] = []
        for question in message.questions where question.questionClass == dnsClassIN || question.questionClass == 255 {
            for record in answers(to: question, on: link) {
                // RFC 6762 section 7.1: the querier already has it with at least half its TTL left.
                if let ttl = knownTTL[key(record)], ttl >= record.ttl / 2 {
                    statistics.suppressedAnswers += 1
                    continue
                }
                if legacy {
                    unicastAnswers.append(record)
                } else if question.unicastResponse,
                    let last = history.lastSent(key(record), on: link),
                    now - last < .seconds(Int64(record.ttl) / 4)
                {
                    // RFC 6762 section 5.4: unicast is fine when the link saw it recently.
                    unicastAnswers.append(record)
                } else {
                    multicastAnswers.append(record)
                }
            }
        }

        if !unicastAnswers.isEmpty {
            if unicastBudget.take(now: now) {
                let allUnique = unicastAnswers.allSatisfy(isUnique)
                let delay =
                    allUnique ? Duration.zero : random.milliseconds(in: configuration.sharedAnswerDelayMilliseconds)
                // Only keys are kept: the reply is built when it is sent, so a record that changed in the
                // meantime (a TXT update) never goes out in its stale form.
                var header = DNSMessage(flags: DNSMessage.responseFlags)
                if legacy {
                    header.id = message.id
                    header.questions = message.questions
                }
                unicastReplies.append(
                    UnicastReply(
                        due: now + delay, answers: unicastAnswers.map(key), header: header, legacy: legacy,
                        destination: .unicast(source, link)))
            } else {
                statistics.unicastAnswersRefused += 1
                if !legacy { multicastAnswers += unicastAnswers }
            }
        }

        guard !multicastAnswers.isEmpty else { return }
        let allUnique = multicastAnswers.allSatisfy(isUnique)
        let delay: Duration =
            message.isTruncated
            ? random.milliseconds(in: configuration.truncatedQueryDelayMilliseconds)
            : allUnique ? .zero : random.milliseconds(in: configuration.sharedAnswerDelayMilliseconds)
        schedule(multicastAnswers, on: link, at: now + delay, requester: source.address, now: now)
    }

    /// Schedules records to be multicast on `link` at `wanted`, or later if one went out there within
    /// `rateLimit` (by default ``ResponderConfiguration/recordRateLimit``). `requester` is the querier's
    /// address, or nil for a probe defense.
    mutating func schedule(
        _ records: [DNSResourceRecord], on link: MulticastLink, at wanted: IOInstant, requester: IPAddress?,
        now: IOInstant, rateLimit: Duration? = nil
    ) {
        let limit = rateLimit ?? configuration.recordRateLimit
        for record in records {
            let k = key(record)
            var due = wanted
            if let last = history.lastSent(k, on: link), last + limit > due {
                due = last + limit
                statistics.rateLimitedAnswers += 1
            }
            var item = pending[link]?[k] ?? ScheduledAnswer(due: due, requesters: [], unsolicited: requester == nil)
            item.due = min(item.due, due)
            if let requester { item.requesters.insert(requester) } else { item.unsolicited = true }
            pending[link, default: [:]][k] = item
        }
    }

    /// Multicasts the scheduled answers that are due, one packet per link, as the records are published now.
    mutating func flushPending(now: IOInstant, into actions: inout [Action]) {
        for link in pending.keys.sorted() {
            guard let items = pending[link] else { continue }
            let due = items.filter { $0.value.due <= now }
            guard !due.isEmpty else { continue }
            var answers: [DNSResourceRecord] = []
            for (record, _) in due {
                pending[link]![record] = nil
                guard var live = currentRecord(matching: record, on: link) else { continue }
                live.cacheFlush = isUnique(live)
                answers.append(live)
                history.noteSent(key(live), on: link, at: now)
            }
            if pending[link]!.isEmpty { pending[link] = nil }
            guard !answers.isEmpty else { continue }
            answers.sort { sortKey($0) < sortKey($1) }
            send(
                response(answers: answers, additionals: additionals(for: answers, on: link)), .multicast(link), &actions
            )
        }
    }

    /// Sends the unicast replies that are due.
    mutating func flushUnicastReplies(now: IOInstant, into actions: inout [Action]) {
        var keep: [UnicastReply] = []
        for reply in unicastReplies {
            if reply.due > now {
                keep.append(reply)
            } else if let message = build(reply) {
                statistics.messagesSent += 1
                actions.append(.send(message, to: reply.destination))
            }
        }
        unicastReplies = keep
    }

    /// The reply with the records as published now; nil if none is published any more.
    func build(_ reply: UnicastReply) -> DNSMessage? {
        let link = reply.destination.link
        var answers = reply.answers.compactMap { currentRecord(matching: $0, on: link) }
        guard !answers.isEmpty else { return nil }
        var extra = additionals(for: answers, on: link)
        if reply.legacy {
            // RFC 6762 section 6.7: echo ID and questions, cap TTLs, no cache-flush bits.
            func legacyForm(_ r: DNSResourceRecord) -> DNSResourceRecord {
                var r = r
                r.ttl = min(r.ttl, configuration.legacyUnicastTTL)
                r.cacheFlush = false
                return r
            }
            answers = answers.map(legacyForm)
            extra = extra.map(legacyForm)
        } else {
            answers = answers.map {
                var r = $0; r.cacheFlush = isUnique(r); return r
            }
        }
        var message = reply.header
        message.answers = answers
        message.additionals = extra
        return message
    }

    /// The records of claimed services that answer `question` on `link`, or an NSEC record saying the type
    /// asked for does not exist under a name we own.
    func answers(to question: DNSQuestion, on link: MulticastLink) -> [DNSResourceRecord] {
        var found: [DNSResourceRecord] = []
        var seen = Set<DNSResourceRecord>()
        var ownsName = false
        for entry in claimedEntries() {
            let nsec = nsecRecords(entry, on: link)
            for record in serviceRecords(entry, on: link) {
                if question.name == record.name && isUnique(record) { ownsName = true }
                if question.isAnswered(by: record), seen.insert(key(record)).inserted { found.append(record) }
            }
            if found.isEmpty && ownsName && question.type != .any {
                // RFC 6762 section 6.1: say authoritatively that the asked-for type does not exist.
                for record in nsec where record.name == question.name && seen.insert(key(record)).inserted {
                    found.append(record)
                }
            }
            if question.name == entry.instanceName || question.name == hostName { ownsName = true }
        }
        return found
    }

    /// Additional records (RFC 6763 section 12): for PTR answers the SRV, TXT and addresses; for SRV the
    /// addresses; each at most once and never repeating an answer.
    func additionals(for answers: [DNSResourceRecord], on link: MulticastLink) -> [DNSResourceRecord] {
        var present = Set(answers.map(key))
        var out: [DNSResourceRecord] = []
        func add(_ record: DNSResourceRecord) {
            var record = record
            record.cacheFlush = isUnique(record)
            if present.insert(key(record)).inserted { out.append(record) }
        }
        for answer in answers {
            for entry in claimedEntries() {
                switch answer.data {
                case .ptr(let target) where target == entry.instanceName:
                    uniqueServiceRecords(entry).forEach(add)
                    hostRecords(on: link).forEach(add)
                    nsecRecords(entry, on: link).forEach(add)
                case .srv where answer.name == entry.instanceName:
                    hostRecords(on: link).forEach(add)
                    nsecRecords(entry, on: link).filter { $0.name == hostName }.forEach(add)
                default: break
                }
            }
        }
        return out
    }
}
