internal import MultipeerIO

/// One connection's protocol state, without any I/O: bytes from the socket go in through ``receive(_:now:)``,
/// bytes for the socket come out of ``writeOutput(limit:to:)``, timers are driven by ``tick(now:)`` and
/// ``nextDeadline``, and what happened comes out of ``takeEvents()``. The event-loop driver
/// (``ConnectionDriver``) and the in-memory tests run the same code.
///
/// Phases: preamble (settles TLS or plaintext) → handshake (TLS, or nothing) → hello exchange (versions,
/// identity, group proof, verification-code commitment) → confirming (the acceptor waits for the dialer's
/// code nonce) → established (frames, flow control, keepalive) → closing (goodbye sent, waiting for the peer's)
/// → closed. Every way out of it produces exactly one ``Event/closed(_:)``.
///
/// The code is split by concern: setup (`+Setup`: preamble, hello, verification code), received frames
/// (`+Frames`), messages and their credit (`+Messages`), application commands (`+Commands`), output
/// (`+Output`), the plaintext receive fast path (`+CutThrough`), and timers and the end (`+Lifecycle`). Its
/// state is grouped the same way, in value types with one concern each.
final class ConnectionCore {
    enum Role: Sendable {
        case dialer
        case acceptor
    }

    /// What the connection reports to its owner.
    enum Event {
        /// Both hellos were exchanged and checked (and, with TLS, the verification code agreed).
        case established(ConnectedPeer)
        /// A whole message arrived on a message channel.
        case message(channel: UInt32, bytes: [UInt8])
        /// A session-layer control message arrived.
        case session(SessionMessage)
        /// The peer opened a channel.
        case channelOpened(channel: UInt32, kind: Frame.ChannelKind, name: String)
        /// The peer will send nothing more on the channel.
        case channelFinished(channel: UInt32)
        /// The peer aborted the channel.
        case channelReset(channel: UInt32, code: UInt32)
        /// The channel is finished both ways or reset: the core forgot it.
        case channelGone(channel: UInt32)
        /// A pong answered one of our pings.
        case pong(token: UInt64, roundTrip: Duration)
        /// A ping was forgotten unanswered (more than ``Keepalive/maximumOutstanding``); its waiter gives up.
        case pingAbandoned(token: UInt64)
        /// The connection ended; nothing follows.
        case closed(ConnectionError)
    }

    enum Phase: CustomStringConvertible {
        case preamble
        case handshake
        case hello
        /// The acceptor sent its hello and waits for the dialer's verification-code nonce.
        case confirming
        case established
        /// Goodbye sent (or being flushed); waiting for the peer's goodbye or end of stream.
        case closing
        case closed

        var description: String {
            switch self {
            case .preamble: "preamble"
            case .handshake: "handshake"
            case .hello: "hello"
            case .confirming: "confirmation"
            case .established: "established"
            case .closing: "closing"
            case .closed: "closed"
            }
        }

        /// Whether the connection is being set up (the handshake deadline applies).
        var isSetup: Bool { self == .preamble || self == .handshake || self == .hello || self == .confirming }
    }

    let role: Role
    let configuration: ConnectionConfiguration
    let expectedPeer: PeerFingerprint?
    var phase: Phase = .preamble
    var peer: ConnectedPeer?
    /// A value both ends of this connection share and nobody else knows (a TLS exporter value, exported before
    /// the handshake state is released), so the session layer can bind its proofs to this connection; empty on
    /// plaintext, where nothing is secret.
    var sessionBinding: [UInt8] = []
    let makeTLS: (Role) throws(ConnectionError) -> any RecordLayer
    let handshakeDeadline: IOInstant
    /// This side's datagram UDP port, announced in the hello of a TLS connection; nil for none.
    let localDatagramPort: UInt16?

    // Setup (ConnectionCore+Setup)
    var record: (any RecordLayer)?
    var setup: SetupState
    /// The peer's datagram port and the keys for both directions, once established over TLS with a peer that
    /// announced a port.
    var datagramPath: (port: UInt16, keys: DatagramKeys)?
    /// The connection ended while this acceptor waited for the dialer's code nonce (see ``finish(_:)``).
    var endedWhileConfirming = false

    // Frames and channels
    var decoder: FrameDecoder
    let encoder: FrameEncoder
    var flow: FlowController
    var scheduler: FrameScheduler
    var reassembler: MessageReassembler
    var channels: ChannelTable
    var delivered = DeliveredMessages()
    var cutThrough = PlaintextCutThrough()
    /// The channel ``sendMessage(_:channel:)`` uses: this side's first message channel.
    var defaultMessageChannel: UInt32 = 0
    /// Application bytes queued in the scheduler and not yet framed.
    var queuedBytes = 0

    // Lifecycle
    var keepalive: Keepalive
    var ending = GracefulClose()
    /// Set once the output after the last frame (goodbye, error, refusal) is queued: the owner closes the socket
    /// when it has written everything.
    var finished = false
    var events: [Event] = []

    // Output
    /// Bytes before any record layer exists: the preamble each way.
    var rawOutput: [UInt8] = []
    /// Headers (and small frames) of the next gathering write; reused.
    var gatherHeaders: [UInt8] = []

    /// Creates the state of a new TCP connection.
    /// - Parameters:
    ///   - role: Dialer (TLS client, sends the offer) or acceptor.
    ///   - configuration: The local configuration (already validated).
    ///   - expectedPeer: For a dialer, the identity it expects (from discovery), or nil to accept any.
    ///   - now: The current time; the handshake deadline starts here.
    ///   - datagramPort: This side's datagram UDP port, or nil.
    ///   - makeTLS: Makes the TLS record layer for a role, once the preamble chose TLS.
    init(
        role: Role, configuration: ConnectionConfiguration, expectedPeer: PeerFingerprint?, now: IOInstant,
        datagramPort: UInt16? = nil, makeTLS: @escaping (Role) throws(ConnectionError) -> any RecordLayer
    ) {
        localDatagramPort = datagramPort
        self.role = role
        self.configuration = configuration
        self.expectedPeer = expectedPeer
        self.makeTLS = makeTLS
        setup = SetupState(
            preference: configuration.encryption,
            tlsRequirement: SetupState.tlsRequirement(expecting: expectedPeer, groupSecret: configuration.groupSecret))
        decoder = FrameDecoder(limits: configuration.frameLimits)
        encoder = FrameEncoder(limits: configuration.frameLimits)
        flow = FlowController(configuration: configuration.flowControl)
        scheduler = FrameScheduler(limits: configuration.schedulerLimits)
        reassembler = MessageReassembler(
            limits: MessageReassembler.Limits(maximumMessageLength: UInt64(configuration.maximumMessageLength)))
        channels = ChannelTable(isDialer: role == .dialer)
        handshakeDeadline = now + configuration.handshakeTimeout
        keepalive = Keepalive(
            interval: configuration.keepaliveInterval, silenceTimeout: configuration.silenceTimeout, now: now)
        LiveObjects.cores.add(1, ordering: .relaxed)
        if role == .dialer { rawOutput = setup.offer().bytes }
    }

    deinit {
        LiveObjects.cores.subtract(1, ordering: .relaxed)
    }

    /// Whether the connection ended.
    var isClosed: Bool { phase == .closed }

    /// Takes what happened since the last call.
    func takeEvents() -> [Event] {
        guard !events.isEmpty else { return [] }
        defer { events = [] }
        return events
    }

    // MARK: - Input

    /// Feeds bytes read from the socket.
    func receive(_ bytes: [UInt8], now: IOInstant) {
        bytes.withUnsafeBytes { receive($0, now: now) }
    }

    /// Feeds bytes read from the socket; they are copied (or decoded) before this returns.
    func receive(_ bytes: UnsafeRawBufferPointer, now: IOInstant) {
        guard phase != .closed, !bytes.isEmpty else { return }
        keepalive.heard(at: now)
        do throws(ConnectionError) {
            if phase == .preamble {
                guard let rest = try receivePreamble(bytes) else { return }
                guard phase != .closed, let record else { return }
                try rest.withUnsafeBytesTyped { rest throws(ConnectionError) in
                    try record.receivedFromNetwork(rest, into: &decoder)
                }
            } else if phase == .established || phase == .closing, cutThrough.isActive {
                try receivePlaintext(bytes, now: now)
                return
            } else {
                try record?.receivedFromNetwork(bytes, into: &decoder)
            }
            try pump(now: now)
        } catch {
            fail(error)
        }
    }

    /// The socket reached end of stream (the peer shut down its side, or the connection broke without error).
    func receiveEndOfStream(now: IOInstant) {
        guard phase != .closed else { return }
        if let goodbye = ending.goodbyeReceived {
            finish(.closedByPeer(code: goodbye.code, text: goodbye.text))
        } else if ending.goodbyeSent {
            finish(.closedLocally("the connection was closed by this side"))
        } else {
            finish(.connectionLost(duringPhase: phase))
        }
    }

    /// The socket failed.
    func receiveSocketError(_ error: SystemCallError) {
        guard phase != .closed else { return }
        finish(.socketFailed(error, afterGoodbye: ending.goodbyeReceived != nil))
    }

    /// Advances the handshake and decodes whatever application bytes the record layer holds.
    func pump(now: IOInstant) throws(ConnectionError) {
        guard let record else { return }
        if phase == .handshake {
            guard try record.advanceHandshake() else { return }
            try handshakeFinished(record)
        }
        while phase != .closed && !finished {
            // Decrypted straight into the decoder, in bounded steps, each decoded before the next.
            let (opened, closeNotify) = try record.open(into: &decoder, maximum: 98_304)
            try decodeBuffered(now: now)
            if closeNotify {
                receiveEndOfStream(now: now)
                return
            }
            if opened == 0 { break }
        }
    }

    /// Handles every whole frame in the decoder.
    func decodeBuffered(now: IOInstant) throws(ConnectionError) {
        while phase != .closed && !finished {
            // Stream bytes and message fragments go from the decoder's buffer on without a frame in between.
            if phase == .established || phase == .closing {
                if try decoder.nextChannelData({ channel, bytes throws(ConnectionError) in
                    try receiveStreamData(channel: channel, bytes)
                }) {
                    continue
                }
                if try decoder.nextMessageFragment({ channel, id, total, isLast, bytes throws(ConnectionError) in
                    try receiveFragment(channel: channel, id: id, totalLength: total, isLast: isLast, bytes)
                }) {
                    continue
                }
            }
            let frame: Frame?
            do {
                frame = try decoder.next()
            } catch {
                throw .badFrame(error)
            }
            guard let frame else { break }
            if phase.isSetup {
                try handleSetupFrame(frame)
            } else {
                try handle(frame, now: now)
            }
        }
    }
}
