internal import Glibc
internal import Logging
import MultipeerIO

/// The owner of the sockets, the interface monitor, the responder and the browsers: it feeds packets and
/// timer ticks to the state machines and performs the actions they return.
///
/// Safety of `@unchecked Sendable`: every stored property except `counters` is touched only on `loop`'s
/// thread (each entry point is either called through `loop.execute`/`submit` or asserts `inEventLoop`);
/// `counters` is a `Lock`.
final class MulticastDNSEngine: @unchecked Sendable {
    struct BrowserSlot {
        var machine: BrowserStateMachine
        var serviceType: ServiceType
        var continuation: AsyncStream<ServiceBrowserEvent>.Continuation
    }

    struct AdvertisementSlot {
        var continuation: AsyncStream<AdvertisementEvent>.Continuation
        var name: SharedName
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        var registeredWaiters: [CheckedContinuation<String, Never>] = []
        var registeredName: String?
    }

    let loop: EventLoop
    let configuration: DiscoveryConfiguration
    /// The application's logger for discovery (metadata `area` = `discovery`).
    let logger: Logger
    private var socket4: UDPSocket?
    private var socket6: UDPSocket?
    private var monitor: InterfaceMonitor?
    private var links: [MulticastLink: [IPAddress]] = [:]
    private var responder: ResponderStateMachine
    private var browsers: [Int: BrowserSlot] = [:]
    private var nextBrowserID = 0
    private var advertisements: [ResponderStateMachine.ServiceID: AdvertisementSlot] = [:]
    private var timer: TimerID?
    private var timerDeadline: IOInstant?
    private let decoder = DNSMessageDecoder()
    private let encoder = DNSMessageEncoder()
    private var closed = false
    /// `true` once ``close()`` ran. Loop thread only.
    var isClosed: Bool { closed }
    let counters = Lock(DiscoveryStatistics())

    init(loop: EventLoop, configuration: DiscoveryConfiguration, logger: Logger) throws(DiscoveryError) {
        self.loop = loop
        self.configuration = configuration
        self.logger = logger.area(.discovery)
        let label = configuration.hostLabel ?? MulticastDNSEngine.defaultHostLabel()
        do {
            responder = try ResponderStateMachine(hostLabel: label, configuration: configuration.responder)
        } catch {
            throw .invalidHostLabel(label, error)
        }
    }

    /// `<hostname>-<6 hex digits>`, reduced to letters, digits and hyphens.
    static func defaultHostLabel() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, buffer.count - 1)
        let raw = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var label = String(raw.lowercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "-" }.prefix(40))
        while label.hasPrefix("-") { label.removeFirst() }
        while label.hasSuffix("-") { label.removeLast() }
        if label.isEmpty { label = "peer" }
        let suffix = String(UInt32.random(in: 0...0xff_ffff), radix: 16)
        return label + "-" + String(repeating: "0", count: 6 - suffix.count) + suffix
    }

    // MARK: - Lifecycle (loop thread)

    func open() throws(DiscoveryError) {
        precondition(loop.inEventLoop)
        var options = UDPSocket.Options()
        options.reuseAddress = true
        options.reusePort = true
        options.multicastHops = 255
        options.multicastLoopback = true
        do {
            if configuration.useIPv4 {
                let socket = try UDPSocket(family: .ipv4, loop: loop, options: options)
                try socket.bind(to: SocketAddress(.v4(.any), port: mdnsPort))
                socket.setReceiveHandler { [unowned self] datagram in self.receive(datagram, isIPv6: false) }
                socket4 = socket
            }
            if configuration.useIPv6 && configuration.interfaces != .loopbackOnly {
                let socket = try UDPSocket(family: .ipv6, loop: loop, options: options)
                try socket.bind(to: SocketAddress(.v6(.any), port: mdnsPort))
                socket.setReceiveHandler { [unowned self] datagram in self.receive(datagram, isIPv6: true) }
                socket6 = socket
            }
            let monitor = try InterfaceMonitor(loop: loop, pollInterval: configuration.interfacePollInterval)
            self.monitor = monitor
            monitor.start { [unowned self] changes in self.interfacesChanged(changes.current) }
        } catch {
            close()
            throw .socket(error, while: "opening the mDNS sockets")
        }
    }

    func close() {
        precondition(loop.inEventLoop)
        guard !closed else { return }
        closed = true
        monitor?.stop()
        socket4?.close()
        socket6?.close()
        if let timer { loop.cancelTimer(timer) }
        for slot in browsers.values { slot.continuation.finish() }
        browsers.removeAll()
        for slot in advertisements.values {
            slot.continuation.finish()
            for waiter in slot.stopWaiters { waiter.resume() }
            for waiter in slot.registeredWaiters { waiter.resume(returning: slot.registeredName ?? "") }
        }
        advertisements.removeAll()
    }

    // MARK: - Interfaces

    static func selectLinks(
        from interfaces: [NetworkInterface], configuration: DiscoveryConfiguration
    ) -> [MulticastLink: [IPAddress]] {
        var result: [MulticastLink: [IPAddress]] = [:]
        for interface in interfaces where interface.isUp {
            switch configuration.interfaces {
            case .all:
                guard interface.supportsMulticast && !interface.isLoopback else { continue }
            case .named(let names):
                guard names.contains(interface.name) else { continue }
            case .loopbackOnly:
                guard interface.isLoopback else { continue }
            }
            let addresses = interface.addresses.map(\.address)
            let hasV4 = addresses.contains { if case .v4 = $0 { true } else { false } }
            let hasV6 = addresses.contains { if case .v6 = $0 { true } else { false } }
            if configuration.useIPv4 && hasV4 {
                result[MulticastLink(interfaceIndex: interface.index, interfaceName: interface.name, isIPv6: false)] =
                    addresses
            }
            // IPv6 multicast is not looped back on Linux's loopback interface, so loopback stays IPv4.
            if configuration.useIPv6 && hasV6 && !interface.isLoopback {
                result[MulticastLink(interfaceIndex: interface.index, interfaceName: interface.name, isIPv6: true)] =
                    addresses
            }
        }
        return result
    }

    private func interfacesChanged(_ interfaces: [NetworkInterface]) {
        let newLinks = MulticastDNSEngine.selectLinks(from: interfaces, configuration: configuration)
        guard newLinks != links else { return }
        for link in links.keys where newLinks[link] == nil {
            // The interface may already be gone, in which case the kernel dropped the membership itself.
            try? socket(for: link)?.leaveMulticastGroup(group(for: link), interfaceIndex: link.interfaceIndex)
        }
        for link in newLinks.keys where links[link] == nil {
            do {
                try socket(for: link)?.joinMulticastGroup(group(for: link), interfaceIndex: link.interfaceIndex)
            } catch {
                counters.withLock { $0.lastError = "joining \(group(for: link)) on \(link): \(error)" }
                logger.warning("cannot join \(group(for: link)) on \(link): \(error)")
            }
        }
        logger.info("links: \(newLinks.keys.sorted().map { "\($0)" }.joined(separator: ", "))")
        links = newLinks
        counters.withLock { $0.links = newLinks.keys.sorted() }
        let now = loop.clock.now()
        perform(responder.setLinks(newLinks, now: now))
        for id in browsers.keys {
            let actions = browsers[id]!.machine.setLinks(Set(newLinks.keys), now: now)
            perform(actions, browser: id)
        }
        reschedule()
    }

    private func socket(for link: MulticastLink) -> UDPSocket? { link.isIPv6 ? socket6 : socket4 }

    private func group(for link: MulticastLink) -> IPAddress {
        link.isIPv6 ? .v6(.mdnsGroup) : .v4(.mdnsGroup)
    }

    // MARK: - Packets

    private func receive(_ datagram: UDPDatagram, isIPv6: Bool) {
        let link = links.keys.first { $0.interfaceIndex == datagram.interfaceIndex && $0.isIPv6 == isIPv6 }
        guard let link else {
            counters.withLock { $0.packetsIgnored += 1 }
            return
        }
        let message: DNSMessage
        do {
            guard !datagram.truncated else {
                throw DNSDecodingError.messageTooLarge(
                    size: datagram.bytes.count, limit: decoder.limits.maximumMessageSize)
            }
            message = try decoder.decode(datagram.bytes)
        } catch {
            counters.withLock {
                $0.packetsMalformed += 1
                $0.lastMalformed = "\(datagram.source): \(error)"
            }
            logger.debug("malformed packet from \(datagram.source) ignored: \(error)")
            return
        }
        counters.withLock { $0.packetsReceived += 1 }
        logger.trace(
            """
            received \(datagram.bytes.count) bytes from \(datagram.source) on \(link): \
            \(message.questions.count) questions, \(message.answers.count) answers
            """)
        let source = MDNSEndpoint(address: datagram.source.address, port: datagram.source.port)
        let now = loop.clock.now()
        perform(responder.receive(message, from: source, on: link, now: now))
        for id in browsers.keys {
            perform(browsers[id]!.machine.receive(message, from: source, on: link, now: now), browser: id)
        }
        reschedule()
    }

    private func send(_ message: DNSMessage, to destination: MDNSDestination) {
        let link = destination.link
        guard let socket = socket(for: link) else { return }
        let target: SocketAddress
        switch destination {
        case .multicast:
            target = SocketAddress(group(for: link), port: mdnsPort, scopeID: link.isIPv6 ? link.interfaceIndex : 0)
        case .unicast(let endpoint, _):
            let scope: UInt32 = if case .v6(let a) = endpoint.address, a.isLinkLocal { link.interfaceIndex } else { 0 }
            target = SocketAddress(endpoint.address, port: endpoint.port, scopeID: scope)
        }
        do {
            for packet in try encoder.encode(message, splittingAt: configuration.responder.maximumPacketSize) {
                let accepted = try socket.send(packet, to: target, interfaceIndex: link.interfaceIndex)
                counters.withLock {
                    if accepted {
                        $0.packetsSent += 1
                        $0.bytesSent += packet.count
                    } else {
                        $0.sendsDropped += 1
                    }
                }
            }
        } catch {
            counters.withLock {
                $0.sendErrors += 1
                $0.lastError = "sending to \(target) on \(link): \(error)"
            }
            logger.warning("sending to \(target) on \(link) failed: \(error)")
        }
    }

    // MARK: - Actions

    private func perform(_ actions: [ResponderStateMachine.Action]) {
        for action in actions {
            switch action {
            case .send(let message, let destination): send(message, to: destination)
            case .event(let event): deliver(event)
            }
        }
    }

    private func perform(_ actions: [BrowserStateMachine.Action], browser id: Int) {
        for action in actions {
            switch action {
            case .send(let message, let destination): send(message, to: destination)
            case .event(let event):
                guard let slot = browsers[id] else { continue }
                let mapped: ServiceBrowserEvent
                switch event {
                case .found(let instance): mapped = .found(DiscoveredService(instance, type: slot.serviceType))
                case .updated(let instance): mapped = .updated(DiscoveredService(instance, type: slot.serviceType))
                case .lost(let instance): mapped = .lost(DiscoveredService(instance, type: slot.serviceType))
                }
                logger.info("\(Self.describe(mapped))", metadata: ["peer": "\(mapped.service.name)"])
                if case .dropped = slot.continuation.yield(mapped) { counters.withLock { $0.eventsDropped += 1 } }
            }
        }
    }

    /// A browse event for the log: what happened, to which instance, where.
    static func describe(_ event: ServiceBrowserEvent) -> String {
        let (verb, service): (String, DiscoveredService) =
            switch event {
            case .found(let service): ("found", service)
            case .updated(let service): ("updated", service)
            case .lost(let service): ("lost", service)
            }
        let addresses = service.addresses.map { "\($0.address)" }.joined(separator: " ")
        return "\(verb) '\(service.name)' \(service.serviceType) at \(service.hostName):\(service.port) [\(addresses)]"
    }

    private func deliver(_ event: ResponderEvent) {
        switch event {
        case .registered(let id, let name):
            logger.info("advertising '\(name)': probed and announced", metadata: ["peer": "\(name)"])
            guard var slot = advertisements[id] else { return }
            slot.name.value = name
            slot.registeredName = name
            for waiter in slot.registeredWaiters { waiter.resume(returning: name) }
            slot.registeredWaiters.removeAll()
            advertisements[id] = slot
            slot.continuation.yield(.registered(name: name))
        case .renamed(let id, let from, let to):
            logger.warning("another host uses the name '\(from)': renamed to '\(to)'", metadata: ["peer": "\(to)"])
            guard let slot = advertisements[id] else { return }
            slot.name.value = to
            // The new name is not claimed yet: registered() waits for its announcement.
            advertisements[id]!.registeredName = nil
            slot.continuation.yield(.renamed(from: from, to: to))
        case .hostRenamed(let from, let to):
            logger.warning("another host uses the host name '\(from)': renamed to '\(to)'")
            for slot in advertisements.values { slot.continuation.yield(.hostRenamed(from: from, to: to)) }
        case .unregistered(let id):
            guard let slot = advertisements.removeValue(forKey: id) else { return }
            slot.continuation.yield(.stopped)
            slot.continuation.finish()
            for waiter in slot.stopWaiters { waiter.resume() }
            for waiter in slot.registeredWaiters { waiter.resume(returning: slot.registeredName ?? "") }
        }
    }

    // MARK: - Timer

    private func reschedule() {
        guard !closed else { return }
        var deadline = responder.nextDeadline
        for slot in browsers.values {
            if let d = slot.machine.nextDeadline, deadline == nil || d < deadline! { deadline = d }
        }
        guard deadline != timerDeadline else { return }
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        timerDeadline = deadline
        guard let deadline else { return }
        timer = loop.scheduleTimer(at: deadline) { [unowned self] in self.fire() }
    }

    private func fire() {
        timer = nil
        timerDeadline = nil
        let now = loop.clock.now()
        perform(responder.tick(now: now))
        for id in browsers.keys { perform(browsers[id]!.machine.tick(now: now), browser: id) }
        reschedule()
    }

    // MARK: - Requests (loop thread)

    func register(
        _ service: ResponderStateMachine.Service, name: SharedName,
        continuation: AsyncStream<AdvertisementEvent>.Continuation
    ) throws(ResponderError) -> ResponderStateMachine.ServiceID {
        precondition(loop.inEventLoop)
        let (id, actions) = try responder.register(service, now: loop.clock.now())
        advertisements[id] = AdvertisementSlot(continuation: continuation, name: name)
        perform(actions)
        reschedule()
        return id
    }

    func updateTXT(_ txt: [[UInt8]], for id: ResponderStateMachine.ServiceID) {
        perform(responder.updateTXT(txt, for: id, now: loop.clock.now()))
        reschedule()
    }

    func unregister(_ id: ResponderStateMachine.ServiceID, waiter: CheckedContinuation<Void, Never>) {
        guard advertisements[id] != nil else {
            waiter.resume()
            return
        }
        advertisements[id]!.stopWaiters.append(waiter)
        perform(responder.unregister(id, now: loop.clock.now()))
        reschedule()
    }

    func waitUntilRegistered(_ id: ResponderStateMachine.ServiceID, waiter: CheckedContinuation<String, Never>) {
        guard let slot = advertisements[id] else {
            waiter.resume(returning: "")
            return
        }
        if let name = slot.registeredName {
            waiter.resume(returning: name)
        } else {
            advertisements[id]!.registeredWaiters.append(waiter)
        }
    }

    func addBrowser(_ type: ServiceType, continuation: AsyncStream<ServiceBrowserEvent>.Continuation) -> Int {
        precondition(loop.inEventLoop)
        let id = nextBrowserID
        nextBrowserID += 1
        guard !closed else {
            continuation.finish()
            return id
        }
        var machine = BrowserStateMachine(serviceType: type.domainName, configuration: configuration.browser)
        let now = loop.clock.now()
        var actions = machine.setLinks(Set(links.keys), now: now)
        actions += machine.start(now: now)
        browsers[id] = BrowserSlot(machine: machine, serviceType: type, continuation: continuation)
        perform(actions, browser: id)
        reschedule()
        return id
    }

    func removeBrowser(_ id: Int) {
        browsers.removeValue(forKey: id)?.continuation.finish()
        reschedule()
    }

    func services(of id: Int) -> [DiscoveredService] {
        guard let slot = browsers[id] else { return [] }
        return slot.machine.foundInstances.map { DiscoveredService($0, type: slot.serviceType) }
    }

    func snapshotStatistics() -> DiscoveryStatistics {
        var stats = counters.withLock { $0 }
        stats.responder = responder.statistics
        stats.cachedRecords = browsers.values.reduce(0) { $0 + $1.machine.cachedRecordCount }
        return stats
    }
}
