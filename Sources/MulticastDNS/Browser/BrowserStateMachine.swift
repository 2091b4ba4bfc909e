public import MultipeerIO

/// A DNS-SD browser (RFC 6762 section 5, RFC 6763 section 4) as a pure state machine.
///
/// It queries continuously with a doubling interval and known answers, caches records with their TTLs,
/// refreshes them at 80-95 % of their TTL, resolves instances to SRV, TXT and addresses, de-duplicates
/// them across links and address families, and checks that resolved instances still answer. It never
/// touches a socket or a clock: inputs carry `now`, outputs are ``Action``s, the owner calls
/// ``tick(now:)`` at ``nextDeadline``.
///
/// The concerns live in files of their own: the record cache (`+Cache`) and the instances it resolves and
/// reports (`+Instances`); querying is here, in ``tick(now:)``.
public struct BrowserStateMachine {
    /// What the owner must do.
    public enum Action: Hashable, Sendable {
        /// Send a query (multicast on the link).
        case send(DNSMessage, to: MDNSDestination)
        /// Report an event.
        case event(BrowserEvent)
    }

    /// The service type browsed, such as `_chat._tcp.local.`.
    public let serviceType: DNSName
    /// The configuration.
    public let configuration: BrowserConfiguration
    var links: Set<MulticastLink> = []
    var cache = RecordCache()
    /// No cache entry expires or needs a refresh before this instant (it may be early, never late).
    var cacheWakeup: IOInstant?
    /// Links where another querier just asked our PTR question for us (RFC 6762 section 7.3).
    var suppressedLinks: Set<MulticastLink> = []
    /// No instance needs resolving, a liveness check or a lost-timeout check before this instant (it may be
    /// early, never late), so a packet does not cost a pass over every instance.
    var instanceWakeup: IOInstant?
    var instances: [DNSName: InstanceState] = [:]
    var nextQuery: IOInstant?
    var queryInterval: Duration
    var firstQuery = true
    var random: SplitMix64
    var started = false
    /// Counters for tests, benchmarks and diagnostics.
    public internal(set) var statistics = Statistics()

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
}
