public import MultipeerIO

/// An established, authenticated (or knowingly plaintext) connection to one peer: messages, streams, pings
/// and a graceful close, all multiplexed over one TCP connection with per-channel flow control.
///
/// Make one with ``connect(to:expecting:configuration:loop:)`` or receive it from a ``PeerListener``. All
/// methods are safe from any task; the connection's state lives on its event loop.
public final class PeerConnection: Sendable {
    /// Who is at the other end: its identity as the TLS handshake proved it (nil on plaintext, where the peer's
    /// fingerprint is only a claim), its display name, and the connection's verification code.
    public let peer: ConnectedPeer
    /// The peer's TCP address; for a relayed connection, the peer's relayed address on the relay.
    public let remoteAddress: SocketAddress
    /// Whether the connection runs through a TURN relay (its bytes are still the peers' TLS, end to end).
    public let isRelayed: Bool
    let driver: ConnectionDriver
    /// The peer's streams, in the order it opened them. Ends when the connection closes.
    public let incomingStreams: AsyncStream<PeerStream>

    /// The event loop that owns this connection. Tasks that react to its messages with low latency can run
    /// on it: `Task(executorPreference: connection.eventLoop) { for await m in connection.messages { ... } }`
    /// resumes on the loop thread when a message arrives, and what it sends is written at once, with no
    /// thread hand-off either way. Such tasks must not block.
    public var eventLoop: EventLoop { driver.loop }

    /// The largest unreliable message sent as a single UDP datagram, or nil when the connection has no
    /// datagram path (plaintext, or the peer announced none); see ``sendUnreliable(_:)``.
    public let datagramPayloadLimit: Int?

    /// A secret both ends share (TLS exporter, label `EXPORTER-swift-multipeer session`), so a session proof
    /// made for this connection is worthless on any other; empty on plaintext.
    let sessionBinding: [UInt8]

    init(
        peer: ConnectedPeer, remoteAddress: SocketAddress, driver: ConnectionDriver, streams: AsyncStream<PeerStream>,
        datagramPayloadLimit: Int?, sessionBinding: [UInt8], isRelayed: Bool = false
    ) {
        self.isRelayed = isRelayed
        self.datagramPayloadLimit = datagramPayloadLimit
        self.sessionBinding = sessionBinding
        self.peer = peer
        self.remoteAddress = remoteAddress
        self.driver = driver
        incomingStreams = streams
        LiveObjects.connections.add(1, ordering: .relaxed)
    }

    /// The code two people compare to confirm this connection has no man in the middle (see
    /// ``VerificationCode``); the same at both ends, different for every connection. Nil on plaintext.
    public var verificationCode: VerificationCode? { peer.verificationCode }

    /// Connects to a peer: TCP, the preamble, TLS 1.3 with mutual authentication (unless both sides settle on
    /// plaintext), and the hello exchange.
    ///
    /// - Parameters:
    ///   - address: The peer's address, from discovery.
    ///   - expecting: The identity discovery advertised for the peer; the handshake fails with
    ///     ``ConnectionError/Code/identityMismatch(expected:actual:)`` unless the far side proves it, and the
    ///     connection uses TLS whatever the configuration's encryption preference allows (plaintext is refused
    ///     with ``ConnectionError/Code/plaintextRefused``: only TLS proves an identity). Nil accepts whoever
    ///     answers.
    ///   - configuration: This side's identity and settings.
    ///   - loop: The event loop that will own the connection.
    /// - Returns: The established connection.
    /// - Throws: ``ConnectionError`` saying why the connection could not be made.
    public static func connect(
        to address: SocketAddress, expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try await connect(to: address, expecting: expecting, configuration: configuration, loop: loop) {
            loop, completion in
            let socket = TCPConnection.beginConnect(to: address, loop: loop) { result in
                completion(
                    result.map { ($0, []) }.mapError { error in
                        ConnectionError(
                            code: .socket(call: error.call, errno: error.errno),
                            reason: "could not connect to \(address): \(error)")
                    })
            }
            return { socket?.close() }
        }
    }

    /// Opens a socket to a peer, on the loop: reports the connected socket (and any bytes already read from it) or
    /// the error, later, and returns a function that abandons the attempt.
    typealias SocketOpener =
        @Sendable (
            EventLoop, @escaping (Result<(TCPConnection, [UInt8]), ConnectionError>) -> Void
        ) -> () -> Void

    /// Connects through a TURN relay's allocation to a peer's relayed address (RFC 6062: the relay connects out
    /// and binds the connection to us); then the same handshake as a direct connection, TLS end to end.
    package static func connect(
        relayedTo address: SocketAddress, through relay: RelayClient, expecting: PeerFingerprint?,
        configuration: ConnectionConfiguration, loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try await connect(
            to: address, expecting: expecting, configuration: configuration, loop: loop, relayed: true
        ) { _, completion in
            relay.connect(to: address) { result in
                if case .success = result {
                    configuration.logger.area(.connection).info(
                        "\(address): reached through the relay \(relay.configuration.server)")
                }
                completion(
                    result.mapError { error in
                        ConnectionError(
                            code: .unreachable,
                            reason: "could not connect to \(address) through the relay \(relay.configuration.server): "
                                + error.reason)
                    })
            }
        }
    }

    /// The connection setup over whatever socket `open` gives.
    static func connect(
        to address: SocketAddress, expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        loop: EventLoop, relayed: Bool = false, open: @escaping SocketOpener
    ) async throws(ConnectionError) -> PeerConnection {
        try configuration.validate()
        if expecting != nil && configuration.encryption == .none {
            throw .invalidConfiguration(
                "expecting a particular peer needs TLS, which encryption .none refuses; use .optional or .required")
        }
        let contexts = TLSContexts.of(configuration.identity)
        // Cancelling the waiting task closes the socket or aborts the handshake, whichever is under way.
        let pending = PendingConnect(address: address)
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation {
                    (continuation: CheckedContinuation<PeerConnection, any Error>) in
                    let accepted = loop.execute {
                        guard pending.begin(continuation) else { return }
                        pending.abandonOpen = open(loop) { result in
                            pending.abandonOpen = nil
                            switch result {
                            case .failure(let error):
                                pending.finish(.failure(error))
                            case .success(let (socket, initialBytes)):
                                guard pending.isWaiting else { return socket.close() }
                                // Unreliable messages get a UDP endpoint of their own on the same local address.
                                let endpoint =
                                    configuration.encryption.allowsEncryption
                                    ? try? DatagramEndpoint(
                                        bindingTo: SocketAddress(socket.localAddress.address, port: 0), loop: loop)
                                    : nil
                                let core = ConnectionCore(
                                    role: .dialer, configuration: configuration, expectedPeer: expecting,
                                    now: loop.clock.now(), datagramPort: endpoint?.localAddress.port,
                                    makeTLS: contexts.makeRecordLayer(expecting: expecting))
                                let driver = ConnectionDriver(
                                    loop: loop, core: core, socket: socket, datagramEndpoint: endpoint,
                                    ownsDatagramEndpoint: true)
                                let connection = PeerConnection.pending(
                                    driver: driver, remote: address, relayed: relayed)
                                pending.driver = driver
                                driver.onSetup = { result in pending.finish(result.map(connection)) }
                                driver.start(initialBytes: initialBytes)
                            }
                        }
                    }
                    if !accepted {
                        continuation.resume(throwing: ConnectionError(code: .closedLocally, reason: "the loop stopped"))
                    }
                }
            } onCancel: {
                _ = loop.execute { pending.cancel() }
            }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    /// Prepares the public object's parts before the handshake finishes, so nothing the peer sends right
    /// after its hello is lost; returns the function that makes the connection once the peer is known.
    static func pending(driver: ConnectionDriver, remote: SocketAddress, relayed: Bool = false)
        -> (ConnectedPeer) -> PeerConnection
    {
        let (streams, continuation) = AsyncStream<PeerStream>.makeStream(
            bufferingPolicy: .bufferingOldest(driver.core.configuration.maximumChannels))
        driver.incomingStreams = continuation
        return { peer in
            PeerConnection(
                peer: peer, remoteAddress: remote, driver: driver, streams: streams,
                datagramPayloadLimit: driver.datagramPayloadLimit, sessionBinding: driver.core.sessionBinding,
                isRelayed: relayed)
        }
    }

    /// Sends a message reliably and in order (Apple's `.reliable` mode).
    ///
    /// Returns once the message is queued; suspends while more than
    /// ``ConnectionConfiguration/sendBufferLimit`` bytes wait to be sent, so a slow peer slows the sender
    /// instead of growing memory.
    /// - Parameter message: At most the peer's ``ConnectedPeer/maximumMessageLength`` bytes.
    /// - Throws: ``ConnectionError`` if the message is too long for the peer
    ///   (``ConnectionError/Code/messageTooLarge(length:limit:)``) or the connection is closing or closed.
    public nonisolated(nonsending) func send(_ message: [UInt8]) async throws(ConnectionError) {
        try await send(OutboundMessage(message))
    }

    /// Sends `prefix` then `body` as one message, like ``send(_:)``, without joining them first.
    nonisolated(nonsending) func send(_ message: OutboundMessage) async throws(ConnectionError) {
        try checkLength(message.count)
        let driver = driver
        try await driver.shared.enqueue(message) { driver.serviceAfterSend() }
    }

    /// Sends a message reliably and in order without ever suspending, for callers that cannot wait (such as
    /// Apple's synchronous `MCSession.send`).
    /// - Parameter message: At most the peer's ``ConnectedPeer/maximumMessageLength`` bytes.
    /// - Throws: ``ConnectionError``: ``ConnectionError/Code/sendBufferFull(limit:)`` at once when
    ///   ``ConnectionConfiguration/sendBufferLimit`` bytes already wait (the peer is behind; try later or use
    ///   ``send(_:)``), ``ConnectionError/Code/messageTooLarge(length:limit:)``, or the reason the connection is
    ///   closing or closed.
    public func trySend(_ message: [UInt8]) throws(ConnectionError) {
        try checkLength(message.count)
        if try driver.shared.tryEnqueue(OutboundMessage(message)) { driver.serviceAfterSend() }
    }

    /// Queues a message like ``trySend(_:)`` but leaves waking the loop to the caller: returns whether
    /// ``kick()`` must follow (outside any lock the caller holds: it may write from the calling thread).
    func enqueueWithoutKick(_ message: OutboundMessage) throws(ConnectionError) -> Bool {
        try checkLength(message.count)
        return try driver.shared.tryEnqueue(message)
    }

    /// Gets queued messages written (after ``enqueueWithoutKick(_:)`` said so).
    func kick() { driver.serviceAfterSend() }

    private func checkLength(_ count: Int) throws(ConnectionError) {
        guard count <= peer.maximumMessageLength else {
            throw .messageTooLarge(length: count, limit: peer.maximumMessageLength)
        }
    }

    /// Sends a message that may be lost (Apple's `.unreliable` mode): one AES-GCM-protected UDP datagram,
    /// never retransmitted, never waiting for flow control; it arrives in ``messages`` like any other, or not
    /// at all, and may overtake or be overtaken by reliable messages.
    ///
    /// A message larger than ``datagramPayloadLimit`` (1,216 bytes over IPv4, 1,196 over IPv6, to stay below
    /// the smallest IPv6 path MTU) is not split into datagrams, where losing one piece would lose it all: it
    /// is sent reliably with ``send(_:)`` instead, and so is every message on a connection without a datagram
    /// path (plaintext, or a peer that announced none).
    /// - Parameter message: The message.
    /// - Throws: ``ConnectionError`` if the connection is closed.
    public func sendUnreliable(_ message: [UInt8]) async throws(ConnectionError) {
        guard let limit = datagramPayloadLimit, message.count <= limit else {
            try await send(message)
            return
        }
        try sendDatagram(message)
    }

    /// ``sendUnreliable(_:)`` without waiting: a message that fits a datagram goes as one; a larger one is queued on
    /// the connection like ``trySend(_:)``, or refused with `sendBufferFull` when the connection is behind (an
    /// unreliable message is dropped rather than waited for).
    public func trySendUnreliable(_ message: [UInt8]) throws(ConnectionError) {
        guard let limit = datagramPayloadLimit, message.count <= limit else {
            try trySend(message)
            return
        }
        try sendDatagram(message)
    }

    private func sendDatagram(_ message: [UInt8]) throws(ConnectionError) {
        if let closed = driver.shared.closedError { throw closed }
        let driver = driver
        driver.loop.execute { driver.sendDatagram(message) }
    }

    /// Datagrams received but dropped because the application read messages too slowly.
    public var droppedDatagrams: Int { driver.shared.droppedDatagrams }

    /// What this connection's datagram path received (packets carrying its receive id) and why it dropped what it
    /// did: a flood of forged or replayed datagrams is counted here while genuine ones keep arriving. All zeros on
    /// a connection without a datagram path.
    public var datagramStatistics: DatagramStatistics { driver.datagramCounters.snapshot }

    /// The messages the peer sends, in order. Ends when the connection closes (see ``closed()`` for why).
    public var messages: Messages { Messages(connection: self) }

    /// The peer's messages as an `AsyncSequence`.
    public struct Messages: AsyncSequence, Sendable {
        let connection: PeerConnection

        /// Creates the iterator.
        public func makeAsyncIterator() -> Iterator { Iterator(connection: connection) }

        /// Takes the messages in order. An iterator takes up to 64 queued messages (64 KiB) at a time and hands
        /// them out one by one; several iterators of one connection share its messages between them. Messages
        /// an iterator took but did not hand out go back to the connection when the iterator is dropped (after
        /// a `break`, for example), so the next iterator gets them.
        public struct Iterator: AsyncIteratorProtocol {
            /// Held so the connection stays open while someone iterates its messages.
            let connection: PeerConnection
            private var batch: TakenMessages?

            init(connection: PeerConnection) {
                self.connection = connection
            }

            /// The next message, or nil once the connection closed.
            public nonisolated(nonsending) mutating func next() async -> [UInt8]? {
                if let batch, let message = batch.next() { return message }
                batch = nil
                let driver = connection.driver
                let messages = await driver.shared.nextMessages(limit: 64) { driver.serviceSoon() }
                guard let first = messages.first else { return nil }
                if messages.count > 1 { batch = TakenMessages(shared: driver.shared, messages: messages, handedOut: 1) }
                return first
            }
        }
    }

    /// Messages an iterator took from the connection in one go; what it has not handed out when it is released
    /// goes back to the connection.
    final class TakenMessages {
        private let shared: ConnectionShared
        private var messages: [[UInt8]]
        private var index: Int

        init(shared: ConnectionShared, messages: [[UInt8]], handedOut: Int) {
            self.shared = shared
            self.messages = messages
            index = handedOut
            for handed in 0..<handedOut { self.messages[handed] = [] }
        }

        /// The next message not handed out yet, or nil.
        func next() -> [UInt8]? {
            guard index < messages.count else { return nil }
            // Handed over, not kept: the batch holds no message the application already has.
            var message: [UInt8] = []
            swap(&message, &messages[index])
            index += 1
            return message
        }

        deinit {
            guard index < messages.count else { return }
            shared.giveBack(messages[index...])
        }
    }

    /// Opens a byte stream to the peer.
    /// - Parameter name: A name for the peer (at most 255 bytes of UTF-8), such as a file name.
    /// - Throws: ``ConnectionError`` if the connection is not open or has too many channels.
    public func openStream(name: String) async throws(ConnectionError) -> PeerStream {
        let driver = driver
        do {
            return try await driver.loop.submit { try driver.openStream(name: name) }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    /// Measures the round-trip time with a ping.
    /// - Throws: ``ConnectionError`` if the connection closes first.
    public func ping() async throws(ConnectionError) -> Duration {
        let driver = driver
        do {
            return try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<Duration, any Error>) in
                // Sent from this thread if the loop is idle, which saves waking the loop thread.
                if !driver.loop.runIfIdle({ driver.ping(continuation) })
                    && !driver.loop.execute({ driver.ping(continuation) })
                {
                    continuation.resume(throwing: ConnectionError(code: .closedLocally, reason: "the loop stopped"))
                }
            }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    /// Closes gracefully: everything already queued is sent, then a goodbye; returns once the connection
    /// ended (the peer answered, or ``ConnectionConfiguration/closeTimeout`` passed).
    /// - Parameters:
    ///   - code: A reason code for the peer (0 = normal).
    ///   - reason: A short text for the peer's logs.
    /// - Returns: How the connection ended.
    @discardableResult
    public func close(code: UInt32 = 0, reason: String = "closed") async -> ConnectionError {
        driver.requestClose(code: code, text: reason)
        return await closed()
    }

    /// A connection nobody holds any more closes gracefully, instead of being kept alive by its keepalives.
    deinit {
        driver.requestClose(code: 0, text: "released")
        LiveObjects.connections.subtract(1, ordering: .relaxed)
    }

    // MARK: - The session layer's control messages

    /// Queues a session-layer control message: sent ahead of messages and stream data, in order with the other
    /// session messages. Never suspends. If the connection's control queue is full (the peer has not read a
    /// thousand control frames), the connection ends with ``ConnectionError/Code/resourceLimit``.
    /// - Throws: ``ConnectionError`` if the body is too long, or the connection is closing or closed.
    func sendSessionMessage(_ message: SessionMessage) throws(ConnectionError) {
        guard message.body.count <= SessionMessage.maximumBodyLength else {
            throw .sessionMessageTooLarge(message.body.count)
        }
        let driver = driver
        if let closed = driver.shared.closedError { throw closed }
        let accepted = driver.loop.execute {
            do throws(ConnectionError) {
                try driver.core.sendSessionMessage(message)
            } catch  where error.code == .resourceLimit {
                driver.core.fail(error)
            } catch {
                // Closing or closed: the close reason reaches the session layer through `closed()`.
            }
            driver.service()
        }
        if !accepted { throw .closedLocally("the event loop was shut down") }
    }

    /// The session messages the peer sends, in order; ends when the connection closes. Unread, at most 256
    /// messages or 1 MiB wait; a peer that sends more is disconnected with ``ConnectionError/Code/resourceLimit``.
    var sessionMessages: SessionMessages { SessionMessages(connection: self) }

    /// The peer's session messages as an `AsyncSequence`.
    struct SessionMessages: AsyncSequence, Sendable {
        let connection: PeerConnection

        func makeAsyncIterator() -> Iterator { Iterator(connection: connection) }

        struct Iterator: AsyncIteratorProtocol {
            let connection: PeerConnection

            nonisolated(nonsending) mutating func next() async -> SessionMessage? {
                await connection.driver.shared.nextSessionMessage()
            }
        }
    }

    /// Closes the TCP connection at once, without a goodbye; the peer sees the connection lost.
    public func abort() {
        let driver = driver
        driver.loop.execute { driver.abort() }
    }

    /// Waits until the connection ends and says why.
    public func closed() async -> ConnectionError {
        await driver.shared.waitUntilClosed()
    }

    /// Why the connection ended, or nil while it is open.
    public var closeReason: ConnectionError? { driver.shared.closedError }
}
