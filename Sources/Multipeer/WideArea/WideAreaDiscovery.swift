package import Logging
package import MulticastDNS
package import MultipeerIO

/// Wide-area DNS-SD for one network: finds the domains (given, or by RFC 6763 section 11 enumeration) and the
/// zone to update, keeps this peer's registrations (registered at once, refreshed at a third of their lease,
/// removed when they stop), and runs polling browsers. Failures are logged and reported once per change on the
/// network's events; multicast DNS on the link goes on regardless.
package actor WideAreaDiscovery {
    /// The domains in use.
    struct Domains: Sendable {
        /// Where this peer registers (nil: browse only).
        var registration: DNSName?
        /// The zone that holds the registration domain, which updates name.
        var zone: DNSName?
        /// Where browsers look.
        var browsing: [DNSName]
    }

    /// The most browsing domains enumeration may give.
    static let maximumDomains = 8

    nonisolated let configuration: WideAreaConfiguration
    nonisolated let client: UnicastDNSClient
    nonisolated let loop: EventLoop
    private let logger: Logger
    private let report: @Sendable (PeerNetwork.Event) -> Void
    private let addresses: @Sendable () -> [IPAddress]
    private var domains: Domains?
    private var registrations: [Int: Registration] = [:]
    private var nextID = 0
    private var refresher: Task<Void, Never>?
    private var isShutDown = false
    /// Whether the last registration attempt failed, so a run of failures is reported once.
    private var registrationFailing = false {
        didSet {
            // A failure while the refresher sleeps its long sleep: start it again with the short retry delay.
            if registrationFailing && !oldValue && !registrations.isEmpty {
                refresher?.cancel()
                refresher = nil
                startRefresher()
            }
        }
    }
    /// The next retry's delay while registrations fail.
    private var retryDelay: Duration = .seconds(1)

    private struct Registration {
        var records: WideAreaRecords
        var registered = false
    }

    package init(
        configuration: WideAreaConfiguration, loop: EventLoop, logger: Logger,
        addresses: @escaping @Sendable () -> [IPAddress], report: @escaping @Sendable (PeerNetwork.Event) -> Void
    ) {
        self.configuration = configuration
        self.loop = loop
        self.logger = logger
        self.addresses = addresses
        self.report = report
        var timing = UnicastDNSClient.Timing()
        timing.firstWait = configuration.queryTimeout
        client = UnicastDNSClient(server: configuration.server, loop: loop, timing: timing)
    }

    // MARK: Domains

    /// The domains, found on first use (and again after a failure).
    func resolveDomains() async throws(WideAreaError) -> Domains {
        if let domains { return domains }
        var registration = configuration.domain
        var browsing = configuration.domain.map { [$0] } ?? []
        if registration == nil {
            guard let parent = configuration.enumerationDomain ?? WideAreaConfiguration.systemResolverSettings().domain
            else {
                throw WideAreaError(
                    .invalidConfiguration,
                    "no wide-area domain is set and none can be enumerated (no enumeration domain, and "
                        + "/etc/resolv.conf names no domain or search entry)")
            }
            registration = try await enumerate("dr", under: parent).first
            if registration == nil { registration = try await enumerate("r", under: parent).first }
            for label in ["lb", "db", "b"] {
                for domain in try await enumerate(label, under: parent)
                where !browsing.contains(domain) && browsing.count < Self.maximumDomains {
                    browsing.append(domain)
                }
            }
            if let registration, !browsing.contains(registration), browsing.count < Self.maximumDomains {
                browsing.append(registration)
            }
            guard !browsing.isEmpty else {
                throw WideAreaError(
                    .invalidConfiguration,
                    "the network publishes no DNS-SD domain under \(parent): no PTR at b, db, lb, r or dr"
                        + "._dns-sd._udp.\(parent) (RFC 6763 section 11)")
            }
            let listed = browsing.map(\.description).joined(separator: " ")
            logger.info(
                "wide-area domains under \(parent): registration \(registration?.description ?? "none"), browsing \(listed)"
            )
        }
        var zone: DNSName?
        if let registration, configuration.key != nil { zone = try await self.zone(of: registration) }
        let found = Domains(registration: registration, zone: zone, browsing: browsing)
        domains = found
        return found
    }

    /// The domains an enumeration PTR (`label._dns-sd._udp.PARENT`) lists.
    private func enumerate(_ label: String, under parent: DNSName) async throws(WideAreaError) -> [DNSName] {
        let name = DNSName(uncheckedLabels: [label, "_dns-sd", "_udp"] + parent.labels)
        let answer = try await client.query(name, .ptr)
        var domains: [DNSName] = []
        for record in answer.answers where record.name == name {
            if case .ptr(let domain) = record.data, !domain.labels.isEmpty, !domains.contains(domain),
                domains.count < Self.maximumDomains
            {
                domains.append(domain)
            }
        }
        return domains
    }

    /// The zone that holds `domain`: the owner of the SOA record the server gives for it (in the answer when the
    /// domain is the zone's apex, in the authority section otherwise).
    private func zone(of domain: DNSName) async throws(WideAreaError) -> DNSName {
        let answer = try await client.query(domain, .soa)
        guard answer.responseCode == 0 || answer.responseCode == 3 else {
            throw WideAreaError(
                .refused(responseCode: answer.responseCode, signatureError: nil),
                "the DNS server \(client.server) answered the SOA question for \(domain) with "
                    + WideAreaError.responseCodeName(answer.responseCode) + ": it does not serve that domain")
        }
        for record in answer.answers + answer.authorities where record.type == .soa && domain.hasSuffix(record.name) {
            return record.name
        }
        throw WideAreaError(
            .invalidConfiguration,
            "the DNS server \(client.server) names no zone for \(domain) (no SOA record in its answer): it is not "
                + "authoritative for it")
    }

    // MARK: Registrations

    /// Registers a service now and keeps it registered until ``unregister(_:)``; returns its handle.
    package func register(
        serviceType: ServiceType, instance: String, host: String, port: UInt16, txt: [[UInt8]]
    ) async -> Int {
        nextID += 1
        let id = nextID
        registrations[id] = Registration(
            records: WideAreaRecords(
                domain: .root, serviceType: serviceType, instance: instance, host: host, port: port, txt: txt,
                addresses: [], ttl: configuration.recordTTL))
        await refresh(id)
        startRefresher()
        return id
    }

    /// Replaces a registration's TXT record (the application's discovery info, or the relayed address).
    package func update(_ id: Int, txt: [[UInt8]]) async {
        guard registrations[id] != nil else { return }
        registrations[id]?.records.txt = txt
        await refresh(id)
    }

    /// Removes a registration from the zone (at most the client's tries; a failure is reported).
    package func unregister(_ id: Int) async {
        guard let registration = registrations.removeValue(forKey: id) else { return }
        if registrations.isEmpty {
            refresher?.cancel()
            refresher = nil
        }
        guard registration.registered, let key = configuration.key, let zone = domains?.zone else { return }
        let sharesHost = registrations.values.contains { $0.records.host == registration.records.host }
        do {
            _ = try await client.update(
                registration.records.removal(zone: zone, keepHost: sharesHost), key: key, zone: zone)
            logger.info("wide-area: removed \(registration.records.instanceName)")
        } catch {
            logger.warning("wide-area: cannot remove \(registration.records.instanceName): \(error.reason)")
            report(.wideAreaFailed(error))
        }
    }

    /// Sends one registration's update with a fresh lease and the current addresses.
    private func refresh(_ id: Int) async {
        guard !isShutDown, let key = configuration.key, var registration = registrations[id] else { return }
        do throws(WideAreaError) {
            let domains = try await resolveDomains()
            guard let domain = domains.registration, let zone = domains.zone else {
                throw WideAreaError(.invalidConfiguration, "the network publishes no registration domain")
            }
            registration.records.domain = domain
            registration.records.addresses = addresses()
            try registration.records.validate()
            let leaseEnd = UnicastDNSClient.unixTime() + UInt64(configuration.lease.components.seconds)
            var records = registration.records
            records.txt = WideAreaLease.stamp(records.txt, until: leaseEnd)
            _ = try await client.update(records.registration(zone: zone), key: key, zone: zone)
            guard registrations[id] != nil else { return }  // unregistered meanwhile: its removal follows
            let first = !registration.registered
            registration.registered = true
            registrations[id]?.registered = true
            registrations[id]?.records.domain = domain
            if first || registrationFailing {
                let addresses = records.addresses.map(\.description).joined(separator: " ")
                logger.info("wide-area: registered \(records.instanceName) at \(addresses) until \(leaseEnd)")
                report(.wideAreaRegistered(instance: records.instanceName.description))
            }
            registrationFailing = false
        } catch {
            if case .unreachable = error.code { domains = nil }
            if !registrationFailing {
                logger.warning("wide-area: cannot register \(registration.records.instance): \(error.reason)")
                report(.wideAreaFailed(error))
            }
            registrationFailing = true
        }
    }

    private func startRefresher() {
        guard refresher == nil, !isShutDown else { return }
        let loop = loop
        refresher = Task { [weak self] in
            while let interval = await self?.nextRefresh(), await SessionTimer.sleep(for: interval, on: loop) {
                guard let self, await self.refreshAll() else { return }
            }
        }
    }

    /// How long the refresher waits: a third of the lease; after a failed registration 1, 2, 4 ... s (at most a
    /// third of the lease), so a server that was briefly away, or slow to answer, has the records again soon.
    private func nextRefresh() -> Duration {
        let regular = configuration.lease / 3
        guard registrationFailing else {
            retryDelay = .seconds(1)
            return regular
        }
        defer { retryDelay = min(retryDelay * 2, regular) }
        return min(retryDelay, regular)
    }

    /// Refreshes every registration; false once none is left.
    private func refreshAll() async -> Bool {
        for id in registrations.keys.sorted() { await refresh(id) }
        return !registrations.isEmpty && !isShutDown
    }

    // MARK: Browsing

    /// Starts polling for a service type in every browsing domain; the events end when the browse is stopped.
    package nonisolated func browse(_ type: ServiceType, bufferLimit: Int) -> WideAreaBrowse {
        let (events, sink) = AsyncStream<ServiceBrowserEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(bufferLimit))
        let task = Task { [weak self] in
            await self?.runBrowse(type, sink: sink)
            sink.finish()
        }
        return WideAreaBrowse(events: events, task: task)
    }

    private func runBrowse(_ type: ServiceType, sink: AsyncStream<ServiceBrowserEvent>.Continuation) async {
        let poller = WideAreaPoller(client: client, maximumInstances: configuration.maximumInstances)
        var states: [DNSName: WideAreaBrowseState] = [:]
        var failing = false
        var ignoredReported = 0
        repeat {
            guard !Task.isCancelled, !isShutDown else { return }
            var failure: WideAreaError?
            do throws(WideAreaError) {
                let domains = try await resolveDomains()
                for domain in domains.browsing {
                    let typeName = DNSName(uncheckedLabels: Array(type.domainName.labels.dropLast()) + domain.labels)
                    let result = await poller.poll(typeName: typeName)
                    guard !Task.isCancelled else { return }
                    failure = failure ?? result.failure
                    if result.ignored > ignoredReported {
                        let limit = configuration.maximumInstances
                        logger.warning(
                            "wide-area: \(typeName) lists more than \(limit) instances; \(result.ignored) ignored")
                        ignoredReported = result.ignored
                    }
                    let now = UnicastDNSClient.unixTime()
                    var state = states[domain] ?? WideAreaBrowseState(serviceType: type, domain: domain)
                    for event in state.apply(result.poll, now: now) { sink.yield(event) }
                    states[domain] = state
                    if domain == domains.registration {
                        await removeExpired(WideAreaBrowseState.expired(in: result.poll, now: now), type: typeName)
                    }
                }
            } catch {
                failure = error
                if case .unreachable = error.code { domains = nil }
                let now = UnicastDNSClient.unixTime()
                for (domain, var state) in states {
                    for event in state.expire(now: now) { sink.yield(event) }
                    states[domain] = state
                }
            }
            if let failure, !failing {
                logger.warning("wide-area: browsing \(type) failed: \(failure.reason)")
                report(.wideAreaFailed(failure))
            } else if failure == nil, failing {
                logger.info("wide-area: browsing \(type) works again")
            }
            failing = failure != nil
        } while await SessionTimer.sleep(for: configuration.pollInterval, on: loop)
    }

    /// Removes instances whose lease ran out from the zone, each only if its TXT record is still the one that ran
    /// out (a peer that came back meanwhile keeps its registration).
    private func removeExpired(_ instances: [WideAreaBrowseState.Instance], type typeName: DNSName) async {
        guard !instances.isEmpty, let key = configuration.key, let zone = domains?.zone else { return }
        for instance in instances {
            let update = WideAreaRecords.removalOfExpired(
                instanceName: instance.name, typeName: typeName, txt: instance.txt, zone: zone)
            do {
                _ = try await client.update(update, key: key, zone: zone)
                logger.info("wide-area: removed \(instance.name), whose lease ran out")
            } catch {
                // YXRRSET/NXRRSET: the peer refreshed, or another browser removed it first.
                logger.debug("wide-area: did not remove \(instance.name): \(error.reason)")
            }
        }
    }

    /// Stops refreshing and browsing; registrations still held are removed from the zone.
    package func shutdown() async {
        for id in registrations.keys.sorted() { await unregister(id) }
        isShutDown = true
        refresher?.cancel()
        refresher = nil
    }
}

/// A running wide-area browse.
package struct WideAreaBrowse: Sendable {
    /// Found, updated and lost, as multicast DNS reports them (addresses carry the domain as their interface).
    package let events: AsyncStream<ServiceBrowserEvent>
    let task: Task<Void, Never>

    /// Stops polling; ``events`` ends.
    package func stop() { task.cancel() }
}
