public import MultipeerIO
internal import Synchronization

/// Accepts connections from peers: runs each handshake (preamble, TLS, hello) on the event loop and yields
/// the connections that finished it.
///
/// At most ``ConnectionConfiguration/maximumPendingHandshakes`` handshakes run at once; further connection
/// attempts are answered "busy" and closed at once, and every handshake has
/// ``ConnectionConfiguration/handshakeTimeout``, so a flood of connections or a client that sends nothing
/// cannot exhaust memory or keep real peers out. Failed handshakes are reported with their reason in
/// ``handshakeFailures`` and counted in ``statistics``.
public final class PeerListener: Sendable {
    /// Counters of what the listener saw.
    public struct Statistics: Sendable, Hashable {
        /// TCP connections accepted.
        public var accepted = 0
        /// Handshakes that finished: connections yielded.
        public var established = 0
        /// Connections answered "busy" because too many handshakes were running.
        public var refusedBusy = 0
        /// Handshakes that failed (timeout, mismatch, garbage, ...).
        public var failed = 0
        /// Handshakes running now.
        public var pending = 0
    }

    /// The address the listener is bound to (with the port the system chose for port 0).
    public let localAddress: SocketAddress
    /// Connections whose handshake finished, in that order. Ends when the listener closes.
    public let connections: AsyncStream<PeerConnection>
    /// Why handshakes failed, newest kept when nobody reads (at most 64 waiting).
    public let handshakeFailures: AsyncStream<ConnectionError>
    private let state: ListenerState

    /// Starts listening.
    /// - Parameters:
    ///   - configuration: This side's identity and settings.
    ///   - address: Where to listen, such as `[::]:0` (all interfaces, any port) or a loopback address.
    ///   - loop: The event loop that owns the listener and its connections.
    /// - Throws: ``ConnectionError`` if the socket cannot be bound or the TLS context cannot be made.
    public init(configuration: ConnectionConfiguration, address: SocketAddress, loop: EventLoop)
        async throws(ConnectionError)
    {
        let contexts = TLSContexts.of(configuration.identity)
        if configuration.encryption.allowsEncryption { _ = try contexts.context(.server) }
        let (connections, connectionSink) = AsyncStream<PeerConnection>.makeStream(bufferingPolicy: .unbounded)
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

    /// Stops accepting; established connections stay open, handshakes in progress are dropped.
    public func close() {
        let state = state
        state.loop.execute { state.close() }
    }
}

/// The listener's loop-side state.
final class ListenerState: @unchecked Sendable {
    // Safety of @unchecked Sendable: everything but `statistics` (a Mutex) is touched only on `loop`'s thread.
    let loop: EventLoop
    let configuration: ConnectionConfiguration
    let contexts: TLSContexts
    let connections: AsyncStream<PeerConnection>.Continuation
    let failures: AsyncStream<ConnectionError>.Continuation
    let statistics = Mutex(PeerListener.Statistics())
    private var listener: TCPListener?
    /// The UDP endpoint every accepted connection's unreliable messages share.
    private var datagramEndpoint: DatagramEndpoint?
    /// Established connections still open; the datagram endpoint outlives the listener until they end.
    private var openConnections = 0
    private var closed = false
    private var pending: Set<ObjectIdentifier> = []
    private var handshakes: [ObjectIdentifier: ConnectionDriver] = [:]

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

    private func accept(_ socket: TCPConnection) {
        statistics.withLock { $0.accepted += 1 }
        guard handshakes.count < configuration.maximumPendingHandshakes else {
            statistics.withLock { $0.refusedBusy += 1 }
            socket.write(ConnectionCore.busyAnswer(preference: configuration.encryption))
            socket.close()
            return
        }
        let core = ConnectionCore(
            role: .acceptor, configuration: configuration, expectedPeer: nil, now: loop.clock.now(),
            datagramPort: datagramEndpoint?.localAddress.port, makeTLS: contexts.makeRecordLayer(expecting: nil))
        let driver = ConnectionDriver(loop: loop, core: core, socket: socket, datagramEndpoint: datagramEndpoint)
        let key = ObjectIdentifier(driver)
        handshakes[key] = driver
        statistics.withLock { $0.pending = handshakes.count }
        let makeConnection = PeerConnection.pending(driver: driver, remote: socket.remoteAddress)
        driver.onSetup = { [self] result in
            handshakes[key] = nil
            statistics.withLock { statistics in
                statistics.pending = handshakes.count
                switch result {
                case .success: statistics.established += 1
                case .failure: statistics.failed += 1
                }
            }
            switch result {
            case .success(let peer):
                openConnections += 1
                driver.onEnd = { [self] _ in
                    openConnections -= 1
                    if closed && openConnections == 0 {
                        datagramEndpoint?.close()
                        datagramEndpoint = nil
                    }
                }
                connections.yield(makeConnection(peer))
            case .failure(let error):
                failures.yield(error)
            }
        }
        driver.start()
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
