import MultipeerIO

// Instances (RFC 6763 section 4): resolving a PTR record's instance to SRV, TXT and addresses, reporting it
// found, updated or lost, and checking that a resolved instance still answers.
extension BrowserStateMachine {
    /// The earliest instant an instance needs attention: resolution, a liveness check or its lost timeout.
    func wakeup(for name: DNSName, _ state: InstanceState) -> IOInstant? {
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
    mutating func store(_ state: InstanceState, for name: DNSName) {
        instances[name] = state
        if let instant = wakeup(for: name, state), instanceWakeup == nil || instant < instanceWakeup! {
            instanceWakeup = instant
        }
    }

    mutating func recomputeInstanceWakeup() {
        instanceWakeup = nil
        for (name, state) in instances {
            if let instant = wakeup(for: name, state), instanceWakeup == nil || instant < instanceWakeup! {
                instanceWakeup = instant
            }
        }
    }

    func live(_ type: DNSRecordType, named name: DNSName) -> [(link: MulticastLink, entry: RecordCache.Entry)] {
        cache.live(type, named: name)
    }

    func snapshot(of name: DNSName) -> DiscoveredInstance? {
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

    func resolveQuestions(for name: DNSName, now: IOInstant) -> [DNSQuestion] {
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

    func livenessCheckTime(_ name: DNSName, _ state: InstanceState) -> IOInstant? {
        guard let timeout = configuration.lostTimeout else { return nil }
        // Checks at 50 %, 70 % and 90 % of the timeout since last heard; the next one not yet sent.
        for fraction in [0.5, 0.7, 0.9] {
            let at = state.lastHeard + timeout * fraction
            if let sent = state.lastLivenessQuery, sent >= at { continue }
            return at
        }
        return nil
    }

    /// Links on which a live PTR record points at `name`, sorted; a lookup per link, not a scan.
    func linksWithLivePointer(to name: DNSName) -> [MulticastLink] {
        let pointer = DNSResourceRecord(name: serviceType, ttl: 0, data: .ptr(name))
        return links.sorted().filter { link in
            guard let entry = cache[RecordCache.key(pointer, on: link)] else { return false }
            return !entry.dead
        }
    }

    /// Compares what is cached with what was reported and emits found, updated and lost events.
    /// `only` limits the work to instances a packet touched; `nil` checks all.
    mutating func reconcile(now: IOInstant, only: Set<DNSName>? = nil) -> [Action] {
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
