internal import Foundation
public import Logging
public import MulticastDNS
public import MultipeerIO

/// What one process shares between its advertisers, browsers and sessions: an event loop, one multicast DNS
/// stack, and one listener per identity and security setting (TLS presents one certificate per listener),
/// which routes each incoming connection by its first control message: an invitation to the advertiser of
/// its service type, a join to the session whose secret it proves.
///
/// Make one per process (or per set of interfaces) and pass it to ``PeerAdvertiser``, ``PeerBrowser`` and
/// ``Session``. Tests and tools pin it to loopback with ``Configuration/loopback``.
public actor PeerNetwork {
    /// Where the network listens and discovers.
    public struct Configuration: Sendable {
        /// The interfaces multicast DNS uses.
        public var discovery = DiscoveryConfiguration()
        /// The addresses the listener binds, all on one port (the first picks it): IPv4 and IPv6 any by default.
        public var listenAddresses: [IPAddress] = [.v4(IPv4Address(0, 0, 0, 0)), .v6(IPv6Address("::")!)]
        /// The port to listen on; 0 lets the system choose.
        public var listenPort: UInt16 = 0
        /// Adjusts the connection settings the network's sessions and advertisers use (timeouts, windows,
        /// limits); identity, encryption and group secret are set from the session or advertiser.
        public var tuneConnections: @Sendable (inout ConnectionConfiguration) -> Void = { _ in }
        /// Where the network and everything on it logs: discovery, connections, sessions and resources, each with
        /// the metadata `area`, and `peer` and `fingerprint` where a peer is concerned. The library never writes
        /// by itself: by default this is `MultipeerLogging.fallback`, which writes nothing unless the
        /// environment's `MULTIPEER_LOG` names a level. Pass the application's `Logger` to route the library's
        /// lines into its logging.
        public var logger: Logger = MultipeerLogging.fallback
        /// Discovery beyond the link through a DNS server (DNS-SD over unicast DNS); nil keeps discovery on the
        /// link (multicast DNS only).
        public var wideArea: WideAreaConfiguration?
        /// A TURN relay for peers that cannot reach each other directly; nil dials and listens directly only.
        public var relay: RelayConfiguration?

        /// All interfaces.
        public init() {}

        /// Loopback only: discovery on `lo`, the listener on 127.0.0.1.
        public static var loopback: Configuration {
            var configuration = Configuration()
            configuration.discovery.interfaces = .loopbackOnly
            configuration.discovery.useIPv6 = false
            configuration.listenAddresses = [.v4(IPv4Address(127, 0, 0, 1))]
            return configuration
        }

        /// What reading the environment found wrong; a network made with it refuses to start, saying this.
        var environmentProblem: String?

        /// What the environment asks for, for programs that take no options (such as apps on the
        /// compatibility modules): `MULTIPEER_LOOPBACK=1` is ``loopback``; `MULTIPEER_INTERFACE=eth0,wlan0`
        /// discovers on those interfaces only; otherwise all interfaces. Beyond the link:
        /// `MULTIPEER_DOMAIN=example.org` and/or `MULTIPEER_DNS_SERVER=ADDRESS[:PORT]` turn on wide-area DNS-SD
        /// (``wideArea``; the server defaults to `/etc/resolv.conf`'s, the domain to enumeration), with
        /// `MULTIPEER_DNS_KEY=FILE` to register; `MULTIPEER_RELAY=HOST:PORT` with `MULTIPEER_RELAY_USER=NAME` and
        /// `MULTIPEER_RELAY_PASSWORD_FILE=FILE` adds a relay (``relay``). A value that cannot work (a key file
        /// others can read, say) makes the network refuse to start with the reason.
        /// - Parameter environment: The environment to read; the process's by default.
        public static func fromEnvironment(_ environment: [String: String]? = nil) -> Configuration {
            let environment = environment ?? ProcessInfo.processInfo.environment
            var configuration: Configuration
            if environment["MULTIPEER_LOOPBACK"] == "1" {
                configuration = .loopback
            } else {
                configuration = Configuration()
                let names = (environment["MULTIPEER_INTERFACE"] ?? "").split(separator: ",").map(String.init)
                if !names.isEmpty { configuration.discovery.interfaces = .named(names) }
            }
            let domain = environment["MULTIPEER_DOMAIN"].flatMap { $0.isEmpty ? nil : $0 }
            let server = environment["MULTIPEER_DNS_SERVER"].flatMap { $0.isEmpty ? nil : $0 }
            let key = environment["MULTIPEER_DNS_KEY"].flatMap { $0.isEmpty ? nil : $0 }
            if domain != nil || server != nil || key != nil {
                do {
                    configuration.wideArea = try WideAreaConfiguration(domain: domain, server: server, keyFile: key)
                } catch {
                    configuration.environmentProblem =
                        "MULTIPEER_DOMAIN, MULTIPEER_DNS_SERVER, MULTIPEER_DNS_KEY: "
                        + error.reason
                }
            }
            if let relay = environment["MULTIPEER_RELAY"], !relay.isEmpty {
                do {
                    configuration.relay = try RelayConfiguration(
                        relay: relay, username: environment["MULTIPEER_RELAY_USER"],
                        passwordFile: environment["MULTIPEER_RELAY_PASSWORD_FILE"])
                } catch {
                    configuration.environmentProblem = "MULTIPEER_RELAY: \(error.reason)"
                }
            }
            return configuration
        }
    }

    /// What the network reports about its links beyond multicast DNS: wide-area registrations and their
    /// failures (each failure once until it works again). Reports nobody reads are dropped, the newest kept.
    public enum Event: Sendable, Hashable {
        /// A service was registered in a wide-area domain (or registered again after a failure).
        case wideAreaRegistered(instance: String)
        /// Wide-area DNS-SD failed (registration, refresh, removal, browsing); multicast DNS on the link goes on.
        case wideAreaFailed(WideAreaError)
        /// The relay gave an allocation (the first, or a new one after a loss): its relayed address, now advertised.
        case relayAllocated(SocketAddress)
        /// The relay refused, could not be reached, or dropped the allocation; the next try comes after `retry`.
        /// Direct links go on.
        case relayFailed(RelayError, retry: Duration)
    }

    /// The event loop every connection of this network lives on.
    public nonisolated let loop: EventLoop
    /// The configuration.
    public nonisolated let configuration: Configuration
    /// What the network reports (see ``Event``); at most 64 wait unread.
    public nonisolated let events: AsyncStream<Event>
    private nonisolated let eventSink: AsyncStream<Event>.Continuation
    /// Wide-area DNS-SD, when configured.
    nonisolated let wideArea: WideAreaDiscovery?
    /// Relayed addresses and allocations, when a relay is configured.
    nonisolated let relayRoutes: RelayRoutes?
    private let ownsLoop: Bool
    private var stack: MulticastDNSStack?
    private var listeners: [ListenerKey: ListenerEntry] = [:]
    private var advertisers: [AdvertiserKey: PeerAdvertiser] = [:]
    private var sessions: [ObjectIdentifier: Session] = [:]
    /// Invitations under way, by the inviting identity and the invited one (sessions of several identities can
    /// share a network: one's invitation is not another's).
    private var outgoing: [Pair: Int] = [:]
    private var outgoingWaiters: [Pair: [CheckedContinuation<Void, Never>]] = [:]
    /// Advertisers waiting for their listener's first allocation outcome, by listener.
    private var relayWaiters: [ListenerKey: [CheckedContinuation<Void, Never>]] = [:]

    struct Pair: Hashable {
        let from: PeerFingerprint
        let to: PeerFingerprint
    }
    private var isShutDown = false

    struct ListenerKey: Hashable {
        var fingerprint: PeerFingerprint
        var encryption: EncryptionPreference
        var groupSecret: GroupSecret?

        init(_ configuration: ConnectionConfiguration) {
            fingerprint = configuration.identity.fingerprint
            encryption = configuration.encryption
            groupSecret = configuration.groupSecret
        }
    }

    struct AdvertiserKey: Hashable {
        var listener: ListenerKey
        /// Compared as service types are (ASCII case folded, RFC 6335): `_MKSVC._tcp` reaches `_mksvc._tcp`.
        var serviceType: ServiceType
    }

    struct ListenerEntry {
        var listeners: [PeerListener]
        var port: UInt16
        /// The allocation on the relay that brings relayed connections to these listeners (advertised).
        var relay: RelayClient?
        /// The allocation this identity dials relayed peers from.
        var dialRelay: RelayClient?
        /// Its relayed address, while it has one.
        var relayed: SocketAddress?
        /// Whether the allocation has had an outcome (allocated or failed) yet.
        var relaySettled = false
    }

    /// Creates a network with its own event loop.
    /// - Parameters:
    ///   - configuration: Interfaces and listening addresses.
    ///   - loop: An event loop to use instead of a new one.
    /// - Throws: ``SessionError`` with code `unavailable` when the event loop cannot start, `invalidParameter` when
    ///   the wide-area or relay settings (or the environment they were read from) cannot work.
    public init(configuration: Configuration = Configuration(), loop: EventLoop? = nil) throws(SessionError) {
        if let problem = configuration.environmentProblem {
            throw SessionError(.invalidParameter, "the environment's network settings cannot work: \(problem)")
        }
        self.configuration = configuration
        if let loop {
            self.loop = loop
            ownsLoop = false
        } else {
            do {
                self.loop = try EventLoop(name: "multipeer-session")
            } catch {
                throw SessionError(.unavailable, "cannot start the network's event loop: \(error)")
            }
            ownsLoop = true
        }
        (events, eventSink) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(64))
        if let wideArea = configuration.wideArea {
            do {
                try wideArea.validate()
            } catch {
                if ownsLoop { self.loop.shutdown() }
                throw SessionError(.invalidParameter, "wide-area discovery: \(error.reason)")
            }
            let sink = eventSink
            let configuration = configuration
            self.wideArea = WideAreaDiscovery(
                configuration: wideArea, loop: self.loop, logger: configuration.logger.area(.discovery),
                addresses: { Self.advertisedAddresses(configuration) }, report: { sink.yield($0) })
        } else {
            self.wideArea = nil
        }
        if let relay = configuration.relay {
            do {
                try relay.validate()
            } catch {
                if ownsLoop { self.loop.shutdown() }
                throw SessionError(.invalidParameter, "relay: \(error.reason)")
            }
            relayRoutes = RelayRoutes()
        } else {
            relayRoutes = nil
        }
    }

    /// The addresses this host registers in a wide-area domain: the listener's addresses when it is bound to
    /// particular ones; otherwise every address of the interfaces discovery uses (all that are up, or the named
    /// ones), but loopback (unless discovery is pinned to it) and link-local addresses, which mean nothing beyond
    /// the link.
    package static func advertisedAddresses(_ configuration: Configuration) -> [IPAddress] {
        let specific = configuration.listenAddresses.filter { address in
            switch address {
            case .v4(let v4): v4 != .any
            case .v6(let v6): v6 != .any
            }
        }
        if !specific.isEmpty { return specific }
        let wantsV4 = configuration.listenAddresses.contains { if case .v4 = $0 { true } else { false } }
        let wantsV6 = configuration.listenAddresses.contains { if case .v6 = $0 { true } else { false } }
        guard let interfaces = try? NetworkInterfaces.current() else { return [] }
        var addresses: [IPAddress] = []
        for interface in interfaces where interface.isUp {
            switch configuration.discovery.interfaces {
            case .all: if interface.isLoopback { continue }
            case .named(let names): if !names.contains(interface.name) { continue }
            case .loopbackOnly: if !interface.isLoopback { continue }
            }
            for entry in interface.addresses where !entry.address.isLinkLocal && !addresses.contains(entry.address) {
                switch entry.address {
                case .v4: if wantsV4 { addresses.append(entry.address) }
                case .v6: if wantsV6 { addresses.append(entry.address) }
                }
            }
        }
        return addresses.sorted()
    }

    /// The connection settings for an identity and security choice, with the network's tuning applied.
    nonisolated func connectionConfiguration(
        identity: PeerIdentity, encryption: EncryptionPreference, groupSecret: GroupSecret?
    ) -> ConnectionConfiguration {
        var connection = ConnectionConfiguration(identity: identity, encryption: encryption, groupSecret: groupSecret)
        connection.logger = configuration.logger
        connection.relayRoutes = relayRoutes
        configuration.tuneConnections(&connection)
        connection.identity = identity
        connection.encryption = encryption
        connection.groupSecret = groupSecret
        return connection
    }

    /// The multicast DNS stack, started on first use.
    func discovery() async throws(SessionError) -> MulticastDNSStack {
        guard !isShutDown else { throw SessionError(.cancelled, "the network was shut down") }
        if let stack { return stack }
        do {
            let made = try await MulticastDNSStack(
                configuration: configuration.discovery, loop: loop, logger: configuration.logger)
            if let stack {
                await made.shutdown()
                return stack
            }
            stack = made
            return made
        } catch {
            throw SessionError(.unavailable, "multicast DNS cannot start: \(error.reason)")
        }
    }

    /// The port of the listener for these settings, started on first use.
    func listenPort(for connection: ConnectionConfiguration) async throws(SessionError) -> UInt16 {
        guard !isShutDown else { throw SessionError(.cancelled, "the network was shut down") }
        let key = ListenerKey(connection)
        if let entry = listeners[key] { return entry.port }
        var made: [PeerListener] = []
        var port = configuration.listenPort
        var firstError: ConnectionError?
        for address in configuration.listenAddresses {
            do {
                let listener = try await PeerListener(
                    configuration: connection, address: SocketAddress(address, port: port), loop: loop)
                if port == 0 { port = listener.localAddress.port }
                made.append(listener)
            } catch {
                firstError = firstError ?? error
            }
        }
        if let entry = listeners[key] {
            for listener in made { listener.close() }
            return entry.port
        }
        guard !made.isEmpty else {
            throw SessionError(
                .unavailable, "cannot listen: \(firstError?.reason ?? "no listening address configured")",
                connectionError: firstError)
        }
        listeners[key] = ListenerEntry(listeners: made, port: port)
        if let relay = configuration.relay, let relayRoutes, let target = made.first {
            // Two allocations per listening identity: one advertised, where peers' relayed connections arrive, and
            // one to dial from. Two peers that invite each other at once then connect between different pairs of
            // relayed addresses (one allocation for both would have each Connect meet the other's connection: 446).
            // Both bring what arrives to this listener: a peer redials a member at the address it was reached from.
            let accept: (TCPConnection, [UInt8], SocketAddress) -> Void = { socket, bytes, peer in
                target.acceptRelayed(socket, initialBytes: bytes, remote: peer)
            }
            let logger = configuration.logger.area(.connection)
            // Relayed dialers connect from their own allocation on the same relay: both allocations let the relay's
            // addresses in (its relayed one and the one it is reached at), before they are reported. The dialing
            // one too: a peer may redial a member at the address it was reached from, which is this allocation's;
            // its failures are logged by the client, not reported.
            let client = RelayClient(
                configuration: relay.clientConfiguration, loop: loop, logger: logger, permitsRelay: true,
                onEvent: { [weak self] event in Task { await self?.relayEvent(event, key: key) } }, onIncoming: accept)
            let dialer = RelayClient(
                configuration: relay.clientConfiguration, loop: loop, logger: logger, permitsRelay: true,
                onEvent: { _ in }, onIncoming: accept)
            listeners[key]?.relay = client
            listeners[key]?.dialRelay = dialer
            relayRoutes.add(dialer, for: key.fingerprint)
            client.start()
            dialer.start()
        }
        for listener in made {
            Task { [weak self] in
                for await connection in listener.connections {
                    guard let self else {
                        connection.abort()
                        continue
                    }
                    await self.accept(connection, key: key)
                }
            }
        }
        return port
    }

    /// The time an incoming connection has to say what it wants (an invitation or a join).
    static let firstMessageTimeout: Duration = .seconds(10)

    private func accept(_ connection: PeerConnection, key: ListenerKey) {
        let link = Link(connection: connection, isDialer: false)
        let timer = SessionTimer(after: Self.firstMessageTimeout, on: loop) {
            link.close("no invitation or join within \(PeerNetwork.firstMessageTimeout)")
        }
        link.setHandler { [weak self] link, event in
            timer.cancel()
            guard let self else { return link.close("the network was shut down") }
            await self.route(link, event, key: key)
        }
    }

    /// Hands an incoming link to whoever its first message is for.
    private func route(_ link: Link, _ event: Link.Event, key: ListenerKey) async {
        guard case .message(let message) = event else { return }
        switch message {
        case .invite(let id, let timeout, let serviceType, let context, let encryption):
            link.linkID = id
            if serviceType == SessionWire.directServiceType {
                for session in sessions.values where await session.holdsTicket(context) {
                    return await session.acceptDirect(
                        link, id: id, context: context, timeoutMilliseconds: timeout, encryption: encryption,
                        listener: key)
                }
                link.send(
                    .inviteAnswer(id: id, answer: .refused, reason: "no session here issued this connection ticket"))
                return link.close("unknown connection ticket")
            }
            // The inviter's text, parsed by the one set of rules: a name that is no service type finds nobody.
            guard let type = try? ServiceType(serviceType),
                let advertiser = advertisers[AdvertiserKey(listener: key, serviceType: type)]
            else {
                link.send(.inviteAnswer(id: id, answer: .refused, reason: "nobody here advertises \(serviceType)"))
                return link.close("no advertiser for \(serviceType)")
            }
            await advertiser.receive(
                link, id: id, timeoutMilliseconds: timeout, context: context, inviterEncryption: encryption)
        case .join(let linkID, let sessionID, let proof):
            link.linkID = linkID
            // Only a session of the identity this listener presents: sessions of one network (one process) that
            // are members of the same session all know its id, and the join is for the one that was dialed.
            for session in sessions.values where session.identity.fingerprint == key.fingerprint {
                guard await session.knowsSession(sessionID) else { continue }
                return await session.acceptJoin(link, sessionID: sessionID, proof: proof)
            }
            link.send(.joinAnswer(accepted: false, reason: "no session here knows the session you name"))
            link.close("unknown session")
        default:
            link.close("the first control message must be an invitation or a join")
        }
    }

    /// The listeners' counters, summed: how many connections were accepted, are open, were refused.
    public func listenerStatistics() -> PeerListener.Statistics {
        var sum = PeerListener.Statistics()
        for entry in listeners.values {
            for listener in entry.listeners {
                let s = listener.statistics
                sum.accepted += s.accepted
                sum.established += s.established
                sum.refusedBusy += s.refusedBusy
                sum.refusedFull += s.refusedFull
                sum.droppedUntaken += s.droppedUntaken
                sum.abandonedVerifications += s.abandonedVerifications
                sum.refusedAfterAbandonedVerifications += s.refusedAfterAbandonedVerifications
                sum.open += s.open
                sum.failed += s.failed
                sum.pending += s.pending
            }
        }
        return sum
    }

    // MARK: Relay

    /// What happened to a listener's allocation (reported once relayed dialers are let in): advertise (or
    /// withdraw) the address.
    private func relayEvent(_ event: RelayClient.Event, key: ListenerKey) async {
        guard !isShutDown, listeners[key] != nil else { return }
        switch event {
        case .allocated(let relayed):
            listeners[key]?.relayed = relayed
            eventSink.yield(.relayAllocated(relayed))
        case .failed(let error, let retry):
            listeners[key]?.relayed = nil
            eventSink.yield(.relayFailed(error, retry: retry))
        }
        listeners[key]?.relaySettled = true
        for waiter in relayWaiters.removeValue(forKey: key) ?? [] { waiter.resume() }
        let relayed = listeners[key]?.relayed
        for (advertiserKey, advertiser) in advertisers where advertiserKey.listener == key {
            advertiser.relayChanged(relayed)
        }
    }

    /// The relayed address of the listener for these settings, while its allocation holds. A listener whose first
    /// allocation is still being made is waited for, at most `patience`: an advertisement that has its relayed
    /// address from the start is dialed through it by the first browser that finds it.
    func relayedAddress(for key: ListenerKey, patience: Duration = .seconds(3)) async -> SocketAddress? {
        guard let entry = listeners[key], entry.relay != nil else { return nil }
        if !entry.relaySettled {
            let timer = SessionTimer(after: patience, on: loop) { [weak self] in
                Task { await self?.stopWaitingForRelay(key) }
            }
            await withCheckedContinuation { relayWaiters[key, default: []].append($0) }
            timer.cancel()
        }
        return listeners[key]?.relayed
    }

    private func stopWaitingForRelay(_ key: ListenerKey) {
        for waiter in relayWaiters.removeValue(forKey: key) ?? [] { waiter.resume() }
    }

    // MARK: Registration

    func register(_ advertiser: PeerAdvertiser, key: AdvertiserKey) throws(SessionError) {
        guard advertisers[key] == nil else {
            throw SessionError(
                .invalidParameter, "this network already has an advertiser for \(key.serviceType) with that identity")
        }
        advertisers[key] = advertiser
    }

    func unregister(advertiserKey key: AdvertiserKey, _ advertiser: PeerAdvertiser) {
        if advertisers[key] === advertiser { advertisers[key] = nil }
    }

    func register(_ session: Session) { sessions[ObjectIdentifier(session)] = session }

    func unregister(_ session: Session) { sessions[ObjectIdentifier(session)] = nil }

    /// Whether any session of this network has the peer as a member.
    func isMember(_ fingerprint: PeerFingerprint, of identity: PeerFingerprint) async -> Bool {
        for session in sessions.values where session.identity.fingerprint == identity {
            if await session.hasMember(fingerprint) { return true }
        }
        return false
    }

    // MARK: Crossing invitations

    /// An invitation from this process to the peer has started.
    func beginOutgoing(from identity: PeerFingerprint, to fingerprint: PeerFingerprint) {
        outgoing[Pair(from: identity, to: fingerprint), default: 0] += 1
    }

    /// An invitation from this process to the peer has ended; held incoming invitations from it resume.
    func endOutgoing(from identity: PeerFingerprint, to fingerprint: PeerFingerprint) {
        let pair = Pair(from: identity, to: fingerprint)
        let left = (outgoing[pair] ?? 1) - 1
        outgoing[pair] = left > 0 ? left : nil
        guard left <= 0 else { return }
        for waiter in outgoingWaiters.removeValue(forKey: pair) ?? [] { waiter.resume() }
    }

    /// Whether this process is inviting the peer right now.
    func isInviting(_ fingerprint: PeerFingerprint, from identity: PeerFingerprint) -> Bool {
        outgoing[Pair(from: identity, to: fingerprint)] != nil
    }

    /// Waits until no invitation from this process to the peer is under way.
    func waitForOutgoing(from identity: PeerFingerprint, to fingerprint: PeerFingerprint) async {
        let pair = Pair(from: identity, to: fingerprint)
        guard outgoing[pair] != nil else { return }
        await withCheckedContinuation { outgoingWaiters[pair, default: []].append($0) }
    }

    /// Stops discovery and the listeners; sessions and advertisers of this network stop working. Idempotent.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        for entry in listeners.values {
            for listener in entry.listeners { listener.close() }
            entry.relay?.stop()
            entry.dialRelay?.stop()
        }
        listeners = [:]
        for session in sessions.values { await session.disconnect() }
        for advertiser in advertisers.values { await advertiser.stop() }
        await wideArea?.shutdown()
        eventSink.finish()
        if let stack { await stack.shutdown() }
        stack = nil
        for waiters in outgoingWaiters.values { for waiter in waiters { waiter.resume() } }
        outgoingWaiters = [:]
        for waiters in relayWaiters.values { for waiter in waiters { waiter.resume() } }
        relayWaiters = [:]
        if ownsLoop { loop.shutdown() }
    }
}
