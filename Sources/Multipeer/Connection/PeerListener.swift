import DequeModule
public import MultipeerIO

/// Accepts connections from peers: runs each handshake (preamble, TLS, hello) on the event loop and yields
/// the connections that finished it.
///
/// At most ``ConnectionConfiguration/maximumPendingHandshakes`` handshakes run at once, at most
/// ``ConnectionConfiguration/maximumPendingHandshakesPerHost`` of them for one host; further connection attempts
/// are answered "busy" and closed at once, and every handshake has ``ConnectionConfiguration/handshakeTimeout``,
/// so a flood of connections or a client that sends nothing cannot exhaust memory or keep real peers out. At
/// most ``ConnectionConfiguration/maximumConnections`` connections are kept (more are answered "full"), and at
/// most ``ConnectionConfiguration/maximumQueuedConnections`` wait in ``connections`` for the application (a
/// connection beyond is closed with a goodbye saying why). Failed handshakes are reported with their reason in
/// ``handshakeFailures`` and counted in ``statistics``.
public final class PeerListener: Sendable {
    /// Counters of what the listener saw.
    public struct Statistics: Sendable, Hashable {
        /// TCP connections accepted.
        public var accepted = 0
        /// Handshakes that finished: connections yielded.
        public var established = 0
        /// Connections answered "busy" because too many handshakes were running (in all, or from that host).
        public var refusedBusy = 0
        /// Connections answered "full" because the listener had its maximum of connections.
        public var refusedFull = 0
        /// Established connections closed because the application had not taken the ones queued before them.
        public var droppedUntaken = 0
        /// Handshakes whose dialer went away during the verification-code exchange
        /// (``ConnectionError/Code/verificationAbandoned``, or a nonce that did not match its commitment).
        public var abandonedVerifications = 0
        /// Connections answered "busy" because too many verifications were abandoned in the last minute.
        public var refusedAfterAbandonedVerifications = 0
        /// Connections established and not ended yet.
        public var open = 0
        /// Handshakes that failed (timeout, mismatch, garbage, ...).
        public var failed = 0
        /// Handshakes running now.
        public var pending = 0
    }

    /// The address the listener is bound to (with the port the system chose for port 0).
    public let localAddress: SocketAddress
    /// Connections whose handshake finished, in that order; at most
    /// ``ConnectionConfiguration/maximumQueuedConnections`` wait here. Ends when the listener closes.
    public let connections: AsyncStream<PeerConnection>
    /// Why handshakes failed, newest kept when nobody reads (at most 64 waiting).
    public let handshakeFailures: AsyncStream<ConnectionError>
    private let state: ListenerState

    /// Starts listening.
    /// - Parameters:
    ///   - configuration: This side's identity and settings.
    ///   - address: Where to listen, such as `[::]:0` (all interfaces, any port) or a loopback address.
    ///   - loop: The event loop that owns the listener and its connections.
    /// - Throws: ``ConnectionError`` if the configuration is invalid, the socket cannot be bound or the TLS
    ///   context cannot be made.
    public init(configuration: ConnectionConfiguration, address: SocketAddress, loop: EventLoop)
        async throws(ConnectionError)
    {
        try configuration.validate()
        let contexts = TLSContexts.of(configuration.identity)
        if configuration.encryption.allowsEncryption { _ = try contexts.context(.server) }
        let (connections, connectionSink) = AsyncStream<PeerConnection>.makeStream(
            bufferingPolicy: .bufferingOldest(configuration.maximumQueuedConnections))
        let (failures, failureSink) = AsyncStream<ConnectionError>.makeStream(bufferingPolicy: .bufferingNewest(64))
        self.connections = connections
        handshakeFailures = failures
        let state = ListenerState(
            loop: loop, configuration: configuration, contexts: contexts, connections: connectionSink,
            failures: failureSink)
        self.state = state
        do {
            localAddress = try await loop.submit { try state.start(address: address) }
        } catch {
            throw ConnectionError(
                code: .socket(
                    call: (error as? SystemCallError)?.call ?? "listen",
                    errno: (error as? SystemCallError)?.errno ?? 0),
                reason: "cannot listen on \(address): \(error)")
        }
    }

    /// The counters so far.
    public var statistics: Statistics { state.statistics.withLock { $0 } }

    /// Takes a connection a TURN relay handed over (already connected and bound): it runs the same handshake, limits
    /// and counters as one this listener accepted. Loop thread only.
    /// - Parameters:
    ///   - socket: The relay's data connection, raw after its bind.
    ///   - initialBytes: What was read from it past the bind's answer.
    ///   - remote: The peer the relay says it comes from.
    package func acceptRelayed(_ socket: TCPConnection, initialBytes: [UInt8], remote: SocketAddress) {
        // The peer's relayed address: a member reached this way is redialed through the relay.
        state.configuration.relayRoutes?.learn(remote)
        state.accept(socket, initialBytes: initialBytes, remote: remote, relayed: true)
    }

    /// Stops accepting; established connections stay open, handshakes in progress are dropped.
    public func close() {
        let state = state
        state.loop.execute { state.close() }
    }
}

/// The listener's loop-side state.
final class ListenerState: @unchecked Sendable {
    // Safety of @unchecked Sendable: everything but `statistics` (a Lock) is touched only on `loop`'s thread.
    let loop: EventLoop
    let configuration: ConnectionConfiguration
    let contexts: TLSContexts
    let connections: AsyncStream<PeerConnection>.Continuation
    let failures: AsyncStream<ConnectionError>.Continuation
    let statistics = Lock(PeerListener.Statistics())
    private var listener: TCPListener?
    /// The UDP endpoint every accepted connection's unreliable messages share.
    private var datagramEndpoint: DatagramEndpoint?
    /// Established connections still open; the datagram endpoint outlives the listener until they end.
    private var openConnections = 0
    private var closed = false
    private var handshakes: [ObjectIdentifier: ConnectionDriver] = [:]
    /// Handshakes running per host address.
    private var handshakesPerHost: [HostKey: Int] = [:]
    /// When verifications were abandoned within the last minute, oldest first (at most the limit are kept).
    private var abandonedVerifications: Deque<IOInstant> = []

    init(
        loop: EventLoop, configuration: ConnectionConfiguration, contexts: TLSContexts,
        connections: AsyncStream<PeerConnection>.Continuation, failures: AsyncStream<ConnectionError>.Continuation
    ) {
        self.loop = loop
        self.configuration = configuration
        self.contexts = contexts
        self.connections = connections
        self.failures = failures
    }

    func start(address: SocketAddress) throws(SystemCallError) -> SocketAddress {
        let listener = try TCPListener(loop: loop, address: address, backlog: 512)
        self.listener = listener
        listener.setAcceptHandler { [self] socket in accept(socket) }
        let local = try listener.localAddress()
        if configuration.encryption.allowsEncryption {
            datagramEndpoint = try? DatagramEndpoint(bindingTo: SocketAddress(local.address, port: 0), loop: loop)
        }
        return local
    }

    func accept(
        _ socket: TCPConnection, initialBytes: [UInt8] = [], remote: SocketAddress? = nil, relayed: Bool = false
    ) {
        let remote = remote ?? socket.remoteAddress
        guard !closed else { return socket.close() }
        statistics.withLock { $0.accepted += 1 }
        let host = HostKey(remote.address)
        if openConnections + handshakes.count >= configuration.maximumConnections {
            statistics.withLock { $0.refusedFull += 1 }
            refuse(socket, ConnectionCore.fullAnswer(preference: configuration.encryption))
            return
        }
        let now = loop.clock.now()
        abandonedVerifications.removeAll { now - $0 >= .seconds(60) }
        if abandonedVerifications.count >= configuration.maximumAbandonedVerificationsPerMinute {
            statistics.withLock {
                $0.refusedBusy += 1
                $0.refusedAfterAbandonedVerifications += 1
            }
            refuse(socket, ConnectionCore.busyAnswer(preference: configuration.encryption))
            return
        }
        guard handshakes.count < configuration.maximumPendingHandshakes,
            handshakesPerHost[host, default: 0] < configuration.maximumPendingHandshakesPerHost
        else {
            statistics.withLock { $0.refusedBusy += 1 }
            refuse(socket, ConnectionCore.busyAnswer(preference: configuration.encryption))
            return
        }
        let core = ConnectionCore(
            role: .acceptor, configuration: configuration, expectedPeer: nil, now: loop.clock.now(),
            datagramPort: datagramEndpoint?.localAddress.port, makeTLS: contexts.makeRecordLayer(expecting: nil))
        let driver = ConnectionDriver(loop: loop, core: core, socket: socket, datagramEndpoint: datagramEndpoint)
        let key = ObjectIdentifier(driver)
        handshakes[key] = driver
        handshakesPerHost[host, default: 0] += 1
        statistics.withLock { $0.pending = handshakes.count }
        let makeConnection = PeerConnection.pending(driver: driver, remote: remote, relayed: relayed)
        driver.onSetup = { [self, unowned driver] result in
            handshakes[key] = nil
            let remaining = handshakesPerHost[host, default: 1] - 1
            handshakesPerHost[host] = remaining > 0 ? remaining : nil
            statistics.withLock { statistics in
                statistics.pending = handshakes.count
                switch result {
                case .success: statistics.established += 1
                case .failure: statistics.failed += 1
                }
            }
            switch result {
            case .success(let peer):
                established(driver, connection: makeConnection(peer))
            case .failure(let error):
                if driver.core.endedWhileConfirming {
                    abandonedVerifications.append(loop.clock.now())
                    if abandonedVerifications.count > configuration.maximumAbandonedVerificationsPerMinute {
                        abandonedVerifications.removeFirst()
                    }
                    statistics.withLock { $0.abandonedVerifications += 1 }
                }
                failures.yield(error)
            }
        }
        driver.start(initialBytes: initialBytes)
    }

    /// Answers a connection this listener has no room for, and closes it.
    private func refuse(_ socket: TCPConnection, _ answer: [UInt8]) {
        socket.write(answer)
        socket.close()
    }

    /// Hands an established connection to the application, or closes it if the application has not taken the
    /// ones before it.
    private func established(_ driver: ConnectionDriver, connection: PeerConnection) {
        openConnections += 1
        statistics.withLock { $0.open = openConnections }
        driver.onEnd = { [self] _ in
            openConnections -= 1
            statistics.withLock { $0.open = openConnections }
            if closed && openConnections == 0 {
                datagramEndpoint?.close()
                datagramEndpoint = nil
            }
        }
        if case .dropped(let untaken) = connections.yield(connection) {
            statistics.withLock { $0.droppedUntaken += 1 }
            untaken.driver.requestClose(
                code: 1, text: "the listener's application has not taken the connections queued before this one")
        }
    }

    func close() {
        listener?.close()
        listener = nil
        closed = true
        if openConnections == 0 {
            datagramEndpoint?.close()
            datagramEndpoint = nil
        }
        for driver in handshakes.values { driver.abort() }
        handshakes = [:]
        connections.finish()
        failures.finish()
    }
}

/// The host a connection comes from, for the per-host handshake limit: its address, with an IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`, as a dual-stack listener sees IPv4 peers) counted as the IPv4 address.
///
/// A whole address, not a prefix: on a LAN, where peers are, every host of the link shares the link's /64
/// (`fe80::/64` and the LAN's SLAAC prefix), so a per-prefix limit would give the whole link one host's slots. A
/// host with many addresses can still take more slots; ``ConnectionConfiguration/maximumPendingHandshakes``
/// bounds them all.
struct HostKey: Hashable {
    private let bytes: [UInt8]

    init(_ address: IPAddress) {
        switch address {
        case .v4(let v4):
            bytes = v4.byteArray
        case .v6(let v6):
            let all = v6.byteArray
            let isMapped = all[0..<10].allSatisfy { $0 == 0 } && all[10] == 0xFF && all[11] == 0xFF
            bytes = isMapped ? Array(all[12...]) : all
        }
    }
}
