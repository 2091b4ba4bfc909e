internal import Logging
internal import MultipeerIO
internal import Synchronization

/// Binds a ``ConnectionCore`` to a TCP socket on an event loop: feeds it received bytes, writes its output
/// while the socket's send buffer is below a high-water mark, runs its timers, and hands its events to the
/// application side (``ConnectionShared``, ``PeerStream``). Loop-confined.
final class ConnectionDriver: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only where `loop.inEventLoop` holds (the
    // loop's thread, or a `runIfIdle` caller while it owns the loop; the public objects get there with
    // `loop.execute` or `loop.runIfIdle`). Sendable only so closures run on the loop can capture it.

    /// Unwritten socket bytes above which the driver stops asking the core for frames.
    static let highWatermark = 256 * 1024
    /// The writability handler fires below this.
    static let lowWatermark = 64 * 1024
    /// The most bytes the kernel holds unsent: the rest stays in our scheduler, where a small message still
    /// overtakes bulk data (without it Linux buffers megabytes, milliseconds at loopback speed).
    static let kernelUnsentLimit = 256 * 1024
    /// Bytes of frames asked from the core per write: below glibc's 128 KiB mmap threshold, so the buffers
    /// come from (and return to) the heap instead of being mapped, faulted in and unmapped every time.
    static let outputChunk = 96 * 1024

    let loop: EventLoop
    let core: ConnectionCore
    let shared: ConnectionShared
    /// Set when bytes arrive, taken by the next send (``serviceAfterSend()``).
    private let inlineSendCredit = Atomic<Bool>(true)
    private var socket: TCPConnection?
    private var timer: TimerID?
    private var timerDeadline: IOInstant?
    private var servicing = false
    private var serviceAgain = false
    /// Called once when the handshake finished (with the peer) or failed (with the error).
    var onSetup: ((Result<ConnectedPeer, ConnectionError>) -> Void)?
    /// Called once when the connection has ended and its socket is closed.
    var onEnd: ((ConnectionError) -> Void)?
    /// The receive buffers of the streams the application may hold (not the streams themselves: a stream the
    /// application drops tells the driver, ``streamDropped(_:)``).
    var streams: [UInt32: StreamInbound] = [:]
    var incomingStreams: AsyncStream<PeerStream>.Continuation?
    private var streamWriters: [(channel: UInt32, bytes: [UInt8], continuation: CheckedContinuation<Void, any Error>)] =
        []
    private var pingWaiters: [UInt64: CheckedContinuation<Duration, any Error>] = [:]
    private var closeError: ConnectionError?
    private var closeTimerArmed = false
    /// The UDP endpoint for unreliable messages (shared by a listener's connections, or this dialer's own).
    private let datagramEndpoint: DatagramEndpoint?
    private let ownsDatagramEndpoint: Bool
    private var datagramSealer: DatagramSealer?
    private var datagramDestination: SocketAddress?
    private var datagramReceiverID: UInt64?
    /// The largest unreliable message sent as one datagram, once the datagram path is up.
    private(set) var datagramPayloadLimit: Int?
    /// What the datagram path received for this connection, counted by its opener.
    let datagramCounters = DatagramCounters()

    /// The peer's address, for the log.
    private var remoteDescription: String { socket.map { "\($0.remoteAddress)" } ?? "a closed connection" }
    /// The configuration's logger, for connections.
    private let logger: Logger

    init(
        loop: EventLoop, core: ConnectionCore, socket: TCPConnection, datagramEndpoint: DatagramEndpoint? = nil,
        ownsDatagramEndpoint: Bool = false
    ) {
        self.loop = loop
        self.core = core
        self.socket = socket
        self.datagramEndpoint = datagramEndpoint
        self.ownsDatagramEndpoint = ownsDatagramEndpoint
        logger = core.configuration.logger.area(.connection)
        shared = ConnectionShared(
            sendBufferLimit: core.configuration.sendBufferLimit,
            unreliableBufferLimit: core.configuration.unreliableBufferLimit)
        LiveObjects.drivers.add(1, ordering: .relaxed)
    }

    deinit {
        LiveObjects.drivers.subtract(1, ordering: .relaxed)
    }

    /// Starts reading and writing. Loop thread only.
    /// Starts reading and writing; `initialBytes` are what was read from the socket before it was handed over (a
    /// relay's data connection, read up to the end of the bind's answer).
    func start(initialBytes: [UInt8] = []) {
        guard let socket else { return }
        socket.setHandlers(
            onBytes: { [self] bytes in
                inlineSendCredit.store(true, ordering: .relaxed)
                core.receive(bytes, now: loop.clock.now())
                service()
            },
            onClose: { [self] error in
                if let error {
                    core.receiveSocketError(error)
                } else {
                    core.receiveEndOfStream(now: loop.clock.now())
                }
                service()
            })
        // Large stream payloads of plaintext connections are read straight into the stream's buffer.
        socket.setDirectReads(
            target: { [self] in core.directReadTarget() },
            filled: { [self] count in core.receivedDirect(count: count, now: loop.clock.now()) })
        socket.setWritabilityHandler(lowWatermark: Self.lowWatermark) { [self] in service() }
        socket.setUnsentLimit(Self.kernelUnsentLimit)
        if !initialBytes.isEmpty {
            initialBytes.withUnsafeBytes { core.receive($0, now: loop.clock.now()) }
        }
        service()
    }

    /// Does everything that is due: moves queued sends into the core, writes output, delivers events,
    /// closes the socket when the core is done, and re-arms the timer. Loop thread only; re-entrant calls are
    /// folded into the running one.
    func service() {
        if servicing {
            serviceAgain = true
            return
        }
        servicing = true
        defer { servicing = false }
        repeat {
            serviceAgain = false
            serviceOnce()
        } while serviceAgain
    }

    private func serviceOnce() {
        let taken = shared.takeTaken()
        if taken > 0 { core.messagesTaken(taken) }
        var progress = true
        while progress {
            progress = false
            if moveOutbound() { progress = true }
            if writeOutput() { progress = true }
        }
        // A send that raced with the end of draining did not wake the loop: take it now if the core has room.
        if shared.drainPaused() && core.phase == .established && core.canQueue(channel: 0)
            && core.queuedBytes < core.configuration.sendBufferLimit
        {
            serviceAgain = true
        }
        deliverEvents()
        if core.finished, let socket {
            // The last frames (error, goodbye, close_notify) must reach the socket before it is shut.
            core.writeOutput(limit: Int.max) { socket.write($0) }
            if socket.bufferedByteCount == 0 {
                finishSocket(socket)
            } else {
                socket.shutdownWrite()
            }
        } else if core.wantsWriteShutdown, let socket, socket.bufferedByteCount == 0 {
            socket.shutdownWrite()
        }
        armTimer()
    }

    /// Moves messages from `send` and parked stream writes into the core while it has room; true if any moved.
    private func moveOutbound() -> Bool {
        // While closing, messages `send` accepted before the close still go out ahead of the goodbye.
        guard core.phase == .established || core.phase == .closing else { return false }
        var moved = false
        while core.queuedBytes < core.configuration.sendBufferLimit && core.canQueue(channel: 0) {
            let (batch, bytes) = shared.takeOutbound(upTo: core.queueRoom(channel: 0))
            if batch.isEmpty { break }
            do {
                try core.sendMessages(consume batch)
            } catch {
                core.fail(error)
                return true
            }
            shared.outboundSent(bytes)
            moved = true
        }
        var index = 0
        while index < streamWriters.count {
            let writer = streamWriters[index]
            if core.canQueue(channel: writer.channel) && core.queuedBytes < core.configuration.sendBufferLimit {
                streamWriters.remove(at: index)
                do {
                    try core.write(writer.bytes, channel: writer.channel)
                    writer.continuation.resume()
                } catch {
                    writer.continuation.resume(throwing: error)
                }
                moved = true
            } else {
                index += 1
            }
        }
        return moved
    }

    /// Writes the core's output while the socket takes it; true if anything was written.
    private func writeOutput() -> Bool {
        guard let socket else { return false }
        var wrote = false
        while socket.bufferedByteCount < Self.highWatermark {
            var wroteNow = false
            core.writeOutput(limit: Self.outputChunk) { (segments: UnsafeBufferPointer<UnsafeRawBufferPointer>) in
                socket.write(gathering: segments)
                wroteNow = true
            }
            guard wroteNow else { break }
            wrote = true
        }
        return wrote
    }

    private func deliverEvents() {
        // Consecutive messages are handed over under one lock; anything else first flushes them, so the
        // application sees every message before, say, the end of the connection.
        var messages: [[UInt8]] = []
        for event in core.takeEvents() {
            if case .message(_, let bytes) = event {
                messages.append(bytes)
                continue
            }
            if !messages.isEmpty {
                if shared.deliver(batch: messages) { serviceAgain = true }
                messages = []
            }
            switch event {
            case .established(let peer):
                logger.info(
                    """
                    \(remoteDescription): connected to '\(peer.displayName)' \(peer.claimedFingerprint) \
                    (\(peer.isAuthenticated ? "identity proven" : "identity claimed"), \(peer.protection))
                    """, metadata: peer.logMetadata)
                core.releaseIdleBuffers()  // the handshake's
                startDatagrams()
                onSetup?(.success(peer))
                onSetup = nil
            case .message:
                break  // batched above
            case .session(let message):
                if !shared.deliverSession(message) {
                    core.fail(
                        .sessionQueueFull(
                            messages: ConnectionShared.SessionInbox.maximumCount,
                            bytes: ConnectionShared.SessionInbox.maximumCharge))
                    serviceAgain = true
                }
            case .channelOpened(let channel, let kind, let name):
                guard kind != .message else { continue }
                // A channel the peer opened and already reset within the same read has no buffer any more:
                // the application still sees the stream, then its reset.
                let inbound =
                    core.inbound(channel: channel)
                    ?? StreamInbound(window: core.configuration.streamWindow)
                let stream = PeerStream(driver: self, channel: channel, name: name, inbound: inbound)
                streams[channel] = inbound
                // Streams nobody takes are refused, not piled up: the buffer holds at most the channel limit.
                if case .dropped = incomingStreams?.yield(stream) {
                    streams[channel] = nil
                    core.resetChannel(channel, code: 2)
                }
            case .channelFinished(let channel):
                streams[channel]?.finish(nil)
            case .channelReset(let channel, let code):
                // The core already ended the stream's buffer with this error and dropped its unread bytes.
                let error = ConnectionError.streamResetByPeer(code: code)
                streams.removeValue(forKey: channel)?.finish(error)
                failStreamWriters(channel: channel, error)
            case .channelGone(let channel):
                streams.removeValue(forKey: channel)?.finish(nil)
            case .pingAbandoned(let token):
                pingWaiters.removeValue(forKey: token)?.resume(
                    throwing: ConnectionError(
                        code: .internalFailure, reason: "more than 16 pings were outstanding; this one was forgotten"))
            case .pong(let token, let roundTrip):
                pingWaiters.removeValue(forKey: token)?.resume(returning: roundTrip)
            case .closed(let error):
                let orderly: Bool
                switch error.code {
                case .closedLocally, .closedByPeer: orderly = true
                default: orderly = false
                }
                logger.log(
                    level: orderly ? .info : .warning, "\(remoteDescription): closed: \(error.reason)",
                    metadata: core.peer?.logMetadata)
                closeError = error
                onSetup?(.failure(error))
                onSetup = nil
                shared.close(error)
                for stream in streams.values { stream.finish(error) }
                streams = [:]
                incomingStreams?.finish()
                for writer in streamWriters { writer.continuation.resume(throwing: error) }
                streamWriters = []
                for waiter in pingWaiters.values { waiter.resume(throwing: error) }
                pingWaiters = [:]
            }
        }
        if !messages.isEmpty, shared.deliver(batch: messages) { serviceAgain = true }
    }

    /// Registers this connection with the datagram endpoint once the core agreed on a datagram path.
    private func startDatagrams() {
        guard let endpoint = datagramEndpoint, let path = core.datagramPath, let socket,
            endpoint.localAddress.family == socket.remoteAddress.family
        else { return }
        let shared = shared
        guard let sealer = try? path.keys.makeSealer(),
            let opener = try? path.keys.makeOpener(counters: datagramCounters),
            endpoint.register(
                receiverID: path.keys.receiving.receiverID, opener: opener,
                handler: { payload in shared.deliverUnreliable(payload) })
        else { return }
        datagramSealer = sealer
        datagramReceiverID = path.keys.receiving.receiverID
        datagramDestination = SocketAddress(
            socket.remoteAddress.address, port: path.port, scopeID: socket.remoteAddress.scopeID)
        datagramPayloadLimit = DatagramSizing.maximumPayload(family: socket.remoteAddress.family)
    }

    /// Seals and sends one unreliable message; a datagram the kernel pushes back is dropped, as UDP would.
    func sendDatagram(_ message: [UInt8]) {
        guard let sealer = datagramSealer, let destination = datagramDestination, let endpoint = datagramEndpoint,
            let packet = try? sealer.seal(message)
        else { return }
        _ = try? endpoint.send(packet, to: destination)
    }

    private func finishSocket(_ socket: TCPConnection) {
        if let datagramReceiverID { datagramEndpoint?.unregister(receiverID: datagramReceiverID) }
        datagramReceiverID = nil
        datagramSealer = nil
        if ownsDatagramEndpoint { datagramEndpoint?.close() }
        socket.close()
        self.socket = nil
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        onEnd?(closeError ?? ConnectionError(code: .closedLocally, reason: "closed"))
        onEnd = nil
    }

    private func armTimer() {
        guard socket != nil else { return }
        let finishing = core.finished
        guard let deadline = finishing ? loop.clock.now() + core.configuration.closeTimeout : core.nextDeadline
        else { return }
        if finishing && closeTimerArmed { return }
        if let timerDeadline, let timer {
            // An earlier timer re-arms for a later deadline when it fires, except the close timer, which must
            // replace a keepalive timer (that one would close the socket before the last bytes are written).
            if timerDeadline <= deadline && !finishing { return }
            loop.cancelTimer(timer)
        }
        closeTimerArmed = finishing
        timerDeadline = deadline
        timer = loop.scheduleTimer(at: deadline) { [self] in
            timer = nil
            timerDeadline = nil
            if core.finished, let socket {
                // The peer never read our last bytes: give up on them.
                finishSocket(socket)
                return
            }
            core.tick(now: loop.clock.now())
            service()
            core.releaseIdleBuffers()
        }
    }

    /// Runs ``service()`` now when called on the loop thread (a task running on the loop, see
    /// ``EventLoop``'s `TaskExecutor` conformance), else as soon as the loop gets to it. Any thread.
    func serviceSoon() {
        if loop.inEventLoop {
            service()
        } else {
            loop.execute { [self] in service() }
        }
    }

    /// After a send: like ``serviceSoon()``, but the first send since data last arrived is written from the
    /// calling thread when the loop is idle (``EventLoop/runIfIdle(_:)``), saving the hand-off to the loop
    /// thread that a request/response exchange would otherwise pay on every message. Later sends go through
    /// the loop, which batches them: a task sending in a tight loop does not pay a system call per message.
    func serviceAfterSend() {
        if inlineSendCredit.exchange(false, ordering: .relaxed), loop.runIfIdle({ service() }) { return }
        serviceSoon()
    }

    // MARK: - Commands from the public objects (loop thread)

    func ping(_ continuation: CheckedContinuation<Duration, any Error>) {
        guard let token = core.sendPing(now: loop.clock.now()) else {
            continuation.resume(throwing: closeError ?? ConnectionError(code: .closedLocally, reason: "not open"))
            return
        }
        pingWaiters[token] = continuation
        service()
    }

    /// Starts a graceful close from any thread: new sends fail from this moment, not from when the loop gets to
    /// the close; if the loop has stopped, the connection is reported closed at once.
    func requestClose(code: UInt32, text: String) {
        shared.closeOutbound(ConnectionError(code: .closedLocally, reason: "the connection is closing: \(text)"))
        if !loop.execute({ [self] in close(code: code, text: text) }) {
            shared.close(ConnectionError(code: .closedLocally, reason: "the event loop was shut down"))
        }
    }

    private func close(code: UInt32, text: String) {
        core.close(now: loop.clock.now(), code: code, text: text, holdGoodbye: { [shared] in shared.hasOutbound })
        service()
    }

    /// Closes the socket at once, without goodbye: the peer sees the connection end.
    func abort() {
        core.finish(ConnectionError(code: .closedLocally, reason: "aborted by this side"))
        deliverEvents()
        if let socket { finishSocket(socket) }
    }

    func openStream(name: String) throws(ConnectionError) -> PeerStream {
        let channel = try core.openChannel(kind: .stream, name: name)
        guard let inbound = core.inbound(channel: channel) else {
            throw ConnectionError(code: .internalFailure, reason: "stream channel \(channel) has no receive buffer")
        }
        let stream = PeerStream(driver: self, channel: channel, name: name, inbound: inbound)
        streams[channel] = inbound
        service()
        return stream
    }

    func write(_ bytes: [UInt8], channel: UInt32, continuation: CheckedContinuation<Void, any Error>) {
        if let closeError {
            continuation.resume(throwing: closeError)
            return
        }
        streamWriters.append((channel, bytes, continuation))
        service()
    }

    func finishStream(_ channel: UInt32) throws(ConnectionError) {
        try core.finishChannel(channel)
        service()
    }

    /// The application dropped its stream object (loop thread).
    func streamDropped(_ channel: UInt32) {
        core.streamDropped(channel: channel)
        service()
    }

    func resetStream(_ channel: UInt32) {
        let error = ConnectionError.streamResetLocally()
        streams.removeValue(forKey: channel)?.discard(error)
        failStreamWriters(channel: channel, error)
        core.resetChannel(channel, code: 1)
        service()
    }

    private func failStreamWriters(channel: UInt32, _ error: ConnectionError) {
        let failed = streamWriters.filter { $0.channel == channel }
        streamWriters.removeAll { $0.channel == channel }
        for writer in failed { writer.continuation.resume(throwing: error) }
    }

    func streamConsumed(_ channel: UInt32, count: Int) {
        core.streamConsumed(channel: channel, count: count)
        service()
    }
}
