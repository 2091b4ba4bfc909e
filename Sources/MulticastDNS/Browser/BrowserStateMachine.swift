public import MultipeerIO

/// A DNS-SD browser (RFC 6762 section 5, RFC 6763 section 4) as a pure state machine.
///
/// It queries continuously with a doubling interval and known answers, caches records with their TTLs,
/// refreshes them at 80-95 % of their TTL, resolves instances to SRV, TXT and addresses, de-duplicates
/// them across links and address families, and checks that resolved instances still answer. It never
/// touches a socket or a clock: inputs carry `now`, outputs are ``Action``s, the owner calls
/// ``tick(now:)`` at ``nextDeadline``.
public struct BrowserStateMachine {
    /// What the owner must do.
    public enum Action: Hashable, Sendable {
        /// Send a query (multicast on the link).
        case send(DNSMessage, to: MDNSDestination)
        /// Report an event.
        case event(BrowserEvent)
    }

    struct InstanceState {
        var reported: DiscoveredInstance?
        var lastHeard: IOInstant
        var resolveAttempts = 0
        var nextResolve: IOInstant?
        /// The latest liveness check already covered by a sent query.
        var lastLivenessQuery: IOInstant?
        /// What resolution last asked for; new information that changes it asks again at once.
        var lastResolveQuestions: [DNSQuestion] = []
    }

    /// The service type browsed, such as `_chat._tcp.local.`.
    public let serviceType: DNSName
    /// The configuration.
    public let configuration: BrowserConfiguration
    private var links: Set<MulticastLink> = []
    private var cache = RecordCache()
    /// No cache entry expires or needs a refresh before this instant (it may be early, never late).
    private var cacheWakeup: IOInstant?
    /// Links where another querier just asked our PTR question for us (RFC 6762 section 7.3).
    private var suppressedLinks: Set<MulticastLink> = []
    /// No instance needs resolving, a liveness check or a lost-timeout check before this instant (it may be
    /// early, never late), so a packet does not cost a pass over every instance.
    private var instanceWakeup: IOInstant?
    private var instances: [DNSName: InstanceState] = [:]
    private var nextQuery: IOInstant?
    private var queryInterval: Duration
    private var firstQuery = true
    private var random: SplitMix64
    private var started = false
    /// Counters for tests, benchmarks and diagnostics.
    public private(set) var statistics = Statistics()

    /// What the browser did.
    public struct Statistics: Hashable, Sendable {
        /// Query messages sent.
        public var queriesSent = 0
        /// Response messages handled.
        public var responsesReceived = 0
        /// Records dropped because the cache was full.
        public var recordsDroppedCacheFull = 0
        /// Instances dropped because too many were tracked.
        public var instancesDroppedLimit = 0
        /// Liveness queries sent.
        public var livenessQueries = 0
    }

    /// Creates a browser for `serviceType`.
    public init(serviceType: DNSName, configuration: BrowserConfiguration = .init(), seed: UInt64? = nil) {
        self.serviceType = serviceType
        self.configuration = configuration
        queryInterval = configuration.initialQueryInterval
        random = seed.map(SplitMix64.init(seed:)) ?? SplitMix64()
    }

    /// Number of cached records (for memory measurements).
    public var cachedRecordCount: Int { cache.count }

    /// Instances currently reported as found.
    public var foundInstances: [DiscoveredInstance] {
        instances.values.compactMap(\.reported).sorted { $0.name < $1.name }
    }

    // MARK: - Inputs

    /// Starts querying at once.
    public mutating func start(now: IOInstant) -> [Action] {
        started = true
        nextQuery = now
        return tick(now: now)
    }

    /// Sets the links; a new link gets an immediate query, a removed link's records are forgotten.
    public mutating func setLinks(_ newLinks: Set<MulticastLink>, now: IOInstant) -> [Action] {
        guard newLinks != links else { return [] }
        let added = newLinks.subtracting(links)
        links = newLinks
        cache.removeAll { key, _ in !newLinks.contains(key.link) }
        var actions = reconcile(now: now)
        if started && !added.isEmpty {
            // Restart the backoff so the new link is covered quickly (RFC 6762 section 8.3 reasoning).
            queryInterval = configuration.initialQueryInterval
            nextQuery = now
            firstQuery = true
        }
        actions += tick(now: now)
        return actions
    }

    /// Handles one received packet.
    public mutating func receive(
        _ message: DNSMessage, from source: MDNSEndpoint, on link: MulticastLink, now: IOInstant
    )
        -> [Action]
    {
        guard links.contains(link), message.opcode == 0 else { return [] }
        if message.isResponse {
            // RFC 6762 section 11: responses from any port but 5353 are not mDNS responses.
            guard message.responseCode == 0, source.port == mdnsPort else { return [] }
            statistics.responsesReceived += 1
            let dirty = absorb(message.answers + message.authorities + message.additionals, on: link, now: now)
            return reconcile(now: now, only: dirty) + tick(now: now)
        } else {
            // RFC 6762 section 7.3: another querier asked our question on this link, listing no known answer we
            // lack, so the answers it triggers serve us too: our next periodic query skips this link.
            if !firstQuery, let next = nextQuery, next - now < .seconds(1), !message.isTruncated,
                message.questions.contains(where: {
                    $0.name == serviceType && ($0.type == .ptr || $0.type == .any) && !$0.unicastResponse
                })
            {
                let ours = Set(knownAnswers(on: link, now: now).map(\.identity))
                let theirs = Set(message.answers.map(\.identity))
                if theirs.isSubset(of: ours) { suppressedLinks.insert(link) }
            }
            return []
        }
    }

    /// The earliest time ``tick(now:)`` has work to do.
    public var nextDeadline: IOInstant? {
        var deadline = nextQuery
        func consider(_ instant: IOInstant?) {
            guard let instant else { return }
            if deadline == nil || instant < deadline! { deadline = instant }
        }
        consider(cacheWakeup)
        consider(instanceWakeup)
        return deadline
    }

    /// Performs everything due at `now`: expiry, periodic and refresh queries, resolution, liveness.
    public mutating func tick(now: IOInstant) -> [Action] {
        guard started else { return [] }
        var actions: [Action] = []
        let horizon = now + configuration.batchWindow
        // The whole cache is visited only when one of its events falls within the batch window.
        let cacheDue = cacheWakeup.map { $0 <= horizon } ?? false
        var expiredAny = false
        if let wakeup = cacheWakeup, wakeup <= now {
            let before = cache.count
            cache.removeAll { _, entry in entry.expiresAt <= now }
            expiredAny = cache.count != before
        }
        let instancesDue = instanceWakeup.map { $0 <= horizon } ?? false
        // Liveness: an instance silent past the lost timeout is dropped.
        if instancesDue, let timeout = configuration.lostTimeout {
            for (name, state) in instances where state.reported != nil && now - state.lastHeard >= timeout {
                forget(instance: name, now: now)
                expiredAny = true
                // Its PTR record is forgotten too; query again soon, so a peer that was only briefly
                // unreachable is found again within seconds rather than at the next backed-off query.
                queryInterval = configuration.initialQueryInterval
                if nextQuery.map({ $0 > now + queryInterval }) ?? true { nextQuery = now + queryInterval }
            }
        }
        if expiredAny { actions += reconcile(now: now) }

        // Collect questions per link: due ones plus anything due within the batch window.
        var questions: [MulticastLink: [DNSQuestion]] = [:]
        var periodic = false

        // Refresh queries (RFC 6762 section 5.2).
        var refreshNames: [MulticastLink: Set<DNSQuestion>] = [:]
        var anyDue = false
        let everything = cacheDue ? cache.all : []
        for (key, entry) in everything where !entry.dead {
            guard let first = entry.refreshAt.first else { continue }
            if first <= now { anyDue = true }
            if first <= horizon {
                refreshNames[key.link, default: []].insert(
                    DNSQuestion(name: entry.record.name, type: entry.record.type))
            }
        }
        // Resolution queries.
        var resolveNames: Set<DNSQuestion> = []
        for (name, state) in instancesDue ? instances : [:] {
            guard let due = state.nextResolve, due <= now else { continue }
            anyDue = true
            resolveNames.formUnion(resolveQuestions(for: name, now: now))
            var updated = state
            updated.resolveAttempts += 1
            updated.nextResolve = now + .seconds(1) * (1 << min(updated.resolveAttempts, 5))
            // After the quick retries, keep asking once a minute: giving up would leave a half-known
            // instance unresolved until its PTR record's refresh, up to an hour later.
            if updated.resolveAttempts > 6 { updated.nextResolve = now + configuration.slowResolveInterval }
            store(updated, for: name)
        }
        // Liveness queries: ask for the SRV record without listing it as a known answer, so a live
        // responder must answer.
        var livenessNames: Set<DNSQuestion> = []
        var livenessChecks: [DNSName: IOInstant] = [:]
        var livenessDue = false
        for (name, state) in instancesDue ? instances : [:] where state.reported != nil {
            guard let check = livenessCheckTime(name, state) else { continue }
            if check <= now { livenessDue = true }
            if check <= horizon {
                livenessNames.insert(DNSQuestion(name: name, type: .srv))
                livenessChecks[name] = check
            }
        }
        if !periodic, let next = nextQuery, next <= now { periodic = true }
        guard periodic || anyDue || livenessDue else {
            if cacheDue { recomputeCacheWakeup() }
            if instancesDue { recomputeInstanceWakeup() }
            return actions
        }
        if !livenessNames.isEmpty { statistics.livenessQueries += 1 }
        for (name, check) in livenessChecks { instances[name]?.lastLivenessQuery = max(now, check) }
        // A periodic query nearly due rides along with a packet that goes out anyway.
        if !periodic, let next = nextQuery, next <= horizon { periodic = true }

        for link in links.sorted() {
            var list: [DNSQuestion] = []
            if periodic && !suppressedLinks.contains(link) {
                list.append(DNSQuestion(name: serviceType, type: .ptr, unicastResponse: firstQuery))
            }
            var seen = Set(list)
            for question in (refreshNames[link] ?? []).sorted(by: { "\($0)" < "\($1)" })
            where seen.insert(question).inserted {
                list.append(question)
            }
            for question in resolveNames.union(livenessNames).sorted(by: { "\($0)" < "\($1)" })
            where seen.insert(question).inserted {
                list.append(question)
            }
            questions[link] = list
        }
        // Consume the refresh points we just covered.
        for (key, entry) in everything where !entry.dead {
            if let first = entry.refreshAt.first, first <= horizon {
                cache[key]!.refreshAt.removeFirst()
            }
        }
        if cacheDue { recomputeCacheWakeup() }
        if instancesDue { recomputeInstanceWakeup() }
        if periodic {
            suppressedLinks.removeAll()
            firstQuery = false
            nextQuery = now + queryInterval
            queryInterval = min(queryInterval * 2, configuration.maximumQueryInterval)
        }
        for link in links.sorted() {
            guard let list = questions[link], !list.isEmpty else { continue }
            // Known answers only for the PTR question: SRV and TXT refreshes want fresh answers.
            let asksPTR = list.contains { $0.name == serviceType && $0.type == .ptr }
            let known = asksPTR ? knownAnswers(on: link, now: now) : []
            statistics.queriesSent += 1
            actions.append(.send(DNSMessage(questions: list, answers: known), to: .multicast(link)))
        }
        return actions
    }

    // MARK: - Cache

    private mutating func noteCacheEvent(_ instant: IOInstant) {
        if cacheWakeup == nil || instant < cacheWakeup! { cacheWakeup = instant }
    }

    /// The earliest instant an instance needs attention: resolution, a liveness check or its lost timeout.
    private func wakeup(for name: DNSName, _ state: InstanceState) -> IOInstant? {
        var earliest = state.nextResolve
        func consider(_ instant: IOInstant?) {
            guard let instant else { return }
            if earliest == nil || instant < earliest! { earliest = instant }
        }
        if state.reported != nil {
            consider(livenessCheckTime(name, state))
            if let timeout = configuration.lostTimeout { consider(state.lastHeard + timeout) }
        }
        return earliest
    }

    /// Stores an instance's state and lowers ``instanceWakeup`` if it needs attention sooner.
    private mutating func store(_ state: InstanceState, for name: DNSName) {
        instances[name] = state
        if let instant = wakeup(for: name, state), instanceWakeup == nil || instant < instanceWakeup! {
            instanceWakeup = instant
        }
    }

    private mutating func recomputeInstanceWakeup() {
        instanceWakeup = nil
        for (name, state) in instances {
            if let instant = wakeup(for: name, state), instanceWakeup == nil || instant < instanceWakeup! {
                instanceWakeup = instant
            }
        }
    }

    private mutating func recomputeCacheWakeup() {
        cacheWakeup = nil
        for (_, entry) in cache.all {
            noteCacheEvent(entry.refreshAt.first.map { min($0, entry.expiresAt) } ?? entry.expiresAt)
        }
    }

    /// PTR records for our type with more than half their TTL left (RFC 6762 section 7.1).
    private func knownAnswers(on link: MulticastLink, now: IOInstant) -> [DNSResourceRecord] {
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

    private func isRelevant(_ record: DNSResourceRecord) -> Bool {
        switch record.data {
        case .ptr: return record.name == serviceType
        case .srv, .txt:
            return record.name.parent == serviceType && record.name.labels.count == serviceType.labels.count + 1
        case .a, .aaaa: return cache.isSRVTarget(record.name)
        default: return false
        }
    }

    /// Caches the relevant records of a packet; returns the instances whose view may have changed.
    private mutating func absorb(_ records: [DNSResourceRecord], on link: MulticastLink, now: IOInstant) -> Set<DNSName>
    {
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

    private func instanceName(of record: DNSResourceRecord) -> DNSName? {
        switch record.data {
        case .ptr(let target): target
        case .srv, .txt: record.name
        default: nil
        }
    }

    private mutating func forget(instance name: DNSName, now: IOInstant) {
        let host = instances[name]?.reported?.hostName
        for (key, _) in cache.entries(named: name) { cache[key] = nil }
        for (key, _) in cache.entries(named: serviceType) where key.record.data == .ptr(name) { cache[key] = nil }
        if let host, !cache.isSRVTarget(host) {
            for (key, _) in cache.entries(named: host) { cache[key] = nil }
        }
    }

    // MARK: - Instances

    private func live(_ type: DNSRecordType, named name: DNSName) -> [(link: MulticastLink, entry: RecordCache.Entry)] {
        cache.live(type, named: name)
    }

    private func snapshot(of name: DNSName) -> DiscoveredInstance? {
        let pointerLinks = linksWithLivePointer(to: name)
        guard !pointerLinks.isEmpty,
            let srv = live(.srv, named: name).first, case .srv(_, _, let port, let target) = srv.entry.record.data,
            let txt = live(.txt, named: name).first, case .txt(let strings) = txt.entry.record.data
        else { return nil }
        var addresses = Set<DiscoveredAddress>()
        for (link, entry) in live(.a, named: target) + live(.aaaa, named: target) {
            switch entry.record.data {
            case .a(let a):
                addresses.insert(
                    DiscoveredAddress(
                        address: .v4(a), interfaceIndex: link.interfaceIndex, interfaceName: link.interfaceName))
            case .aaaa(let a):
                addresses.insert(
                    DiscoveredAddress(
                        address: .v6(a), interfaceIndex: link.interfaceIndex, interfaceName: link.interfaceName))
            default: break
            }
        }
        guard !addresses.isEmpty else { return nil }
        return DiscoveredInstance(
            name: name.labels.first ?? "", fullName: name, hostName: target, port: port, txt: strings,
            addresses: addresses.sorted(), links: pointerLinks)
    }

    private func resolveQuestions(for name: DNSName, now: IOInstant) -> [DNSQuestion] {
        var out: [DNSQuestion] = []
        if live(.srv, named: name).isEmpty { out.append(DNSQuestion(name: name, type: .srv)) }
        if live(.txt, named: name).isEmpty { out.append(DNSQuestion(name: name, type: .txt)) }
        if let srv = live(.srv, named: name).first, case .srv(_, _, _, let target) = srv.entry.record.data,
            live(.a, named: target).isEmpty && live(.aaaa, named: target).isEmpty
        {
            out.append(DNSQuestion(name: target, type: .a))
            out.append(DNSQuestion(name: target, type: .aaaa))
        }
        return out
    }

    private func livenessCheckTime(_ name: DNSName, _ state: InstanceState) -> IOInstant? {
        guard let timeout = configuration.lostTimeout else { return nil }
        // Checks at 50 %, 70 % and 90 % of the timeout since last heard; the next one not yet sent.
        for fraction in [0.5, 0.7, 0.9] {
            let at = state.lastHeard + timeout * fraction
            if let sent = state.lastLivenessQuery, sent >= at { continue }
            return at
        }
        return nil
    }

    /// Compares what is cached with what was reported and emits found, updated and lost events.
    /// Links on which a live PTR record points at `name`, sorted; a lookup per link, not a scan.
    private func linksWithLivePointer(to name: DNSName) -> [MulticastLink] {
        let pointer = DNSResourceRecord(name: serviceType, ttl: 0, data: .ptr(name))
        return links.sorted().filter { link in
            guard let entry = cache[RecordCache.key(pointer, on: link)] else { return false }
            return !entry.dead
        }
    }

    /// `only` limits the work to instances a packet touched; `nil` checks all.
    private mutating func reconcile(now: IOInstant, only: Set<DNSName>? = nil) -> [Action] {
        // Instances named by live PTR records.
        var named = Set<DNSName>()
        if let only {
            for name in only where !linksWithLivePointer(to: name).isEmpty { named.insert(name) }
        } else {
            for (key, entry) in cache.entries(named: serviceType) where !entry.dead {
                if case .ptr(let target) = key.record.data { named.insert(target) }
            }
        }
        var actions: [Action] = []
        for name in named.sorted(by: { $0.description < $1.description }) where instances[name] == nil {
            if instances.count >= configuration.maximumInstances {
                statistics.instancesDroppedLimit += 1
                continue
            }
            // Stored plainly: the loop below stores its final state (and deadline) right after.
            instances[name] = InstanceState(reported: nil, lastHeard: now, nextResolve: now)
        }
        let candidates = only.map { $0.filter { instances[$0] != nil } } ?? Set(instances.keys)
        for name in candidates.sorted(by: { $0.description < $1.description }) {
            var state = instances[name]!
            let current = named.contains(name) ? snapshot(of: name) : nil
            switch (state.reported, current) {
            case (nil, let snapshot?):
                state.reported = snapshot
                state.nextResolve = nil
                state.lastHeard = max(state.lastHeard, now)
                actions.append(.event(.found(snapshot)))
            case (let old?, let snapshot?) where old != snapshot:
                state.reported = snapshot
                // Learning the same records over a second address family is not news to the user.
                if !old.looksTheSame(as: snapshot) { actions.append(.event(.updated(snapshot))) }
            case (let old?, nil):
                actions.append(.event(.lost(old)))
                state.reported = nil
                state.lastLivenessQuery = nil
                if !named.contains(name) {
                    instances[name] = nil
                    continue
                }
                state.resolveAttempts = 0
                state.nextResolve = now
            case (nil, nil):
                if !named.contains(name) {
                    instances[name] = nil
                    continue
                }
                let wanted = resolveQuestions(for: name, now: now)
                if wanted != state.lastResolveQuestions {
                    state.lastResolveQuestions = wanted
                    state.resolveAttempts = 0
                    state.nextResolve = now
                }
            default:
                break
            }
            store(state, for: name)
        }
        return actions
    }
}
