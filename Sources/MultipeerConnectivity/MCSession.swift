public import Foundation
internal import Multipeer
internal import Synchronization

/// What a session tells its application, on a private serial queue (Apple's `MCSessionDelegate`).
public protocol MCSessionDelegate: NSObjectProtocol {
    /// A peer's state changed. For `.notConnected`, ``MCSession/disconnectReason(for:)`` says why.
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState)
    /// A peer sent data.
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID)
    /// A peer opened a byte stream to this side; open it to read.
    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID)
    /// A peer started sending a resource.
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress)
    /// A resource arrived (verified by SHA-256) at `localURL`, or failed with `error`. The file is removed when
    /// this method returns: move or read it before.
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?)
    /// A peer wants to join: call `certificateHandler` with true to let it in. Optional: without it, every
    /// peer is let in, as on Apple's platforms. `certificate` is `[PeerVerificationRequest]` for a peer whose
    /// identity TLS proved (its fingerprint and the verification code both sides see), nil on plaintext.
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void)
}

extension MCSessionDelegate {
    /// Lets every peer in, as Apple's framework does for delegates without this method.
    public func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(true)
    }
}

/// A session (Apple's `MCSession`) on the native ``Session``: a full mesh of peers exchanging data, streams and
/// resources, encrypted by default.
///
/// Differences from Apple's, all additions: a peer's drop for a few seconds is bridged (it stays connected and
/// reliable data sent meanwhile arrives once, in order); ``disconnectReason(for:)`` says why a peer went
/// `.notConnected`; more than 8 peers on request; a session can be used again after `disconnect()`; data
/// sent faster than the peers take it waits in a queue of at most ``maximumQueuedBytes``, beyond which `send`
/// throws `unavailable` instead of growing without bound.
open class MCSession: NSObject, @unchecked Sendable {
    // Safety of @unchecked Sendable: immutable properties, and mutable state behind `state` or in Sendable types.

    /// The delegate (held weakly), called on the session's private serial queue.
    public var delegate: (any MCSessionDelegate)? {
        get { delegateBox.value }
        set { delegateBox.value = newValue }
    }
    /// This side.
    public let myPeerID: MCPeerID
    /// What was passed; on Linux there is no `SecIdentity`: the peer ID's own key proves its identity, and this
    /// array is kept only to be returned (nil or anything is accepted).
    public let securityIdentity: [Any]?
    /// Whether connections are encrypted.
    public let encryptionPreference: MCEncryptionPreference
    /// The most peers in the session, this side included (an addition; Apple's is fixed at 8).
    public let maximumNumberOfPeers: Int
    /// The group secret members prove, if any.
    let groupSecret: GroupSecret?
    /// The most bytes of data waiting to be sent before `send` throws `unavailable` (an addition).
    public static let maximumQueuedBytes = 64 << 20

    /// The peers connected now.
    public var connectedPeers: [MCPeerID] {
        state.withLock { Array($0.connected.values) }.sorted { $0.displayName < $1.displayName }
    }

    private let delegateBox = WeakDelegate<any MCSessionDelegate>()
    let calls: DelegateQueue
    private let state: Mutex<State>
    /// The longest data one `send` carries (the connection's message limit less the session's framing).
    let maximumDataLength: Int

    private struct State {
        var native: Task<Session, any Error>
        /// Incremented by `disconnect()`: events of an older native session only end what it started.
        var generation = 0
        var connected: [PeerFingerprint: MCPeerID] = [:]
        /// The state last reported to the delegate per peer, and by which native session (Apple has no
        /// `reconnecting`: a peer being reconnected stays connected).
        var reported: [PeerFingerprint: (state: MCSessionState, generation: Int)] = [:]
        var reasons: [PeerFingerprint: MCDisconnectReason] = [:]
        /// One queue per connected peer, so a peer that does not keep up holds back only what goes to it.
        var outboxes: [PeerFingerprint: PeerOutbox] = [:]
    }

    /// A session that requires encryption (Apple's rule since OS X 10.11 and iOS 9).
    public convenience init(peer myPeerID: MCPeerID) {
        self.init(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
    }

    /// A session with an encryption preference.
    /// - Parameters:
    ///   - myPeerID: A peer ID made on this device (`init(displayName:)`, or unarchived where its key is).
    ///   - identity: Ignored on Linux (see ``securityIdentity``).
    ///   - encryptionPreference: `.required`, `.optional` or `.none`.
    public convenience init(
        peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference
    ) {
        self.init(
            peer: myPeerID, securityIdentity: identity, encryptionPreference: encryptionPreference,
            maximumNumberOfPeers: kMCSessionMaximumNumberOfPeers)
    }

    /// A session that may hold more peers than Apple's 8, and whose members prove a shared group secret (both
    /// additions).
    /// - Parameters:
    ///   - maximumNumberOfPeers: The most peers, this side included; at least 2.
    ///   - groupSecret: A pre-shared key of at least 32 bytes that every member must prove (TLS then required); the
    ///     advertisers that invite into this session need the same (``MCNearbyServiceAdvertiser/init(peer:discoveryInfo:serviceType:groupSecret:)``).
    public init(
        peer myPeerID: MCPeerID, securityIdentity identity: [Any]?, encryptionPreference: MCEncryptionPreference,
        maximumNumberOfPeers: Int, groupSecret: Data? = nil
    ) {
        guard myPeerID.identity != nil else {
            invalidArgument(
                "MCSession(peer:): \(myPeerID) was not made on this device (its private key is not in "
                    + "\(MCPeerID.identityStore.directory.path)); use MCPeerID(displayName:) or a peer ID archived here"
            )
        }
        guard maximumNumberOfPeers >= kMCSessionMinimumNumberOfPeers else {
            invalidArgument("MCSession: maximumNumberOfPeers must be at least \(kMCSessionMinimumNumberOfPeers)")
        }
        self.myPeerID = myPeerID
        securityIdentity = identity
        self.encryptionPreference = encryptionPreference
        self.maximumNumberOfPeers = maximumNumberOfPeers
        self.groupSecret = groupSecret.map { MCSession.groupSecret($0, for: "MCSession") }
        if self.groupSecret != nil, encryptionPreference == .none {
            invalidArgument("MCSession: a group secret needs encryption; encryptionPreference .none refuses it")
        }
        calls = DelegateQueue(label: "MCSession.delegate.\(myPeerID.displayName)")
        var connection = ConnectionConfiguration(identity: myPeerID.identity!)
        MCNetwork.configuration.tuneConnections(&connection)
        maximumDataLength = connection.maximumMessageLength - 9
        state = Mutex(State(native: Task { throw CancellationError() }))
        super.init()
        state.withLock { $0.native = startNative(generation: 0) }
    }

    deinit {
        let (native, outboxes) = state.withLock { ($0.native, Array($0.outboxes.values)) }
        for outbox in outboxes { outbox.finish() }
        Task { try? await native.value.disconnect() }
    }

    /// The native session now (a new one after `disconnect()`).
    func nativeSession() async throws -> Session {
        try await state.withLock { $0.native }.value
    }

    /// Starts a native session and the tasks that turn its events into delegate calls.
    private func startNative(generation: Int) -> Task<Session, any Error> {
        var configuration = SessionConfiguration()
        configuration.encryption = encryptionPreference.native
        configuration.maximumPeers = maximumNumberOfPeers
        configuration.groupSecret = groupSecret
        configuration.verifyPeer = { [weak self] request in
            guard let self else { return .refuse(reason: "the session is gone") }
            return await self.askCertificate(request)
        }
        let identity = myPeerID.identity!
        return Task { [weak self] () async throws -> Session in
            do {
                let session = try await Session(
                    identity: identity, configuration: configuration, network: MCNetwork.shared())
                self?.pump(session, generation: generation)
                return session
            } catch {
                report("MCSession cannot start: \(error)")
                throw error
            }
        }
    }

    /// Turns the native session's events and messages into delegate calls. State changes are taken at once
    /// (so the session's view never lags behind); messages wait for their turn on the delegate queue, which
    /// holds the sender back when the application is slow.
    private func pump(_ session: Session, generation: Int) {
        Task { [weak self] in
            for await event in session.events {
                guard let self else { break }
                await self.handle(event, from: session, generation: generation)
            }
        }
        Task { [weak self] in
            for await message in session.messages {
                guard let self else { break }
                await self.awaitConnected(message.peer.claimedFingerprint)
                let peerID = MCPeerID(peer: message.peer)
                let data = Data(message.bytes)
                await self.calls.deliver(bytes: data.count) { [weak self] in
                    guard let self else { return }
                    self.delegate?.session(self, didReceive: data, fromPeer: peerID)
                }
            }
        }
    }

    /// Holds a peer's first messages until its `.connected` is queued for the delegate (the two come from
    /// different streams of the native session), at most 2 s.
    private func awaitConnected(_ fp: PeerFingerprint) async {
        // Only for a peer not yet reported connected; one that left (its reason is known) is not waited for.
        func waiting(_ state: State) -> Bool {
            state.reported[fp]?.state != .connected && !(state.reported[fp] == nil && state.reasons[fp] != nil)
        }
        guard state.withLock({ waiting($0) }) else { return }  // the usual case: no clock read, no sleep
        let deadline = ContinuousClock.now + .seconds(2)
        while state.withLock({ waiting($0) }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
    }

    private func handle(_ event: SessionEvent, from session: Session, generation: Int) async {
        switch event {
        case .peerChanged(let peer, let native, let reason):
            let peerID = MCPeerID(peer: peer)
            let fp = peer.claimedFingerprint
            let mapped: MCSessionState
            switch native {
            case .connecting: mapped = .connecting
            case .connected, .reconnecting: mapped = .connected  // a bridged outage is not Apple's notConnected
            case .notConnected: mapped = .notConnected
            }
            var why: MCDisconnectReason?
            if mapped == .notConnected {
                why =
                    await session.invitationOutcome(for: peer).map(MCDisconnectReason.init)
                    ?? .disconnected(reason.description)
            }
            let (changed, finished) = state.withLock { state -> (Bool, PeerOutbox?) in
                // After `disconnect()`, the old session only ends the peers it reported.
                if generation != state.generation {
                    guard mapped == .notConnected, state.reported[fp]?.generation == generation else {
                        return (false, nil)
                    }
                }
                var finished: PeerOutbox?
                if mapped == .connected {
                    state.connected[fp] = peerID
                } else if state.connected.removeValue(forKey: fp) != nil || mapped == .notConnected {
                    finished = state.outboxes.removeValue(forKey: fp)
                }
                if let why {
                    if state.reasons.count >= 1_024, let any = state.reasons.keys.first { state.reasons[any] = nil }
                    state.reasons[fp] = why
                } else if mapped == .connected {
                    state.reasons[fp] = nil
                }
                let previous = state.reported[fp]?.state
                // The session a peer's state came from is recorded even when the state is unchanged, so a late
                // notConnected from an older session cannot end a peer the new one connected.
                state.reported[fp] = mapped == .notConnected ? nil : (mapped, generation)
                return (previous != mapped, finished)
            }
            finished?.finish()
            guard changed else { return }
            calls.post { [weak self] in
                guard let self else { return }
                self.delegate?.session(self, peer: peerID, didChange: mapped)
            }
        case .stream(let stream, let peer):
            nonisolated(unsafe) let input = MCInputStream(stream)
            let peerID = MCPeerID(peer: peer)
            calls.post { [weak self] in
                guard let self else { return }
                self.delegate?.session(self, didReceive: input, withName: stream.name, fromPeer: peerID)
            }
        case .undelivered(let peer, let numbers, let reason):
            // Apple's API has no way to say this (the native API does); say it where a person can see it.
            report("\(numbers.count) message(s) to \(peer.displayName) were not delivered: \(reason)")
        case .resourceStarted(let incoming):
            let peerID = MCPeerID(peer: incoming.peer)
            calls.post { [weak self] in
                guard let self else { return }
                self.delegate?.session(
                    self, didStartReceivingResourceWithName: incoming.name, fromPeer: peerID, with: incoming.progress)
            }
        case .resourceFinished(let incoming, let result):
            let peerID = MCPeerID(peer: incoming.peer)
            calls.post { [weak self] in
                guard let self else {
                    if case .success(let url) = result { try? FileManager.default.removeItem(at: url) }
                    return
                }
                switch result {
                case .success(let url):
                    self.delegate?.session(
                        self, didFinishReceivingResourceWithName: incoming.name, fromPeer: peerID, at: url,
                        withError: nil)
                    // Apple's file is temporary: valid only during the call.
                    try? FileManager.default.removeItem(at: url)
                case .failure(let error):
                    self.delegate?.session(
                        self, didFinishReceivingResourceWithName: incoming.name, fromPeer: peerID, at: nil,
                        withError: MCError(error))
                }
            }
        }
    }

    /// How long the certificate handler may take before the peer is refused.
    static let certificateTimeout: Duration = .seconds(30)

    /// Asks the delegate's certificate method (or lets the peer in when the delegate does not implement it).
    private func askCertificate(_ request: PeerVerificationRequest) async -> VerificationDecision {
        let peerID = MCPeerID(peer: request.peer)
        nonisolated(unsafe) let certificate: [Any]? = request.isAuthenticated ? [request] : nil
        let accepted = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let once = Mutex(false)
            let answer: @Sendable (Bool) -> Void = { accepted in
                let first = once.withLock { done -> Bool in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume(returning: accepted) }
            }
            calls.post { [weak self] in
                guard let self, let delegate = self.delegate else { return answer(true) }
                delegate.session(self, didReceiveCertificate: certificate, fromPeer: peerID, certificateHandler: answer)
            }
            // A handler never called must not hold the peer in `.connecting` for ever.
            Task {
                try? await Task.sleep(for: Self.certificateTimeout)
                answer(false)
            }
        }
        return accepted
            ? .accept
            : .refuse(
                reason: "\(myPeerID.displayName)'s application refused the certificate (or did not answer within "
                    + "\(Self.certificateTimeout))")
    }

    // MARK: Apple's API

    /// Sends data to connected peers; returns once it is queued (delivery is not confirmed, as in Apple's API).
    /// Reliable data to each peer waits in that peer's own queue, so a peer that does not keep up delays only
    /// what goes to it; unreliable data is sent at once or dropped.
    /// - Throws: ``MCError`` `notConnected` naming a peer that is not connected; `invalidParameter` for data
    ///   longer than one message carries (4 MiB by default: send more with `sendResource` or a stream);
    ///   `unavailable` when more than ``maximumQueuedBytes`` already wait for one of the peers.
    open func send(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws {
        try enqueue(data, toPeers: peerIDs, with: mode, completion: nil)
    }

    private func enqueue(
        _ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode,
        completion: (@Sendable ([Peer: SessionError]) -> Void)?
    ) throws {
        guard data.count <= maximumDataLength else {
            throw MCError(
                .invalidParameter,
                reason: "\(data.count) bytes are more than one message carries (\(maximumDataLength)); send them "
                    + "with sendResource(at:withName:toPeer:) or startStream(withName:toPeer:)")
        }
        let reliable = mode == .reliable
        let targets = try state.withLock { state throws(MCError) -> [(Peer, PeerOutbox)] in
            var targets: [(Peer, PeerOutbox)] = []
            var seen: Set<PeerFingerprint> = []
            // Every peer is checked before any queue takes the data: a send that throws leaves nothing behind.
            for peerID in peerIDs where seen.insert(peerID.fingerprint).inserted {
                guard let connected = state.connected[peerID.fingerprint] else {
                    throw MCError(.notConnected, reason: "\(peerID.displayName) is not connected to this session")
                }
                let outbox = state.outboxes[peerID.fingerprint] ?? PeerOutbox(peer: connected.nativePeer, owner: self)
                state.outboxes[peerID.fingerprint] = outbox
                if reliable, !outbox.hasRoom(for: data.count) {
                    throw MCError(
                        .unavailable,
                        reason: "\(Self.maximumQueuedBytes) bytes already wait for \(peerID.displayName), who is not "
                            + "keeping up")
                }
                targets.append((connected.nativePeer, outbox))
            }
            if reliable { for (_, outbox) in targets { outbox.reserve(data.count) } }
            return targets
        }
        guard !targets.isEmpty else { return completion?([:]) ?? () }
        let collector = completion.map { Collector(expected: targets.count, completion: $0) }
        let bytes = [UInt8](data)
        for (_, outbox) in targets {
            outbox.push(PeerOutbox.Item(data: bytes, reliable: reliable, collector: collector))
        }
    }

    /// Sends data with a completion that says, per peer, whether it arrived (an addition: Apple's `send`
    /// only says it was queued). For `.reliable`, `completionHandler` runs on the session's queue once every
    /// peer's session has taken the data from the connection for its delegate (in order after everything sent
    /// before), with the peers that did not get it and why (empty: all did);
    /// for `.unreliable`, once the datagrams left, with the peers they could not be sent to.
    /// - Throws: As ``send(_:toPeers:with:)``.
    open func send(
        _ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode,
        completionHandler: @escaping ([MCPeerID: any Error]) -> Void
    ) throws {
        nonisolated(unsafe) let handler = completionHandler
        let calls = calls
        try enqueue(data, toPeers: peerIDs, with: mode) { failures in
            let errors = Dictionary(
                failures.map { (MCPeerID(peer: $0.key), MCError($0.value) as any Error) },
                uniquingKeysWith: { first, _ in first })
            calls.post { handler(errors) }
        }
    }

    /// Sends a file (`file:` URL) or a download (`http`/`https` URL) to a peer, which receives it verified by
    /// SHA-256. The progress can cancel it; `completionHandler` runs on the session's queue when the peer has it
    /// or with the error.
    /// - Returns: The transfer's progress (bytes); nil when it cannot start (the handler says why).
    @discardableResult
    open func sendResource(
        at resourceURL: URL, withName resourceName: String, toPeer peerID: MCPeerID,
        withCompletionHandler completionHandler: (((any Error)?) -> Void)? = nil
    ) -> Progress? {
        let calls = calls
        nonisolated(unsafe) let completionHandler = completionHandler
        let complete: @Sendable ((any Error)?) -> Void = { error in
            guard let handler = completionHandler else { return }
            nonisolated(unsafe) let unsafeHandler = handler
            calls.post { unsafeHandler(error) }
        }
        let scheme = resourceURL.scheme?.lowercased()
        guard resourceURL.isFileURL || scheme == "http" || scheme == "https" else {
            complete(MCError(.unsupported, reason: "\(resourceURL) is neither a file URL nor an http(s) URL"))
            return nil
        }
        guard let peer = state.withLock({ $0.connected[peerID.fingerprint] })?.nativePeer else {
            complete(MCError(.notConnected, reason: "\(peerID.displayName) is not connected to this session"))
            return nil
        }
        let progress = Progress(totalUnitCount: -1)
        Task { [weak self] in
            do {
                guard let session = try await self?.nativeSession() else {
                    throw MCError(.cancelled, reason: "the session is gone")
                }
                let transfer = try await session.sendResource(
                    at: resourceURL, named: resourceName, to: peer, progress: progress)
                _ = try await transfer.finished()
                complete(nil)
            } catch let error as SessionError {
                complete(MCError(error))
            } catch {
                complete(error)
            }
        }
        return progress
    }

    /// Opens a byte stream to a connected peer, which receives an `InputStream`. Open the returned stream,
    /// then write to it; closing it ends the peer's stream after everything written.
    /// - Throws: ``MCError`` `notConnected`.
    @discardableResult
    open func startStream(withName streamName: String, toPeer peerID: MCPeerID) throws -> OutputStream {
        guard let peer = state.withLock({ $0.connected[peerID.fingerprint] })?.nativePeer else {
            throw MCError(.notConnected, reason: "\(peerID.displayName) is not connected to this session")
        }
        let opening = Task { [weak self] () async throws -> PeerStream in
            guard let session = try await self?.nativeSession() else {
                throw MCError(.cancelled, reason: "the session is gone")
            }
            return try await session.openStream(named: streamName, to: peer)
        }
        return MCOutputStream(opening: opening)
    }

    /// Leaves the session: every peer sees this side `.notConnected`, and the delegate hears each peer go
    /// `.notConnected`. `connectedPeers` is empty when this returns. The session can invite and be invited again
    /// afterwards (a fresh one underneath).
    open func disconnect() {
        let (old, outboxes) = state.withLock { state -> (Task<Session, any Error>, [PeerOutbox]) in
            let old = state.native
            let outboxes = Array(state.outboxes.values)
            state.generation += 1
            state.native = startNative(generation: state.generation)
            state.connected = [:]
            state.outboxes = [:]
            return (old, outboxes)
        }
        for outbox in outboxes { outbox.finish() }
        Task { try? await old.value.disconnect() }
    }

    /// The native group secret for `data`, or a fatal error naming the rule (as for other invalid arguments).
    static func groupSecret(_ data: Data, for caller: String) -> GroupSecret {
        do {
            return try GroupSecret([UInt8](data))
        } catch {
            invalidArgument("\(caller): groupSecret: \(error.reason)")
        }
    }

    // MARK: Custom discovery

    /// Data for `peerID` to connect to this session without the browser and advertiser (Apple's custom
    /// discovery): this side's identity, where the session listens, and a one-time ticket for that peer only.
    /// Carry it to the peer any way you like; it passes it to ``connectPeer(_:withNearbyConnectionData:)``.
    /// The handler runs on the session's queue.
    open func nearbyConnectionData(
        forPeer peerID: MCPeerID, withCompletionHandler completionHandler: @escaping (Data?, (any Error)?) -> Void
    ) {
        nonisolated(unsafe) let completionHandler = completionHandler
        let calls = calls
        Task { [weak self] in
            do {
                let data = try await self?.nearbyConnectionData(forPeer: peerID)
                calls.post {
                    completionHandler(data, data == nil ? MCError(.cancelled, reason: "the session is gone") : nil)
                }
            } catch {
                calls.post { completionHandler(nil, error) }
            }
        }
    }

    /// Data for `peerID` to connect to this session without discovery (see the completion-handler form).
    open func nearbyConnectionData(forPeer peerID: MCPeerID) async throws -> Data {
        do {
            return Data(try await nativeSession().connectionData(for: peerID.nativePeer))
        } catch let error as SessionError {
            throw MCError(error)
        }
    }

    /// Connects to `peerID` with the data its session gave (both sides call this with the other's data). The
    /// outcome shows as the peer's state, as with invitations; ``disconnectReason(for:)`` says why it failed.
    open func connectPeer(_ peerID: MCPeerID, withNearbyConnectionData data: Data) {
        let peer = peerID.nativePeer
        let bytes = [UInt8](data)
        Task { [weak self] in
            guard let session = try? await self?.nativeSession() else { return }
            _ = await session.connect(peer, connectionData: bytes)
        }
    }

    /// Stops connecting to `peerID` (withdraws this side's tickets for it and stops waiting for it).
    open func cancelConnectPeer(_ peerID: MCPeerID) {
        let peer = peerID.nativePeer
        Task { [weak self] in
            guard let session = try? await self?.nativeSession() else { return }
            await session.cancelConnect(peer)
        }
    }

    /// Why `peerID` last went `.notConnected` (an addition: declined, timed out, unreachable, refused for
    /// security or limits, or disconnected with the reason); nil while it is connected or was never seen.
    public func disconnectReason(for peerID: MCPeerID) -> MCDisconnectReason? {
        state.withLock { $0.reasons[peerID.fingerprint] }
    }
}

/// What a send with a completion learns from each of its peers: calls the completion once all have reported.
final class Collector: Sendable {
    private let state: Mutex<(left: Int, failures: [Peer: SessionError])>
    private let completion: @Sendable ([Peer: SessionError]) -> Void

    init(expected: Int, completion: @escaping @Sendable ([Peer: SessionError]) -> Void) {
        state = Mutex((expected, [:]))
        self.completion = completion
    }

    func report(_ peer: Peer, _ failure: SessionError?) {
        let done = state.withLock { state -> [Peer: SessionError]? in
            if let failure { state.failures[peer] = failure }
            state.left -= 1
            return state.left == 0 ? state.failures : nil
        }
        if let done { completion(done) }
    }
}

/// The data waiting for one peer: reliable data in order (bounded by ``MCSession/maximumQueuedBytes``, sent by one
/// task that waits for the peer as long as it must), unreliable data sent at once by another task or dropped
/// when 64 datagrams already wait.
final class PeerOutbox: Sendable {
    struct Item: Sendable {
        let data: [UInt8]
        let reliable: Bool
        let collector: Collector?
    }

    private let peer: Peer
    private let reliable: AsyncStream<Item>.Continuation
    private let unreliable: AsyncStream<Item>.Continuation
    private let queued = Shared(0)

    init(peer: Peer, owner: MCSession) {
        self.peer = peer
        let (reliableItems, reliable) = AsyncStream<Item>.makeStream()
        let (unreliableItems, unreliable) = AsyncStream<Item>.makeStream(bufferingPolicy: .bufferingOldest(64))
        self.reliable = reliable
        self.unreliable = unreliable
        let queued = queued
        Task { [weak owner] in
            let session = try? await owner?.nativeSession()
            for await item in reliableItems {
                await Self.send(item, to: peer, on: session)
                queued.withLock { $0 -= item.data.count }
            }
        }
        Task { [weak owner] in
            let session = try? await owner?.nativeSession()
            for await item in unreliableItems { await Self.send(item, to: peer, on: session) }
        }
    }

    /// Whether `count` more reliable bytes fit (an empty queue takes anything).
    func hasRoom(for count: Int) -> Bool {
        queued.withLock { $0 == 0 || $0 + count <= MCSession.maximumQueuedBytes }
    }

    /// Counts `count` reliable bytes as queued (after ``hasRoom(for:)`` said they fit).
    func reserve(_ count: Int) {
        queued.withLock { $0 += count }
    }

    func push(_ item: Item) {
        let result = item.reliable ? reliable.yield(item) : unreliable.yield(item)
        switch result {
        case .enqueued: break
        case .dropped:
            item.collector?.report(peer, SessionError(.unavailable, "dropped: 64 datagrams already wait"))
        case .terminated:
            // The peer left between the check and now.
            if item.reliable { queued.withLock { $0 -= item.data.count } }
            item.collector?.report(peer, SessionError(.notConnected, "\(peer.displayName) left"))
        @unknown default: break
        }
    }

    /// No more data; what is queued is still sent (or fails, as the peer is gone).
    func finish() {
        reliable.finish()
        unreliable.finish()
    }

    private static func send(_ item: Item, to peer: Peer, on session: Session?) async {
        guard let session else {
            item.collector?.report(peer, SessionError(.cancelled, "the session is gone"))
            return
        }
        guard let collector = item.collector else {
            let result = await session.send(item.data, to: [peer], mode: item.reliable ? .reliable : .unreliable)
            if case .failed(let error)? = result[peer], item.reliable {
                report("data to \(peer.displayName) was not sent: \(error.reason)")
            }
            return
        }
        guard item.reliable else {
            let result = await session.send(item.data, to: [peer], mode: .unreliable)
            if case .failed(let error)? = result[peer] { return collector.report(peer, error) }
            return collector.report(peer, nil)
        }
        do throws(SessionError) {
            let pending = try await session.sendExpectingReceipt(item.data, to: peer)
            Task {
                do throws(SessionError) {
                    try await pending.delivered()
                    collector.report(peer, nil)
                } catch {
                    collector.report(peer, error)
                }
            }
        } catch {
            collector.report(peer, error)
        }
    }
}
