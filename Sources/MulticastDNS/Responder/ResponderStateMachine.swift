public import MultipeerIO

/// The multicast DNS responder (RFC 6762 sections 6-10, RFC 6763 section 12) as a pure state machine.
///
/// It owns the records of the registered services and the host, decides what to send and when, and never
/// touches a socket or a clock: every input carries `now`, every output is an ``Action``, and the owner
/// calls ``tick(now:)`` at ``nextDeadline``.
public struct ResponderStateMachine {
    /// What the owner must do.
    public enum Action: Hashable, Sendable {
        /// Send a message.
        case send(DNSMessage, to: MDNSDestination)
        /// Report an event to the user.
        case event(ResponderEvent)
    }

    /// Identifies a registered service.
    public struct ServiceID: Hashable, Sendable, CustomStringConvertible {
        /// A number unique within one state machine.
        public let rawValue: Int
        public var description: String { "service#\(rawValue)" }
    }

    /// A registration request.
    public struct Service: Hashable, Sendable {
        /// The instance name wanted; the responder may rename it on conflict.
        public var instanceName: String
        /// The service type, such as `_chat._tcp.local.`.
        public var serviceType: DNSName
        /// The TCP or UDP port.
        public var port: UInt16
        /// TXT strings in wire form.
        public var txt: [[UInt8]]

        /// Creates a registration request.
        public init(instanceName: String, serviceType: DNSName, port: UInt16, txt: [[UInt8]]) {
            self.instanceName = instanceName
            self.serviceType = serviceType
            self.port = port
            self.txt = txt
        }
    }

    /// Where a name stands in the RFC 6762 section 8 timeline.
    enum Phase: Hashable {
        /// Probing; `sent` probes went out, the next step is due at `next`.
        case probing(sent: Int, next: IOInstant)
        /// Claimed; `sent` announcements went out, the next is due at `next`.
        case announcing(sent: Int, next: IOInstant)
        /// Claimed and fully announced.
        case established
        /// Stopping: `sent` goodbye rounds went out.
        case goodbye(sent: Int, next: IOInstant)
    }

    struct Entry {
        var service: Service
        var baseName: String
        var renameCount = 1
        var phase: Phase
        var announcedOnce = false
        var instanceName: DNSName
        /// A TXT update waits to be announced.
        var updatePending = false
        /// When the last TXT update went out: the next one waits until a second after it, so an application
        /// updating in a tight loop sends at most one new TXT record per second.
        var lastUpdateAnnouncement: IOInstant?
    }

    struct Pending {
        var due: IOInstant
        /// Sources whose queries asked for it; empty for announcements and probe defenses, which known
        /// answers never cancel.
        var requesters: Set<IPAddress>
        var unsolicited: Bool
    }

    struct UnicastReply {
        var due: IOInstant
        /// Keys of the records to answer with, looked up again when the reply is sent.
        var answers: [DNSResourceRecord]
        /// ID and questions (echoed for legacy queries).
        var header: DNSMessage
        var legacy: Bool
        var destination: MDNSDestination
    }

    /// The configuration.
    public let configuration: ResponderConfiguration
    /// The host name our address records are published under, such as `linux-4f2a.local.`.
    public private(set) var hostName: DNSName
    private var hostBaseLabel: String
    private var hostRenameCount = 1
    private var entries: [ServiceID: Entry] = [:]
    private var nextServiceID = 0
    private var links: [MulticastLink: [IPAddress]] = [:]
    private var lastMulticast: [MulticastLink: [DNSResourceRecord: IOInstant]] = [:]
    private var pending: [MulticastLink: [DNSResourceRecord: Pending]] = [:]
    private var unicastReplies: [UnicastReply] = []
    private var unicastTokens: Double
    private var unicastTokensAt: IOInstant?
    private var conflictTimes: [IOInstant] = []
    private var random: SplitMix64

    /// Counters for tests, benchmarks and diagnostics.
    public private(set) var statistics = Statistics()

    /// What the responder did.
    public struct Statistics: Hashable, Sendable {
        /// Queries received.
        public var queriesReceived = 0
        /// Responses received.
        public var responsesReceived = 0
        /// Messages sent (multicast and unicast).
        public var messagesSent = 0
        /// Answers held back because the record went out on that link less than a second ago.
        public var rateLimitedAnswers = 0
        /// Unicast answers refused by the unicast budget.
        public var unicastAnswersRefused = 0
        /// Answers suppressed by known answers or duplicate answers.
        public var suppressedAnswers = 0
        /// Conflicts that caused a rename.
        public var conflicts = 0
    }

    /// Creates a responder.
    /// - Parameters:
    ///   - hostLabel: the first label of the host name; `.local.` is appended.
    ///   - configuration: timings and limits.
    ///   - seed: seeds the random delays; `nil` for a system-random seed.
    /// - Throws: ``DNSNameError`` if `hostLabel` is not a valid label.
    public init(hostLabel: String, configuration: ResponderConfiguration = .init(), seed: UInt64? = nil)
        throws(DNSNameError)
    {
        self.configuration = configuration
        hostBaseLabel = hostLabel
        hostName = try DNSName(labels: [hostLabel, "local"])
        random = seed.map(SplitMix64.init(seed:)) ?? SplitMix64()
        unicastTokens = Double(configuration.unicastAnswersPerSecond)
    }

    // MARK: - Inputs

    /// Sets the links and the addresses of their interfaces (both families of an interface share one list).
    /// Established services are announced again on every link; new links get their answers from then on.
    public mutating func setLinks(_ newLinks: [MulticastLink: [IPAddress]], now: IOInstant) -> [Action] {
        guard newLinks != links else { return [] }
        links = newLinks
        for link in lastMulticast.keys where newLinks[link] == nil { lastMulticast[link] = nil }
        forgetUnpublishedRecords()
        for link in pending.keys where newLinks[link] == nil { pending[link] = nil }
        unicastReplies.removeAll { newLinks[$0.destination.link] == nil }
        for id in entries.keys {
            switch entries[id]!.phase {
            case .announcing, .established:
                entries[id]!.phase = .announcing(sent: 0, next: now)
            case .probing, .goodbye: break
            }
        }
        return tick(now: now)
    }

    /// Registers a service; probing starts after a random 0-250 ms delay.
    /// - Throws: ``ResponderError`` if the name is not a valid label or too many services are registered.
    public mutating func register(_ service: Service, now: IOInstant) throws(ResponderError) -> (ServiceID, [Action]) {
        guard entries.count < configuration.maximumServices else {
            throw .tooManyServices(limit: configuration.maximumServices)
        }
        let name: DNSName
        do {
            name = try service.serviceType.prepending(service.instanceName)
        } catch {
            throw .invalidName(error)
        }
        let id = ServiceID(rawValue: nextServiceID)
        nextServiceID += 1
        let delay = random.milliseconds(in: configuration.probeInitialDelayMilliseconds)
        entries[id] = Entry(
            service: service, baseName: service.instanceName, phase: .probing(sent: 0, next: now + delay),
            instanceName: name)
        return (id, tick(now: now))
    }

    /// Replaces a service's TXT record and announces the new one (RFC 6762 section 8.4).
    public mutating func updateTXT(_ txt: [[UInt8]], for id: ServiceID, now: IOInstant) -> [Action] {
        guard var entry = entries[id], entry.service.txt != txt else { return [] }
        entry.service.txt = txt
        entries[id] = entry
        forgetUnpublishedRecords()
        switch entry.phase {
        case .announcing, .established:
            entry.updatePending = true
            let next = entry.lastUpdateAnnouncement.map { max(now, $0 + configuration.recordRateLimit) } ?? now
            entry.phase = .announcing(sent: 0, next: next)
        case .probing, .goodbye: break
        }
        entries[id] = entry
        return tick(now: now)
    }

    /// Withdraws a service: goodbye packets (TTL 0) go out if it was ever announced, then
    /// ``ResponderEvent/unregistered(_:)`` is reported.
    public mutating func unregister(_ id: ServiceID, now: IOInstant) -> [Action] {
        guard var entry = entries[id] else { return [] }
        if case .goodbye = entry.phase { return [] }
        if !entry.announcedOnce {
            entries[id] = nil
            return [.event(.unregistered(id))]
        }
        entry.phase = .goodbye(sent: 0, next: now)
        entries[id] = entry
        return tick(now: now)
    }

    /// `true` while any service is registered or saying goodbye.
    public var isIdle: Bool { entries.isEmpty && unicastReplies.isEmpty }

    /// The current instance name of a service.
    public func instanceName(of id: ServiceID) -> String? { entries[id]?.service.instanceName }

    /// The earliest time ``tick(now:)`` has work to do.
    public var nextDeadline: IOInstant? {
        var deadline: IOInstant?
        func consider(_ instant: IOInstant) {
            if deadline == nil || instant < deadline! { deadline = instant }
        }
        for entry in entries.values {
            switch entry.phase {
            case .probing(_, let next), .announcing(_, let next), .goodbye(_, let next): consider(next)
            case .established: break
            }
        }
        for records in pending.values { for item in records.values { consider(item.due) } }
        for reply in unicastReplies { consider(reply.due) }
        return deadline
    }

    /// Handles one received packet.
    public mutating func receive(
        _ message: DNSMessage, from source: MDNSEndpoint, on link: MulticastLink, now: IOInstant
    ) -> [Action] {
        guard links[link] != nil, message.opcode == 0 else { return [] }
        if message.isResponse {
            statistics.responsesReceived += 1
            // RFC 6762 section 11: responses from any port but 5353 are not mDNS responses.
            guard message.responseCode == 0, source.port == mdnsPort else { return [] }
            handleResponse(message, on: link, now: now)
        } else {
            statistics.queriesReceived += 1
            handleQuery(message, from: source, on: link, now: now)
        }
        let events = pendingEvents.map { Action.event($0) }
        pendingEvents.removeAll()
        return events + tick(now: now)
    }

    // MARK: - Timeline

    /// Performs everything due at `now`: probes, announcements, goodbyes and delayed answers.
    public mutating func tick(now: IOInstant) -> [Action] {
        var actions: [Action] = []
        for id in entries.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            advance(id, now: now, into: &actions)
        }
        flushPending(now: now, into: &actions)
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
        return actions
    }

    private mutating func advance(_ id: ServiceID, now: IOInstant, into actions: inout [Action]) {
        guard var entry = entries[id] else { return }
        switch entry.phase {
        case .probing(let sent, let next) where next <= now:
            if sent < configuration.probeCount {
                for link in links.keys.sorted() {
                    send(probe(for: entry, on: link, first: sent == 0), .multicast(link), &actions)
                }
                entry.phase = .probing(sent: sent + 1, next: now + configuration.probeInterval)
            } else {
                entry.phase = .announcing(sent: 0, next: now)
                entries[id] = entry
                advance(id, now: now, into: &actions)
                return
            }
        case .announcing(let sent, let next) where next <= now:
            for link in links.keys.sorted() {
                // RFC 6762 section 6: no record twice within a second on a link. A series restarted by a TXT
                // update or a link change carries the new records at once and the unchanged ones in the
                // later rounds.
                let records = serviceRecords(entry, on: link).compactMap { record -> DNSResourceRecord? in
                    if let last = lastMulticast[link]?[key(record)], now - last < configuration.recordRateLimit {
                        return nil
                    }
                    var record = record
                    record.cacheFlush = isUnique(record)
                    return record
                }
                guard !records.isEmpty else { continue }
                for record in records {
                    let recordKey = key(record)
                    lastMulticast[link, default: [:]][recordKey] = now
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
        case .goodbye(let sent, let next) where next <= now:
            for link in links.keys.sorted() {
                var records = sharedAndServiceRecords(entry, includeHost: isLastAnnounced(id), on: link)
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
        default:
            break
        }
        entries[id] = entry
    }

    /// Drops rate-limit history of records no longer published (an old TXT record, a withdrawn service), so
    /// the history stays as large as what is published, however often the TXT record changes.
    private mutating func forgetUnpublishedRecords() {
        for link in lastMulticast.keys {
            lastMulticast[link] = lastMulticast[link]!.filter { currentRecord(matching: $0.key, on: link) != nil }
        }
    }

    /// Entries in the rate-limit history, for tests.
    var rateLimitHistoryCount: Int { lastMulticast.values.reduce(0) { $0 + $1.count } }

    private func isLastAnnounced(_ id: ServiceID) -> Bool {
        !entries.contains { $0.key != id && $0.value.announcedOnce && !isGoingAway($0.value) }
    }

    private func isGoingAway(_ entry: Entry) -> Bool {
        if case .goodbye = entry.phase { return true }
        return false
    }

    private mutating func send(_ message: DNSMessage, _ destination: MDNSDestination, _ actions: inout [Action]) {
        statistics.messagesSent += 1
        actions.append(.send(message, to: destination))
    }

    private mutating func flushPending(now: IOInstant, into actions: inout [Action]) {
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
                lastMulticast[link, default: [:]][key(live)] = now
            }
            if pending[link]!.isEmpty { pending[link] = nil }
            guard !answers.isEmpty else { continue }
            answers.sort { sortKey($0) < sortKey($1) }
            send(
                response(answers: answers, additionals: additionals(for: answers, on: link)), .multicast(link), &actions
            )
        }
    }

    // MARK: - Records

    private func key(_ record: DNSResourceRecord) -> DNSResourceRecord { record.identity }

    private func sortKey(_ record: DNSResourceRecord) -> String {
        "\(record.type.rawValue) \(record.name) \(record.data)"
    }

    private func addresses(on link: MulticastLink) -> [IPAddress] {
        (links[link] ?? []).sorted()
    }

    private func hostRecords(on link: MulticastLink) -> [DNSResourceRecord] {
        addresses(on: link).map { address in
            switch address {
            case .v4(let a): DNSResourceRecord(name: hostName, ttl: configuration.hostRecordTTL, data: .a(a))
            case .v6(let a): DNSResourceRecord(name: hostName, ttl: configuration.hostRecordTTL, data: .aaaa(a))
            }
        }
    }

    private func allHostRecords() -> Set<DNSResourceRecord> {
        var all = Set<DNSResourceRecord>()
        for link in links.keys { for record in hostRecords(on: link) { all.insert(key(record)) } }
        return all
    }

    private func uniqueServiceRecords(_ entry: Entry) -> [DNSResourceRecord] {
        [
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.hostRecordTTL,
                data: .srv(priority: 0, weight: 0, port: entry.service.port, target: hostName)),
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.otherRecordTTL, data: .txt(entry.service.txt)),
        ]
    }

    private func sharedRecords(_ entry: Entry) -> [DNSResourceRecord] {
        [
            DNSResourceRecord(
                name: entry.service.serviceType, ttl: configuration.otherRecordTTL, data: .ptr(entry.instanceName)),
            DNSResourceRecord(
                name: ServiceType.enumerationName, ttl: configuration.otherRecordTTL,
                data: .ptr(entry.service.serviceType)),
        ]
    }

    private func serviceRecords(_ entry: Entry, on link: MulticastLink) -> [DNSResourceRecord] {
        sharedRecords(entry) + uniqueServiceRecords(entry) + hostRecords(on: link)
    }

    private func sharedAndServiceRecords(_ entry: Entry, includeHost: Bool, on link: MulticastLink)
        -> [DNSResourceRecord]
    {
        var records = [sharedRecords(entry)[0]] + uniqueServiceRecords(entry)
        if includeHost { records += hostRecords(on: link) }
        // The enumeration PTR stays while another live service of the same type remains.
        let typeStillServed = entries.values.contains {
            $0.instanceName != entry.instanceName && $0.announcedOnce && !isGoingAway($0)
                && $0.service.serviceType == entry.service.serviceType
        }
        if !typeStillServed { records.append(sharedRecords(entry)[1]) }
        return records
    }

    private func nsecRecords(_ entry: Entry, on link: MulticastLink) -> [DNSResourceRecord] {
        var hostTypes: [DNSRecordType] = []
        let addresses = addresses(on: link)
        if addresses.contains(where: { if case .v4 = $0 { true } else { false } }) { hostTypes.append(.a) }
        if addresses.contains(where: { if case .v6 = $0 { true } else { false } }) { hostTypes.append(.aaaa) }
        return [
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.otherRecordTTL, cacheFlush: true,
                data: .nsec(next: entry.instanceName, types: [.txt, .srv])),
            DNSResourceRecord(
                name: hostName, ttl: configuration.hostRecordTTL, cacheFlush: true,
                data: .nsec(next: hostName, types: hostTypes.sorted())),
        ]
    }

    /// Records we answer with on a link: those of services past probing.
    private func answerableEntries() -> [Entry] {
        entries.values.filter {
            switch $0.phase {
            case .announcing, .established: true
            case .probing, .goodbye: false
            }
        }
    }

    private func isUnique(_ record: DNSResourceRecord) -> Bool {
        record.type != .ptr
    }

    private func belongs(_ record: DNSResourceRecord, to entry: Entry) -> Bool {
        record.name == entry.instanceName
            || (record.type == .ptr && record.data == .ptr(entry.instanceName))
    }

    /// The record as we would publish it now, or nil if we no longer publish it.
    private func currentRecord(matching record: DNSResourceRecord, on link: MulticastLink) -> DNSResourceRecord? {
        for entry in answerableEntries() {
            for candidate in serviceRecords(entry, on: link) where key(candidate) == record { return candidate }
            for candidate in nsecRecords(entry, on: link) where key(candidate) == record { return candidate }
        }
        return nil
    }

    private func answers(to question: DNSQuestion, on link: MulticastLink) -> [DNSResourceRecord] {
        var found: [DNSResourceRecord] = []
        var seen = Set<DNSResourceRecord>()
        var ownsName = false
        for entry in answerableEntries() {
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
    private func additionals(for answers: [DNSResourceRecord], on link: MulticastLink) -> [DNSResourceRecord] {
        var present = Set(answers.map(key))
        var out: [DNSResourceRecord] = []
        func add(_ record: DNSResourceRecord) {
            var record = record
            record.cacheFlush = isUnique(record)
            if present.insert(key(record)).inserted { out.append(record) }
        }
        for answer in answers {
            for entry in answerableEntries() {
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

    private func response(answers: [DNSResourceRecord], additionals: [DNSResourceRecord] = []) -> DNSMessage {
        DNSMessage(flags: DNSMessage.responseFlags, answers: answers, additionals: additionals)
    }

    private func probe(for entry: Entry, on link: MulticastLink, first: Bool) -> DNSMessage {
        // RFC 6762 section 8.1: questions of type ANY for each name, the proposed records in the authority
        // section; the first probe asks for a unicast reply.
        DNSMessage(
            questions: [
                DNSQuestion(name: entry.instanceName, type: .any, unicastResponse: first),
                DNSQuestion(name: hostName, type: .any, unicastResponse: first),
            ],
            authorities: uniqueServiceRecords(entry) + hostRecords(on: link))
    }

    // MARK: - Received responses

    private mutating func handleResponse(_ message: DNSMessage, on link: MulticastLink, now: IOInstant) {
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

    private mutating func noteConflict(now: IOInstant) -> Duration {
        statistics.conflicts += 1
        conflictTimes = conflictTimes.filter { now - $0 < configuration.conflictWindow } + [now]
        return conflictTimes.count >= configuration.conflictLimit ? configuration.conflictBackoff : .zero
    }

    private mutating func serviceConflict(_ id: ServiceID, now: IOInstant) {
        guard var entry = entries[id] else { return }
        switch entry.phase {
        case .probing:
            // RFC 6762 section 9 and RFC 6763 appendix D: choose a new name and probe again.
            let delay = noteConflict(now: now)
            let old = entry.service.instanceName
            var renamed: DNSName?
            while renamed == nil {
                entry.renameCount += 1
                let suffix = " (\(entry.renameCount))"
                var base = entry.baseName
                while base.utf8.count + suffix.utf8.count > DNSName.maximumLabelLength { base.removeLast() }
                entry.service.instanceName = base + suffix
                renamed = try? entry.service.serviceType.prepending(entry.service.instanceName)
            }
            entry.instanceName = renamed!
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

    private mutating func hostConflict(now: IOInstant) {
        let probing = entries.values.contains { if case .probing = $0.phase { true } else { false } }
        guard probing else {
            // RFC 6762 section 9: a conflict on a claimed name sends us back to probing; only a conflict
            // while probing renames, so one stray packet cannot rename the host.
            for id in entries.keys where !isGoingAway(entries[id]!) {
                entries[id]!.phase = .probing(sent: 0, next: now)
            }
            return
        }
        let delay = noteConflict(now: now)
        let old = hostName
        hostRenameCount += 1
        var label = hostBaseLabel
        let suffix = "-\(hostRenameCount)"
        while label.utf8.count + suffix.utf8.count > DNSName.maximumLabelLength { label.removeLast() }
        hostName = (try? DNSName(labels: [label + suffix, "local"])) ?? hostName
        pending.removeAll()
        for id in entries.keys where !isGoingAway(entries[id]!) {
            entries[id]!.phase = .probing(sent: 0, next: now + delay)
        }
        forgetUnpublishedRecords()
        pendingEvents.append(.hostRenamed(from: old.description, to: hostName.description))
    }

    /// Events raised while handling input, drained into the actions of the same call.
    private var pendingEvents: [ResponderEvent] = []

    // MARK: - Received queries

    private mutating func handleQuery(
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
                    let last = lastMulticast[link]?[key(record)],
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
            if takeUnicastToken(now: now) {
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

    private mutating func schedule(
        _ records: [DNSResourceRecord], on link: MulticastLink, at wanted: IOInstant, requester: IPAddress?,
        now: IOInstant, rateLimit: Duration? = nil
    ) {
        let limit = rateLimit ?? configuration.recordRateLimit
        for record in records {
            let k = key(record)
            var due = wanted
            if let last = lastMulticast[link]?[k], last + limit > due {
                due = last + limit
                statistics.rateLimitedAnswers += 1
            }
            var item = pending[link]?[k] ?? Pending(due: due, requesters: [], unsolicited: requester == nil)
            item.due = min(item.due, due)
            if let requester { item.requesters.insert(requester) } else { item.unsolicited = true }
            pending[link, default: [:]][k] = item
        }
    }

    /// The reply with the records as published now; nil if none is published any more.
    private func build(_ reply: UnicastReply) -> DNSMessage? {
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

    private mutating func takeUnicastToken(now: IOInstant) -> Bool {
        let rate = Double(configuration.unicastAnswersPerSecond)
        if let at = unicastTokensAt {
            let elapsed = Double((now - at).components.seconds) + Double((now - at).components.attoseconds) / 1e18
            unicastTokens = min(rate, unicastTokens + elapsed * rate)
        }
        unicastTokensAt = now
        guard unicastTokens >= 1 else { return false }
        unicastTokens -= 1
        return true
    }

    private mutating func handleProbe(_ message: DNSMessage, on link: MulticastLink, now: IOInstant) {
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

/// What the responder tells its user.
public enum ResponderEvent: Hashable, Sendable {
    /// The service's name was claimed and first announced.
    case registered(ResponderStateMachine.ServiceID, name: String)
    /// Another host owns the name, so the service now uses a new one (RFC 6763 appendix D).
    case renamed(ResponderStateMachine.ServiceID, from: String, to: String)
    /// Another host owns our host name, so address records now use a new one.
    case hostRenamed(from: String, to: String)
    /// The service's goodbye packets went out; it is gone.
    case unregistered(ResponderStateMachine.ServiceID)
}

/// Why the responder refused a request.
public enum ResponderError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The instance name and service type do not form a valid DNS name.
    case invalidName(DNSNameError)
    /// The responder already publishes its limit of services.
    case tooManyServices(limit: Int)

    public var description: String {
        switch self {
        case .invalidName(let error): "invalid service name: \(error)"
        case .tooManyServices(let limit): "a responder publishes at most \(limit) services"
        }
    }
}
