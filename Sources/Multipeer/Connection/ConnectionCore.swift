internal import MultipeerIO

/// One connection's protocol state, without any I/O: bytes from the socket go in through ``receive(_:now:)``,
/// bytes for the socket come out of ``takeOutput(limit:)``, timers are driven by ``tick(now:)`` and
/// ``nextDeadline``, and what happened comes out of ``takeEvents()``. The event-loop driver
/// (``PeerConnection``) and the in-memory tests run the same code.
///
/// Phases: preamble (settles TLS or plaintext) → handshake (TLS, or nothing) → hello exchange (versions,
/// identity, group proof) → established (frames, flow control, keepalive) → closing (goodbye sent, waiting
/// for the peer's) → closed. Every way out of it produces exactly one ``Event/closed(_:)``.
final class ConnectionCore {
    enum Role: Sendable {
        case dialer
        case acceptor
    }

    /// What the connection reports to its owner.
    enum Event {
        /// Both hellos were exchanged and checked.
        case established(ConnectedPeer)
        /// A whole message arrived on a message channel.
        case message(channel: UInt32, bytes: [UInt8])
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
        /// A ping was forgotten unanswered (more than 16 outstanding); its waiter should give up.
        case pingAbandoned(token: UInt64)
        /// The connection ended; nothing follows.
        case closed(ConnectionError)
    }

    enum Phase {
        case preamble
        case handshake
        case hello
        case established
        /// Goodbye sent (or being flushed); waiting for the peer's goodbye or end of stream.
        case closing
        case closed
    }

    struct ChannelState {
        var kind: Frame.ChannelKind
        var isLocal: Bool
        var localOpen = true
        var remoteOpen = true
        /// Where the peer's bytes on a stream or resource channel wait for the reader, who reports what it
        /// took with ``ConnectionCore/streamConsumed(channel:count:)``; nil for message channels.
        var inbound: StreamInbound?
    }

    let role: Role
    let configuration: ConnectionConfiguration
    let expectedPeer: PeerFingerprint?
    private(set) var phase: Phase = .preamble
    private(set) var peer: ConnectedPeer?
    private let makeTLS: (Role) throws(ConnectionError) -> any RecordLayer

    private var record: (any RecordLayer)?
    private var preambleInput: [UInt8] = []
    private var rawOutput: [UInt8] = []
    private var localNonce: [UInt8]
    private var remoteNonce: [UInt8] = []
    private var decoder: FrameDecoder
    private let encoder: FrameEncoder
    var flow: FlowController
    var scheduler: FrameScheduler
    var reassembler: MessageReassembler
    private var events: [Event] = []

    private let handshakeDeadline: IOInstant
    private var lastReceive: IOInstant
    private var lastPing: IOInstant?
    private var pings: [UInt64: IOInstant] = [:]
    private var nextPingToken: UInt64 = 1
    private var closeDeadline: IOInstant?
    private var closeRequested = false
    private var goodbyeSent = false
    private var goodbyeReceived: (code: UInt32, text: String)?
    private var closeReason: ConnectionError?
    /// Set once the output after the last frame (goodbye, error, refusal) is queued: the owner closes the socket
    /// when it has written everything.
    private(set) var finished = false

    var channels: [UInt32: ChannelState] = [:]
    private var nextLocalChannel: UInt32
    /// The channel ``sendMessage(_:)`` uses: this side's first message channel.
    private(set) var defaultMessageChannel: UInt32 = 0
    /// Application bytes queued in the scheduler and not yet framed.
    private(set) var queuedBytes = 0
    /// Messages and stream bytes delivered to the application and not yet taken by it.
    private(set) var unreadBytes = 0
    /// Message credit held back while the application is behind, per channel.
    private var deferredCredit: [UInt32: Int] = [:]
    /// The most recent round-trip time measured by a ping.
    private(set) var lastRoundTrip: Duration?
    /// This side's datagram UDP port, announced in the hello of a TLS connection; nil for none.
    let localDatagramPort: UInt16?
    /// The peer's datagram port and the keys for both directions, once established over TLS with a peer that
    /// announced a port.
    private(set) var datagramPath: (port: UInt16, keys: DatagramKeys)?

    /// Creates the state of a new TCP connection.
    /// - Parameters:
    ///   - role: Dialer (TLS client, sends the offer) or acceptor.
    ///   - configuration: The local configuration.
    ///   - expectedPeer: For a dialer, the identity it expects (from discovery), or nil to accept any.
    ///   - now: The current time; the handshake deadline starts here.
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
        localNonce = SecureRandom.bytes(Preamble.nonceLength)
        decoder = FrameDecoder(limits: configuration.frameLimits)
        encoder = FrameEncoder(limits: configuration.frameLimits)
        flow = FlowController(configuration: configuration.flowControl)
        scheduler = FrameScheduler(limits: configuration.scheduler)
        reassembler = MessageReassembler()
        handshakeDeadline = now + configuration.handshakeTimeout
        lastReceive = now
        nextLocalChannel = role == .dialer ? 1 : 2
        if role == .dialer {
            rawOutput =
                Preamble(
                    kind: .offer, preference: configuration.encryption, outcome: .none, nonce: localNonce
                ).bytes
        }
    }

    /// The answer for a connection the acceptor has no room for: send it and close.
    static func busyAnswer(preference: EncryptionPreference) -> [UInt8] {
        Preamble(
            kind: .answer, preference: preference, outcome: .busy,
            nonce: [UInt8](repeating: 0, count: Preamble.nonceLength)
        ).bytes
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
        lastReceive = now
        do throws(ConnectionError) {
            if phase == .preamble {
                preambleInput.append(contentsOf: bytes)
                guard preambleInput.count >= Preamble.length else { return }
                let rest = Array(preambleInput[Preamble.length...])
                try handlePreamble(preambleInput[0..<Preamble.length])
                preambleInput = []
                guard phase != .closed, let record else { return }
                try rest.withUnsafeBytesTyped { rest throws(ConnectionError) in
                    try record.receivedFromNetwork(rest, into: &decoder)
                }
            } else if phase == .established || phase == .closing, isPlaintext {
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
        if let goodbye = goodbyeReceived {
            finish(
                ConnectionError(
                    code: .closedByPeer(code: goodbye.code, text: goodbye.text),
                    reason: "the peer closed the connection (goodbye \(goodbye.code): \(goodbye.text))"))
        } else if goodbyeSent {
            finish(ConnectionError(code: .closedLocally, reason: "the connection was closed by this side"))
        } else {
            let during = phase == .established ? "" : " during the \(phase) phase"
            finish(
                ConnectionError(
                    code: .connectionLost, reason: "the peer closed the TCP connection without a goodbye\(during)"))
        }
    }

    /// The socket failed.
    func receiveSocketError(_ error: SystemCallError) {
        guard phase != .closed else { return }
        if error.errno == 104 /* ECONNRESET */ && goodbyeReceived == nil {
            finish(ConnectionError(code: .connectionLost, reason: "the peer reset the TCP connection (\(error))"))
        } else {
            finish(ConnectionError(code: .socket(call: error.call, errno: error.errno), reason: "\(error)"))
        }
    }

    private func handlePreamble(_ bytes: ArraySlice<UInt8>) throws(ConnectionError) {
        let expected: Preamble.Kind = role == .dialer ? .answer : .offer
        let preamble: Preamble
        do {
            preamble = try Preamble.decode(bytes, expected: expected)
        } catch {
            switch error {
            case .notAPeer:
                throw ConnectionError(
                    code: .notAPeer, reason: "the far side's first bytes are not the swift-multipeer preamble")
            case .unsupportedVersion(let version):
                if role == .acceptor {
                    rawOutput +=
                        Preamble(
                            kind: .answer, preference: configuration.encryption, outcome: .unsupportedVersion,
                            nonce: localNonce
                        ).bytes
                }
                throw ConnectionError(
                    code: .unsupportedVersion(major: version),
                    reason: "the peer uses preamble version \(version); this side speaks \(Preamble.version)")
            case .malformed(let detail):
                throw ConnectionError(code: .protocolViolation, reason: "malformed preamble: \(detail)")
            }
        }
        remoteNonce = preamble.nonce
        let local = configuration.encryption
        let outcome: Preamble.Outcome
        if role == .acceptor {
            outcome = Preamble.negotiate(dialer: preamble.preference, acceptor: local)
            rawOutput += Preamble(kind: .answer, preference: local, outcome: outcome, nonce: localNonce).bytes
        } else {
            outcome = preamble.outcome
        }
        switch outcome {
        case .tls where local.allowsEncryption:
            record = try makeTLS(role)
        case .plaintext where local.allowsPlaintext:
            record = PlaintextRecordLayer()
            isPlaintext = true
        case .encryptionMismatch:
            let (dialer, acceptor) = role == .dialer ? (local, preamble.preference) : (preamble.preference, local)
            throw ConnectionError(
                code: .encryptionMismatch(local: local, remote: preamble.preference),
                reason: "encryption preferences exclude each other: the dialer's is .\(dialer), the acceptor's is "
                    + ".\(acceptor); .required and .none never connect")
        case .busy:
            throw ConnectionError(
                code: .tooManyPendingHandshakes,
                reason: "the peer refused the connection: it has too many handshakes in progress")
        case .unsupportedVersion:
            throw ConnectionError(
                code: .unsupportedVersion(major: Preamble.version),
                reason: "the peer does not speak preamble version \(Preamble.version)")
        default:
            throw ConnectionError(
                code: .protocolViolation,
                reason: "the acceptor chose \(outcome), which this side's preference .\(local) did not offer")
        }
        phase = .handshake
    }

    /// Advances the handshake and decodes whatever application bytes the record layer holds.
    private func pump(now: IOInstant) throws(ConnectionError) {
        guard let record else { return }
        if phase == .handshake {
            guard try record.advanceHandshake() else { return }
            phase = .hello
            // An acceptor with a group secret speaks second: it checks the dialer's proof before sending its
            // own, so a dialer that does not know the secret learns nothing it could test guesses against.
            if !(role == .acceptor && configuration.groupSecret != nil) { try sendHello(record) }
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
    private func decodeBuffered(now: IOInstant) throws(ConnectionError) {
        while phase != .closed && !finished {
            // Stream bytes and message fragments go from the decoder's buffer on without a frame in between.
            if phase != .hello {
                if try decoder.nextChannelData({ channel, bytes throws(ConnectionError) in
                    try handleData(channel: channel, bytes)
                }) {
                    continue
                }
                if try decoder.nextMessageFragment({ channel, id, total, isLast, bytes throws(ConnectionError) in
                    try handleFragment(channel: channel, id: id, totalLength: total, isLast: isLast, bytes)
                }) {
                    continue
                }
            }
            let frame: Frame?
            do {
                frame = try decoder.next()
            } catch {
                throw decodingFailure(error)
            }
            guard let frame else { break }
            try handle(frame, now: now)
        }
    }

    /// The rest of a `channelData` payload whose header was taken by the cut-through path, and where it goes
    /// (nil: a channel already forgotten, whose bytes are dropped).
    private var passThrough: (inbound: StreamInbound?, remaining: Int) = (nil, 0)
    /// Whether the preamble settled on plaintext (received bytes can take the cut-through path).
    private var isPlaintext = false
    /// The stream buffer holding a reservation made by ``directReadTarget()``.
    private var directInbound: StreamInbound?
    /// Stream data frames at least this long make the next reads go straight into the stream's buffer.
    static let directReadMinimum = 8192
    /// Whether the last frame started was stream data of at least ``directReadMinimum`` bytes.
    private var inBulkData = false

    /// On a plaintext connection receiving large stream data frames: room in the stream's buffer for the rest
    /// of the current payload, for the next socket read to fill directly (no copy at all on this side), or
    /// an empty buffer between two such frames, so the next read takes little more than the next header and
    /// the read after it goes direct. Call ``receivedDirect(count:now:)`` after that read, whatever it returned.
    func directReadTarget() -> UnsafeMutableRawBufferPointer? {
        guard isPlaintext, inBulkData, phase == .established || phase == .closing, !finished, directInbound == nil
        else { return nil }
        if passThrough.remaining == 0 { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        guard let inbound = passThrough.inbound, let room = inbound.reserve(upTo: passThrough.remaining) else {
            return nil
        }
        directInbound = inbound
        return room
    }

    /// `count` bytes of the payload arrived in the room ``directReadTarget()`` gave.
    func receivedDirect(count: Int, now: IOInstant) {
        directInbound?.commit(count)
        directInbound = nil
        guard count > 0, phase != .closed else { return }
        lastReceive = now
        passThrough.remaining -= count
    }

    /// Received plaintext once established: stream data goes from `bytes` (the socket's buffer) straight to the
    /// stream's buffer, everything else through the decoder. The same byte streams are accepted and refused,
    /// in the same order, as by decoding every frame, with two differences of timing: a stream data frame is
    /// checked against the window (and its channel) as soon as its header arrives, and its payload reaches the
    /// reader as it arrives, so a connection that breaks in the middle of a frame has already delivered part
    /// of it (the stream then ends with the connection's error).
    private func receivePlaintext(_ bytes: UnsafeRawBufferPointer, now: IOInstant) throws(ConnectionError) {
        var input = bytes
        while !input.isEmpty && phase != .closed && !finished {
            if passThrough.remaining > 0 {
                let count = min(passThrough.remaining, input.count)
                passThrough.inbound?.append(UnsafeRawBufferPointer(rebasing: input[..<count]))
                passThrough.remaining -= count
                input = UnsafeRawBufferPointer(rebasing: input[count...])
                continue
            }
            if let (channel, length) = decoder.takeChannelDataHeader(from: &input) {
                // The whole payload is checked against the window now, as decoding the frame would.
                let accepted = try acceptFlowControlled(channel: channel, count: length, kind: .stream)
                passThrough = (accepted ? channels[channel]?.inbound : nil, length)
                inBulkData = length >= Self.directReadMinimum
                continue
            }
            inBulkData = false
            decoder.appendFrameBytes(from: &input)
            try decodeBuffered(now: now)
        }
    }

    private func decodingFailure(_ error: FrameDecodingError) -> ConnectionError {
        if case .unsupportedVersion(let major, _) = error {
            return ConnectionError(code: .unsupportedVersion(major: major), reason: error.description)
        }
        return ConnectionError(code: .protocolViolation, reason: "the peer sent a bad frame: \(error)")
    }

    private var helloSent = false

    private func sendHello(_ record: any RecordLayer) throws(ConnectionError) {
        guard !helloSent else { return }
        helloSent = true
        var proof: [UInt8] = []
        if let secret = configuration.groupSecret {
            proof = secret.proof(binding: try groupBinding(record), isDialer: role == .dialer)
        }
        // Datagrams need keys from the TLS session: a plaintext connection sends unreliable messages reliably.
        let port = record is TLSRecordLayer ? localDatagramPort : nil
        let hello = Frame.Hello(
            capabilities: port == nil ? [] : [.unreliableDatagrams], displayName: configuration.identity.displayName,
            fingerprint: configuration.identity.fingerprint.bytes, groupProof: proof, datagramPort: port)
        try enqueueControl(.hello(hello))
    }

    private func groupBinding(_ record: any RecordLayer) throws(ConnectionError) -> [UInt8] {
        if let binding = try record.exportKeyingMaterial(label: GroupSecret.exporterLabel, length: 32) {
            return binding
        }
        let (dialer, acceptor) = role == .dialer ? (localNonce, remoteNonce) : (remoteNonce, localNonce)
        return GroupSecret.plaintextBinding(dialerNonce: dialer, acceptorNonce: acceptor)
    }

    func enqueueControl(_ frame: Frame) throws(ConnectionError) {
        do {
            try scheduler.enqueueControl(frame)
        } catch {
            throw ConnectionError(
                code: .internalFailure, reason: "the peer made this side queue too many control frames: \(error)")
        }
    }

    // MARK: - Timers

    /// The next time ``tick(now:)`` has work to do.
    var nextDeadline: IOInstant? {
        switch phase {
        case .preamble, .handshake, .hello:
            return handshakeDeadline
        case .established, .closing:
            var deadline = lastReceive + configuration.silenceTimeout
            let pingDue = max(lastReceive, lastPing ?? lastReceive) + configuration.keepaliveInterval
            deadline = min(deadline, pingDue)
            if let closeDeadline { deadline = min(deadline, closeDeadline) }
            return deadline
        case .closed:
            return nil
        }
    }

    /// Runs the timers due at `now`: the handshake deadline, keepalive pings, the silence timeout and the
    /// graceful-close timeout.
    func tick(now: IOInstant) {
        switch phase {
        case .preamble, .handshake, .hello:
            if now >= handshakeDeadline {
                let limit = configuration.handshakeTimeout
                fail(
                    ConnectionError(
                        code: .handshakeTimedOut(limit: limit),
                        reason: "the handshake did not finish within \(limit) (stuck in the \(phase) phase)"))
            }
        case .established, .closing:
            if now - lastReceive >= configuration.silenceTimeout {
                let limit = configuration.silenceTimeout
                fail(
                    ConnectionError(
                        code: .peerWentSilent(limit: limit),
                        reason:
                            "nothing arrived from the peer for \(limit), not even a pong: it crashed, lost its link, "
                            + "or stopped running"), notifyPeer: false)
                return
            }
            if let closeDeadline, now >= closeDeadline {
                finish(closeReason ?? ConnectionError(code: .closedLocally, reason: "closed by this side"))
                return
            }
            let pingDue = max(lastReceive, lastPing ?? lastReceive) + configuration.keepaliveInterval
            if now >= pingDue { sendPing(now: now) }
        case .closed:
            break
        }
    }

    /// Sends a ping now; its pong reports the round-trip time.
    /// - Returns: The ping's token, or nil when the connection cannot send one.
    @discardableResult
    func sendPing(now: IOInstant) -> UInt64? {
        guard phase == .established || (phase == .closing && !goodbyeSent) else { return nil }
        let token = nextPingToken
        nextPingToken &+= 1
        // Only the most recent pings are remembered; a peer that never answers is caught by the silence timeout.
        if pings.count >= 16, let oldest = pings.min(by: { $0.value < $1.value })?.key {
            pings[oldest] = nil
            events.append(.pingAbandoned(token: oldest))
        }
        pings[token] = now
        lastPing = now
        do {
            try enqueueControl(.ping(token: token))
        } catch {
            fail(error)
            return nil
        }
        return token
    }

    // MARK: - Failure and close

    /// Ends the connection with `error`; tells the peer why with an error frame when the secure channel is up.
    func fail(_ error: ConnectionError, notifyPeer: Bool = true) {
        guard phase != .closed else { return }
        if notifyPeer, let record, phase == .established || phase == .hello || phase == .closing,
            let code = wireCode(for: error.code)
        {
            sealFinalFrame(.error(code: code.rawValue, text: validUTF8Prefix(error.reason)), into: record)
        }
        finish(error)
    }

    /// The longest prefix of `text`, in whole characters, that fits a goodbye or error frame's text.
    private func validUTF8Prefix(_ text: String) -> String {
        var result = ""
        var length = 0
        for character in text {
            length += character.utf8.count
            if length > configuration.frameLimits.maximumTextLength { break }
            result.append(character)
        }
        return result
    }

    /// Seals `frame` straight into the record layer, ahead of anything still queued, and ends this side's output
    /// (TLS close_notify): the last frame of a connection that is ending now.
    private func sealFinalFrame(_ frame: Frame, into record: (any RecordLayer)?) {
        guard let record else { return }
        var bytes: [UInt8] = []
        guard (try? encoder.encode(frame, into: &bytes)) != nil else { return }
        try? record.seal(bytes)
        record.closeOutput()
    }

    private func wireCode(for code: ConnectionError.Code) -> WireErrorCode? {
        switch code {
        case .protocolViolation, .notAPeer: .protocolViolation
        case .flowControlViolation: .flowControlViolation
        case .groupSecretMismatch: .groupSecretMismatch
        case .identityMismatch: .identityMismatch
        case .unsupportedVersion: .unsupportedVersion
        case .internalFailure: .internalFailure
        default: nil
        }
    }

    /// Marks the connection closed and reports it once.
    func finish(_ error: ConnectionError) {
        guard phase != .closed else { return }
        closeReason = error
        phase = .closed
        finished = true
        events.append(.closed(error))
    }

    /// Starts a graceful close: queued data is sent, then a goodbye; the connection ends when the peer
    /// answers or after ``ConnectionConfiguration/closeTimeout``.
    func close(now: IOInstant, code: UInt32 = 0, text: String = "closed", holdGoodbye: @escaping () -> Bool = { false })
    {
        self.holdGoodbye = holdGoodbye
        switch phase {
        case .closed, .closing:
            return
        case .preamble, .handshake, .hello:
            finish(ConnectionError(code: .closedLocally, reason: "closed by this side before the handshake finished"))
        case .established:
            closeRequested = true
            closeReason = ConnectionError(code: .closedLocally, reason: "closed by this side: \(text)")
            closeDeadline = now + configuration.closeTimeout
            pendingGoodbye = (code, text)
            phase = .closing
        }
    }

    private var pendingGoodbye: (code: UInt32, text: String)?
    /// While true, the goodbye waits: the owner still has accepted messages to hand over.
    private var holdGoodbye: () -> Bool = { false }

    // MARK: - Output

    /// Bytes for the socket: the preamble, TLS handshake records, and frames chosen by the scheduler, at most
    /// about `limit` bytes of frames (whole frames, so a little more).
    func takeOutput(limit: Int = 262_144) -> [UInt8] {
        var output: [UInt8] = []
        writeOutput(limit: limit) { (segments: UnsafeBufferPointer<UnsafeRawBufferPointer>) in
            for segment in segments { output.append(contentsOf: segment) }
        }
        return output
    }

    /// The most pieces of data one gathering write refers to (with the headers between them, at most 64
    /// buffers).
    static let gatheredPayloadLimit = 31
    /// Data at least this long is sent from the caller's array by a gathering write; shorter data is copied
    /// next to its header (a buffer per tiny message would cost more than the copy).
    static let gatherThreshold = 4096
    /// Headers (and small frames) of the next gathering write; reused.
    private var gatherHeaders: [UInt8] = []

    /// Like ``writeOutput(limit:to:)``, but lends `sink` the output as buffers to send in order with one
    /// gathering write. On an established plaintext connection, stream data and message fragments of at least
    /// ``gatherThreshold`` bytes are not copied at all: they are sent straight from the arrays the application
    /// gave. Otherwise `sink` gets one buffer at a time.
    func writeOutput(limit: Int, gathering sink: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Void) {
        guard isPlaintext, phase == .established, !closeRequested, rawOutput.isEmpty, let record,
            record.pendingNetworkOutput == 0
        else {
            writeOutput(limit: limit) { bytes in
                withUnsafePointer(to: bytes) { sink(UnsafeBufferPointer(start: $0, count: 1)) }
            }
            return
        }
        gatherHeaders.removeAll(keepingCapacity: true)
        var pieces: [(headerEnd: Int, payload: ArraySlice<UInt8>)] = []
        var total = 0
        while total < limit && pieces.count < Self.gatheredPayloadLimit {
            let start = gatherHeaders.count
            let next: (frame: FrameScheduler.EncodedFrame, payload: ArraySlice<UInt8>)?
            do {
                next = try scheduler.encodeNext(
                    flow: &flow, encoder: encoder, into: &gatherHeaders, gatheringFrom: Self.gatherThreshold)
            } catch {
                fail(ConnectionError(code: .internalFailure, reason: "could not encode a frame: \(error)"))
                return
            }
            guard let next else { break }
            accountSent(next.frame)
            total += gatherHeaders.count - start + next.payload.count
            if !next.payload.isEmpty { pieces.append((gatherHeaders.count, next.payload)) }
        }
        guard total > 0 else { return }
        gatherHeaders.withUnsafeBytes { headers in
            var segments: [UnsafeRawBufferPointer] = []
            segments.reserveCapacity(2 * pieces.count + 1)
            Self.withSegments(headers, from: 0, pieces[...], &segments, sink)
        }
    }

    /// Lends `sink` the headers and payloads in wire order: each piece's headers (up to `headerEnd`), then its
    /// payload, then the headers after the last piece. Recursive, so every payload's memory stays lent.
    private static func withSegments(
        _ headers: UnsafeRawBufferPointer, from start: Int,
        _ pieces: ArraySlice<(headerEnd: Int, payload: ArraySlice<UInt8>)>,
        _ segments: inout [UnsafeRawBufferPointer], _ sink: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Void
    ) {
        guard let piece = pieces.first else {
            if start < headers.count { segments.append(UnsafeRawBufferPointer(rebasing: headers[start...])) }
            segments.withUnsafeBufferPointer(sink)
            return
        }
        segments.append(UnsafeRawBufferPointer(rebasing: headers[start..<piece.headerEnd]))
        piece.payload.withUnsafeBytes { payload in
            segments.append(payload)
            withSegments(headers, from: piece.headerEnd, pieces.dropFirst(), &segments, sink)
        }
    }

    /// Like ``takeOutput(limit:)``, but lends the bytes to `sink` (once or twice; not at all when there are
    /// none) instead of copying them into a new array; the memory is reused for the next output.
    func writeOutput(limit: Int, to sink: (UnsafeRawBufferPointer) -> Void) {
        if !rawOutput.isEmpty {
            rawOutput.withUnsafeBytes(sink)
            rawOutput = []
        }
        guard let record else { return }
        if phase == .established || phase == .hello || phase == .closing, !finished {
            fillRecordLayer(record, limit: limit)
        }
        record.drainNetworkOutput(sink)
    }

    /// Frees the buffers kept for reuse between reads and writes wherever they hold nothing. The driver calls
    /// this when the connection is established and on every timer (keepalive) tick, so an idle connection
    /// holds none while a busy one reuses them instead of allocating (and page-faulting) for every batch.
    func releaseIdleBuffers() {
        decoder.releaseIdleBuffer()
        record?.releaseIdleBuffers()
        for state in channels.values { state.inbound?.releaseIfEmpty() }
    }

    /// Frames from the scheduler, sealed into the record layer until `limit` bytes are pending.
    private func fillRecordLayer(_ record: any RecordLayer, limit: Int) {
        let room = limit - record.pendingNetworkOutput
        guard room > 0, !goodbyeSent else { return }
        var failure: ConnectionError?
        do {
            try record.seal { plaintext in
                let start = plaintext.count
                while !goodbyeSent && plaintext.count - start < room {
                    do {
                        guard let sent = try scheduler.encodeNext(flow: &flow, encoder: encoder, into: &plaintext)
                        else { break }
                        accountSent(sent)
                    } catch {
                        failure = ConnectionError(code: .internalFailure, reason: "could not encode a frame: \(error)")
                        return
                    }
                }
                if closeRequested, !goodbyeSent, queuedBytes == 0, scheduler.queuedControlFrames == 0,
                    scheduler.activeChannels.isEmpty, !holdGoodbye(), let goodbye = pendingGoodbye
                {
                    goodbyeSent = true
                    _ = try? encoder.encode(
                        .goodbye(reason: goodbye.code, text: validUTF8Prefix(goodbye.text)), into: &plaintext)
                    if goodbyeReceived != nil { finished = true }
                }
            }
        } catch {
            fail(error, notifyPeer: false)
            return
        }
        if let failure {
            fail(failure)
            return
        }
        if goodbyeSent { record.closeOutput() }
    }

    private func accountSent(_ sent: FrameScheduler.EncodedFrame) {
        queuedBytes -= sent.dataBytes
        if sent.type == .channelClose { localChannelClosed(sent.channel) }
    }

    /// Whether the graceful close has sent its goodbye and the owner should shut down writing once the
    /// output is written.
    var wantsWriteShutdown: Bool { goodbyeSent }

    private func localChannelClosed(_ channel: UInt32) {
        guard var state = channels[channel] else { return }
        state.localOpen = false
        channels[channel] = state
        if !state.remoteOpen { forgetChannel(channel) }
    }

    func forgetChannel(_ channel: UInt32) {
        guard channels.removeValue(forKey: channel) != nil else { return }
        queuedBytes -= scheduler.removeChannel(channel)
        events.append(.channelGone(channel: channel))
        reassembler.removeChannel(channel)
        deferredCredit[channel] = nil
        for frame in flow.closeChannel(channel) { try? enqueueControl(frame) }
    }

    // MARK: - Frames

    private func handle(_ frame: Frame, now: IOInstant) throws(ConnectionError) {
        if phase == .hello {
            guard case .hello(let hello) = frame else {
                if case .error(let code, let text) = frame { throw peerError(code: code, text: text) }
                throw ConnectionError(
                    code: .protocolViolation, reason: "the peer sent a \(frame.type) frame before its hello")
            }
            try handleHello(hello)
            return
        }
        switch frame {
        case .hello:
            throw ConnectionError(code: .protocolViolation, reason: "the peer sent a second hello")
        case .ping(let token):
            try enqueueControl(.pong(token: token))
        case .pong(let token):
            if let sent = pings.removeValue(forKey: token) {
                lastRoundTrip = now - sent
                events.append(.pong(token: token, roundTrip: now - sent))
            }
        case .goodbye(let code, let text):
            goodbyeReceived = (code, text)
            if goodbyeSent {
                finish(closeReason ?? ConnectionError(code: .closedLocally, reason: "closed by this side"))
            } else {
                // Answer at once: whatever is still queued would never be read.
                goodbyeSent = true
                sealFinalFrame(.goodbye(reason: 0, text: "goodbye"), into: record)
                finish(
                    ConnectionError(
                        code: .closedByPeer(code: code, text: text),
                        reason: "the peer closed the connection (goodbye \(code): \(text))"))
            }
        case .error(let code, let text):
            throw peerError(code: code, text: text)
        case .channelOpen(let channel, let kind, let name, let initialWindow):
            try handleChannelOpen(channel: channel, kind: kind, name: name, initialWindow: initialWindow)
        case .channelData(let channel, let bytes):
            try bytes.withUnsafeBytesTyped { bytes throws(ConnectionError) in try handleData(channel: channel, bytes) }
        case .message(let channel, let fragment):
            let count = fragment.bytes.count + (fragment.isFirst ? 12 : 4)
            guard try acceptFlowControlled(channel: channel, count: count, kind: .message) else { return }
            let message: [UInt8]?
            do {
                message = try reassembler.receive(fragment, channel: channel)
            } catch {
                throw ConnectionError(code: .protocolViolation, reason: "bad message fragment: \(error)")
            }
            acceptedFragment(channel: channel, count: count, message: message)
        case .channelClose(let channel):
            if channels[channel] == nil && isForgotten(channel) { return }  // crossed our reset
            guard var state = channels[channel], state.remoteOpen else {
                throw ConnectionError(
                    code: .protocolViolation, reason: "the peer closed channel \(channel), which it cannot send on")
            }
            state.remoteOpen = false
            channels[channel] = state
            events.append(.channelFinished(channel: channel))
            if !state.localOpen { forgetChannel(channel) }
        case .channelReset(let channel, let code):
            guard let state = channels[channel] else { return }  // crossed our own reset
            if state.kind == .message && state.isLocal {
                throw ConnectionError(
                    code: .protocolViolation,
                    reason:
                        "the peer reset message channel \(channel); messages cannot be refused one channel at a time")
            }
            forgetChannel(channel)
            events.append(.channelReset(channel: channel, code: code))
        case .windowUpdate(let channel, let increment):
            do {
                try flow.receivedWindowUpdate(channel: channel, increment: increment)
            } catch {
                throw ConnectionError(code: .flowControlViolation, reason: "\(error)")
            }
        case .unknown:
            break  // a newer minor version's frame: ignored, as PROTOCOL.md requires
        }
    }

    private func peerError(code: UInt32, text: String) -> ConnectionError {
        if code == WireErrorCode.groupSecretMismatch.rawValue {
            return ConnectionError(code: .groupSecretMismatch, reason: "the peer refused the group proof: \(text)")
        }
        return ConnectionError(
            code: .peerReportedError(code: code, text: text), reason: "the peer reported error \(code): \(text)")
    }

    /// Accounts a flow-controlled frame; false when it belongs to a channel this side already forgot.
    /// A message fragment lent from the decoder's buffer (``FrameDecoder/nextMessageFragment(_:)``): the same
    /// as handling its decoded frame, without the fragment's array.
    private func handleFragment(
        channel: UInt32, id: UInt32, totalLength: UInt64?, isLast: Bool, _ bytes: UnsafeRawBufferPointer
    ) throws(ConnectionError) {
        let count = bytes.count + (totalLength != nil ? 12 : 4)
        guard try acceptFlowControlled(channel: channel, count: count, kind: .message) else { return }
        let message: [UInt8]?
        do {
            message = try reassembler.receive(
                id: id, totalLength: totalLength, isLast: isLast, bytes, channel: channel)
        } catch {
            throw ConnectionError(code: .protocolViolation, reason: "bad message fragment: \(error)")
        }
        acceptedFragment(channel: channel, count: count, message: message)
    }

    /// Returns a reassembled fragment's credit and hands over the message it completed.
    private func acceptedFragment(channel: UInt32, count: Int, message: [UInt8]?) {
        returnMessageCredit(channel: channel, count: count)
        if let message {
            unreadBytes += message.count
            events.append(.message(channel: channel, bytes: message))
        }
    }

    /// Bytes on a stream channel: counted against its window, then handed to its reader's buffer.
    private func handleData(channel: UInt32, _ bytes: UnsafeRawBufferPointer) throws(ConnectionError) {
        guard try acceptFlowControlled(channel: channel, count: bytes.count, kind: .stream) else { return }
        channels[channel]?.inbound?.append(bytes)
    }

    private func makeInbound(_ kind: Frame.ChannelKind) -> StreamInbound? {
        kind == .message
            ? nil
            : StreamInbound(
                window: Int(configuration.flowControl.channelWindow),
                connectionWindow: Int(configuration.flowControl.connectionWindow))
    }

    /// The buffer where the peer's bytes on stream `channel` wait for the reader; nil for other channels.
    func inbound(channel: UInt32) -> StreamInbound? {
        channels[channel]?.inbound
    }

    private func acceptFlowControlled(channel: UInt32, count: Int, kind: Frame.ChannelKind) throws(ConnectionError)
        -> Bool
    {
        guard let state = channels[channel] else {
            // A channel we reset or closed both ways: the peer may not know yet. It still costs connection credit.
            if isForgotten(channel) {
                do {
                    for frame in try flow.discard(count) { try enqueueControl(frame) }
                } catch {
                    throw ConnectionError(code: .flowControlViolation, reason: "\(error)")
                }
                return false
            }
            throw ConnectionError(
                code: .protocolViolation, reason: "the peer sent on channel \(channel) before opening it")
        }
        guard state.remoteOpen else {
            throw ConnectionError(
                code: .protocolViolation, reason: "the peer sent on channel \(channel) after closing it")
        }
        guard (kind == .message) == (state.kind == .message) else {
            throw ConnectionError(
                code: .protocolViolation, reason: "the peer sent \(kind) data on \(state.kind) channel \(channel)")
        }
        do {
            try flow.received(channel: channel, count: count)
        } catch {
            throw ConnectionError(code: .flowControlViolation, reason: "\(error)")
        }
        return true
    }

    /// Whether `channel` was open once and has been forgotten (so late frames for it are not errors).
    private func isForgotten(_ channel: UInt32) -> Bool {
        let isLocal = channel % 2 == (role == .dialer ? 1 : 0)
        return isLocal ? channel < nextLocalChannel : UInt64(channel) < nextRemoteChannelFloor
    }

    /// The lowest channel number the peer has not opened yet (its channels have the other parity).
    private var nextRemoteChannelFloor: UInt64 = 0

    private func handleChannelOpen(channel: UInt32, kind: Frame.ChannelKind, name: String, initialWindow: UInt32)
        throws(ConnectionError)
    {
        let remoteParity: UInt32 = role == .dialer ? 0 : 1
        guard channel % 2 == remoteParity, UInt64(channel) >= nextRemoteChannelFloor else {
            throw ConnectionError(
                code: .protocolViolation, reason: "the peer opened channel \(channel), which is not its to open")
        }
        let updates: [Frame]
        do {
            updates = try flow.openRemoteChannel(channel, initialWindow: initialWindow)
        } catch {
            throw ConnectionError(code: .protocolViolation, reason: "the peer opened a channel: \(error)")
        }
        for frame in updates { try enqueueControl(frame) }
        nextRemoteChannelFloor = UInt64(channel) + 1
        channels[channel] = ChannelState(
            kind: kind, isLocal: false, localOpen: kind != .message, inbound: makeInbound(kind))
        events.append(.channelOpened(channel: channel, kind: kind, name: name))
    }

    private func handleHello(_ hello: Frame.Hello) throws(ConnectionError) {
        guard let record else { return }
        guard let claimed = PeerFingerprint(bytes: hello.fingerprint) else {
            throw ConnectionError(
                code: .protocolViolation, reason: "the peer's hello has a \(hello.fingerprint.count)-byte fingerprint")
        }
        if let proven = record.authenticatedPeer {
            guard proven == claimed else {
                throw ConnectionError(
                    code: .protocolViolation,
                    reason: "the peer's hello names \(claimed) but its certificate proves \(proven)")
            }
        }
        if let expectedPeer, claimed != expectedPeer {
            throw ConnectionError(
                code: .identityMismatch(expected: expectedPeer, actual: claimed),
                reason: "expected peer \(expectedPeer) but the plaintext peer claims to be \(claimed)")
        }
        var isGroupMember = false
        if let secret = configuration.groupSecret {
            let binding = try groupBinding(record)
            guard secret.verify(hello.groupProof, binding: binding, fromDialer: role == .acceptor) else {
                throw ConnectionError(
                    code: .groupSecretMismatch,
                    reason: hello.groupProof.isEmpty
                        ? "the peer sent no group proof; it does not know the group secret"
                        : "the peer's group proof is wrong; it knows a different group secret")
            }
            isGroupMember = true
            try sendHello(record)
        } else if !hello.groupProof.isEmpty {
            throw ConnectionError(
                code: .groupSecretMismatch,
                reason: "the peer proves membership of a group, but this side has no group secret")
        }
        let peer = ConnectedPeer(
            fingerprint: claimed, displayName: hello.displayName, isAuthenticated: record.authenticatedPeer != nil,
            isGroupMember: isGroupMember, protection: record.protectionDescription, minorVersion: hello.minorVersion,
            capabilities: hello.capabilities)
        self.peer = peer
        if localDatagramPort != nil, hello.capabilities.contains(.unreliableDatagrams),
            let port = hello.datagramPort, port != 0,
            let material = try record.exportKeyingMaterial(
                label: DatagramKeys.exporterLabel, length: DatagramKeys.exportedLength)
        {
            datagramPath = (port, DatagramKeys(exported: material, isDialer: role == .dialer))
        }
        phase = .established
        for frame in flow.connectionEstablished() { try enqueueControl(frame) }
        defaultMessageChannel = try openChannel(kind: .message, name: "")
        events.append(.established(peer))
    }

    // MARK: - Application commands

    /// Opens a channel for sending; returns its number.
    func openChannel(kind: Frame.ChannelKind, name: String) throws(ConnectionError) -> UInt32 {
        guard phase == .established else { throw notOpen() }
        let channel = nextLocalChannel
        guard channel <= UInt32.max - 2 else {
            throw ConnectionError(code: .internalFailure, reason: "this connection has used up its channel numbers")
        }
        let window: UInt32
        do {
            window = try flow.openLocalChannel(channel)
        } catch {
            throw ConnectionError(code: .internalFailure, reason: "cannot open a channel: \(error)")
        }
        nextLocalChannel += 2
        // A message channel only carries this side's messages; stream channels are two-way.
        channels[channel] = ChannelState(
            kind: kind, isLocal: true, remoteOpen: kind != .message, inbound: makeInbound(kind))
        try enqueueControl(.channelOpen(channel: channel, kind: kind, name: name, initialWindow: window))
        return channel
    }

    /// Queues a whole message on `channel` (the default message channel when 0).
    func sendMessage(_ bytes: [UInt8], channel: UInt32 = 0) throws(ConnectionError) {
        // While closing, messages the application handed over before the close still go out.
        guard phase == .established || (phase == .closing && !goodbyeSent) else { throw notOpen() }
        guard UInt64(bytes.count) <= configuration.frameLimits.maximumMessageLength else {
            throw ConnectionError(
                code: .invalidConfiguration,
                reason:
                    "a \(bytes.count)-byte message exceeds the \(configuration.frameLimits.maximumMessageLength)-byte "
                    + "limit; send it as a stream or resource")
        }
        let channel = channel == 0 ? defaultMessageChannel : channel
        try checkWritable(channel)
        do {
            try scheduler.enqueueMessage(bytes, channel: channel)
        } catch {
            throw ConnectionError(code: .internalFailure, reason: "\(error)")
        }
        queuedBytes += bytes.count
    }

    /// Queues messages on the default message channel, in order, all or none (the batch must fit in
    /// ``queueRoom(channel:)``): ``sendMessage(_:channel:)`` for many messages at the cost of one.
    func sendMessages(_ messages: consuming [[UInt8]]) throws(ConnectionError) {
        guard phase == .established || (phase == .closing && !goodbyeSent) else { throw notOpen() }
        var total = 0
        for index in messages.indices {
            let count = messages[index].count
            guard UInt64(count) <= configuration.frameLimits.maximumMessageLength else {
                throw ConnectionError(
                    code: .invalidConfiguration,
                    reason:
                        "a \(count)-byte message exceeds the "
                        + "\(configuration.frameLimits.maximumMessageLength)-byte limit; send it as a stream or resource"
                )
            }
            total += count
        }
        try checkWritable(defaultMessageChannel)
        do {
            try scheduler.enqueueMessages(consume messages, channel: defaultMessageChannel)
        } catch {
            throw ConnectionError(code: .internalFailure, reason: "\(error)")
        }
        queuedBytes += total
    }

    /// Queues stream bytes on `channel`.
    func write(_ bytes: [UInt8], channel: UInt32) throws(ConnectionError) {
        guard phase == .established else { throw notOpen() }
        try checkWritable(channel)
        do {
            try scheduler.enqueueData(bytes, channel: channel)
        } catch {
            throw ConnectionError(code: .internalFailure, reason: "\(error)")
        }
        queuedBytes += bytes.count
    }

    /// Whether `channel` can take another queued item right now.
    func canQueue(channel: UInt32) -> Bool {
        queueRoom(channel: channel) > 0
    }

    /// How many more items `channel` (0: the default message channel) can take right now.
    func queueRoom(channel: UInt32) -> Int {
        guard phase == .established || (phase == .closing && !goodbyeSent) else { return 0 }
        return scheduler.queueRoom(channel: channel == 0 ? defaultMessageChannel : channel)
    }

    /// Half-closes `channel`: the peer sees the end after everything queued.
    func finishChannel(_ channel: UInt32) throws(ConnectionError) {
        guard phase == .established else { throw notOpen() }
        try checkWritable(channel)
        do {
            try scheduler.enqueueClose(channel: channel)
        } catch {
            throw ConnectionError(code: .internalFailure, reason: "\(error)")
        }
    }

    /// Aborts `channel` both ways.
    func resetChannel(_ channel: UInt32, code: UInt32) {
        guard phase == .established, channels[channel] != nil else { return }
        forgetChannel(channel)
        try? enqueueControl(.channelReset(channel: channel, code: code))
    }

    /// The application took `count` bytes of stream data from `channel`.
    func streamConsumed(channel: UInt32, count: Int) {
        guard channels[channel] != nil else { return }
        for frame in flow.consumed(channel: channel, count: count) { try? enqueueControl(frame) }
    }

    /// The application took a message of `count` bytes.
    func messageConsumed(count: Int) {
        unreadBytes -= count
        guard unreadBytes <= configuration.receiveBufferLimit, !deferredCredit.isEmpty else { return }
        let held = deferredCredit
        deferredCredit = [:]
        for (channel, count) in held { returnMessageCredit(channel: channel, count: count) }
    }

    /// Message fragments count as consumed once reassembled (a message may exceed the window), unless the
    /// application is behind by more than ``ConnectionConfiguration/receiveBufferLimit``: then the credit is
    /// held back until it catches up, which stops the sender.
    private func returnMessageCredit(channel: UInt32, count: Int) {
        if unreadBytes > configuration.receiveBufferLimit {
            deferredCredit[channel, default: 0] += count
            return
        }
        for frame in flow.consumed(channel: channel, count: count) { try? enqueueControl(frame) }
    }

    /// Throws unless this side may still send on `channel`.
    private func checkWritable(_ channel: UInt32) throws(ConnectionError) {
        guard let state = channels[channel] else {
            throw ConnectionError(code: .closedLocally, reason: "channel \(channel) was reset or is finished")
        }
        guard state.localOpen, !scheduler.isClosing(channel: channel) else {
            throw ConnectionError(code: .closedLocally, reason: "channel \(channel) was already finished by this side")
        }
    }

    private func notOpen() -> ConnectionError {
        if let closeReason, phase == .closed || closeRequested { return closeReason }
        return ConnectionError(code: .closedLocally, reason: "the connection is \(phase), not established")
    }
}
