public import MultipeerIO

/// The multicast DNS responder (RFC 6762 sections 6-10, RFC 6763 section 12) as a pure state machine.
///
/// It owns the records of the registered services and the host, decides what to send and when, and never
/// touches a socket or a clock: every input carries `now`, every output is an ``Action``, and the owner
/// calls ``tick(now:)`` at ``nextDeadline``.
///
/// The concerns live in files of their own: probing and probe defense (`+Probing`), announcing
/// (`+Announcing`), goodbyes (`+Goodbye`), answering queries with its delays and rate limits (`+Answering`),
/// conflicts in received responses (`+Conflicts`), and the records themselves (`+Records`).
public struct ResponderStateMachine {
    /// What the owner must do.
    public enum Action: Hashable, Sendable {
        /// Send a message.
        case send(DNSMessage, to: MDNSDestination)
        /// Report an event to the user.
        case event(ResponderEvent)
    }

    /// The configuration.
    public let configuration: ResponderConfiguration
    /// The host name our address records are published under, such as `linux-4f2a.local.`.
    public var hostName: DNSName { host.name }
    var host: HostNameClaim
    /// The registered services, each with its place in the probe, announce and goodbye timeline.
    var entries: [ServiceID: RegisteredService] = [:]
    private var nextServiceID = 0
    /// The links we run on and the addresses of their interfaces.
    var links: [MulticastLink: [IPAddress]] = [:]
    var history = MulticastHistory()
    /// Records waiting to be multicast, per link, keyed by record identity.
    var pending: [MulticastLink: [DNSResourceRecord: ScheduledAnswer]] = [:]
    var unicastReplies: [UnicastReply] = []
    var unicastBudget: UnicastAnswerBudget
    var conflicts = ConflictRateLimiter()
    var random: SplitMix64
    /// Events raised while handling input, drained into the actions of the same call.
    var pendingEvents: [ResponderEvent] = []

    /// Counters for tests, benchmarks and diagnostics.
    public internal(set) var statistics = Statistics()

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
        host = try HostNameClaim(label: hostLabel)
        random = seed.map(SplitMix64.init(seed:)) ?? SplitMix64()
        unicastBudget = UnicastAnswerBudget(perSecond: configuration.unicastAnswersPerSecond)
    }

    // MARK: - Inputs

    /// Sets the links and the addresses of their interfaces (both families of an interface share one list).
    /// Established services are announced again on every link; new links get their answers from then on.
    public mutating func setLinks(_ newLinks: [MulticastLink: [IPAddress]], now: IOInstant) -> [Action] {
        guard newLinks != links else { return [] }
        links = newLinks
        history.keepLinks(newLinks)
        forgetUnpublishedRecords()
        for link in pending.keys where newLinks[link] == nil { pending[link] = nil }
        unicastReplies.removeAll { newLinks[$0.destination.link] == nil }
        for id in entries.keys where entries[id]!.isClaimed {
            entries[id]!.phase = .announcing(sent: 0, next: now)
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
        entries[id] = RegisteredService(
            service: service, instanceName: name, phase: .probing(sent: 0, next: now + delay))
        return (id, tick(now: now))
    }

    /// Replaces a service's TXT record and announces the new one (RFC 6762 section 8.4).
    public mutating func updateTXT(_ txt: [[UInt8]], for id: ServiceID, now: IOInstant) -> [Action] {
        guard var entry = entries[id], entry.service.txt != txt else { return [] }
        entry.service.txt = txt
        entries[id] = entry
        forgetUnpublishedRecords()
        if entry.isClaimed {
            entry.updatePending = true
            let next = entry.lastUpdateAnnouncement.map { max(now, $0 + configuration.recordRateLimit) } ?? now
            entry.phase = .announcing(sent: 0, next: next)
        }
        entries[id] = entry
        return tick(now: now)
    }

    /// Withdraws a service: goodbye packets (TTL 0) go out if it was ever announced, then
    /// ``ResponderEvent/unregistered(_:)`` is reported.
    public mutating func unregister(_ id: ServiceID, now: IOInstant) -> [Action] {
        guard var entry = entries[id], !entry.isGoingAway else { return [] }
        if !entry.announcedOnce {
            entries[id] = nil
            return [.event(.unregistered(id))]
        }
        entry.phase = .goodbye(sent: 0, next: now)
        entries[id] = entry
        return tick(now: now)
    }

    /// `true` once no service is registered or saying goodbye and no unicast reply waits.
    public var isIdle: Bool { entries.isEmpty && unicastReplies.isEmpty }

    /// The current instance name of a service.
    public func instanceName(of id: ServiceID) -> String? { entries[id]?.service.instanceName }

    /// The earliest time ``tick(now:)`` has work to do.
    public var nextDeadline: IOInstant? {
        var deadline: IOInstant?
        func consider(_ instant: IOInstant) {
            if deadline == nil || instant < deadline! { deadline = instant }
        }
        for entry in entries.values { if let next = entry.nextStep { consider(next) } }
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
        flushUnicastReplies(now: now, into: &actions)
        return actions
    }

    /// Takes the service's next timeline step if it is due.
    mutating func advance(_ id: ServiceID, now: IOInstant, into actions: inout [Action]) {
        guard let entry = entries[id] else { return }
        switch entry.phase {
        case .probing(let sent, let next) where next <= now:
            probe(id, sent: sent, now: now, into: &actions)
        case .announcing(let sent, let next) where next <= now:
            announce(id, sent: sent, now: now, into: &actions)
        case .goodbye(let sent, let next) where next <= now:
            sayGoodbye(id, sent: sent, now: now, into: &actions)
        default:
            break
        }
    }

    /// Counts and emits a message.
    mutating func send(_ message: DNSMessage, _ destination: MDNSDestination, _ actions: inout [Action]) {
        statistics.messagesSent += 1
        actions.append(.send(message, to: destination))
    }
}
