public import Foundation
internal import Multipeer
internal import MultipeerIO
internal import OrderedCollections

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
/// sent faster than a peer confirms it is kept for it up to ``maximumQueuedBytes`` (the native session's replay
/// buffer), beyond which `send` throws `unavailable` instead of growing without bound.
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
    /// The most bytes of reliable data a peer has not yet confirmed before `send` throws `unavailable` (an
    /// addition): the native session's ``SessionConfiguration/replayBufferBytes``.
    public static let maximumQueuedBytes = 64 << 20

    /// The peers connected now, as the delegate has been told: a peer is listed from its `.connected` call on
    /// (not yet during its `.connecting` call) until its `.notConnected` call.
    public var connectedPeers: [MCPeerID] {
        state.withLock { Array($0.connected.values) }.sorted { $0.displayName < $1.displayName }
    }

    private let delegateBox = WeakDelegate<any MCSessionDelegate>()
    /// What takes data instead of the delegate, if set (see ``receiveData(with:)``).
    private let dataReceiver = Lock<Boxed<@Sendable (Data, MCPeerID) async -> Void>?>(nil)

    /// For the PeerConnectivity facade: gives received data to `receiver` instead of the delegate's data method,
    /// on the delegate queue, in order; the session's reader waits for it (suspended, no thread held), so a
    /// receiver that is behind holds the sender back through flow control.
    package func receiveData(with receiver: @escaping @Sendable (Data, MCPeerID) async -> Void) {
        dataReceiver.withLock { $0 = Boxed(receiver) }
    }
    let calls: DelegateQueue
    private let state: Lock<State>
    /// The longest data one `send` carries (the connection's message limit less the session's framing).
    let maximumDataLength: Int

    private struct State {
        var native: Task<Session, any Error>
        /// The native session once started (`send` does not wait for it: before, no peer is connected).
        var current: Session?
        /// Incremented by `disconnect()`: events of an older native session only end what it started.
        var generation = 0
        /// Apple's `connectedPeers`: changed on the delegate queue, just before the delegate hears of it.
        var connected: [PeerFingerprint: MCPeerID] = [:]
        /// The state last reported to the delegate per peer, and by which native session (Apple has no
        /// `reconnecting`: a peer being reconnected stays connected).
        var reported: [PeerFingerprint: (state: MCSessionState, generation: Int)] = [:]
        /// Why each peer last went `.notConnected`, oldest first: beyond 1,024 the oldest is forgotten.
        var reasons: OrderedDictionary<PeerFingerprint, MCDisconnectReason> = [:]
        /// The one `MCPeerID` of each peer in the session, given in every call about it.
        var peerIDs: [PeerFingerprint: MCPeerID] = [:]
        /// The message reader, waiting for a peer's state to reach the delegate before its data (with a number,
        /// so the wait's time limit ends only that wait).
        var awaiting: (fingerprint: PeerFingerprint, number: Int, continuation: CheckedContinuation<Void, Never>)?
        var awaitNumber = 0

        /// Whether a peer's data must wait: the delegate has not heard it connected, and it has not left.
        func mustWait(_ fp: PeerFingerprint) -> Bool {
            reported[fp]?.state != .connected && !(reported[fp] == nil && reasons[fp] != nil)
        }

        /// The peer's `MCPeerID`, made once while it is in the session.
        mutating func peerID(for peer: Peer) -> MCPeerID {
            if let known = peerIDs[peer.claimedFingerprint] { return known }
            let made = MCPeerID(peer: peer)
            if reported[peer.claimedFingerprint] != nil { peerIDs[peer.claimedFingerprint] = made }
            return made
        }
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
        state = Lock(State(native: Task { throw CancellationError() }))
        super.init()
        state.withLock { $0.native = startNative(generation: 0) }
    }

    deinit {
        let (native, waiter) = state.withLock { state in
            defer { state.awaiting = nil }
            return (state.native, state.awaiting?.continuation)
        }
        waiter?.resume()
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
        // What `send` may queue for a peer that does not keep up, before it throws `unavailable`.
        configuration.replayBufferBytes = Self.maximumQueuedBytes
        configuration.verifyPeer = { [weak self] request in
            guard let self else { return .refuse(reason: "the session is gone") }
            return await self.askCertificate(request)
        }
        let identity = myPeerID.identity!
        return Task { [weak self] () async throws -> Session in
            do {
                let session = try await Session(
                    identity: identity, configuration: configuration, network: MCNetwork.shared())
                self?.started(session, generation: generation)
                return session
            } catch {
                report("MCSession cannot start: \(error)")
                throw error
            }
        }
    }

    /// Turns the native session's events and messages into delegate calls, in two tasks that run on the delegate
    /// queue and call the delegate directly: a state change reaches the delegate before any data that follows
    /// it, and each batch of messages the native session hands over is one job on the queue (a slow delegate
    /// holds the reader, and through it the sender, back).
    private func started(_ session: Session, generation: Int) {
        let current = state.withLock { state -> Bool in
            guard state.generation == generation else { return false }
            state.current = session
            return true
        }
        guard current else { return }
        Task(executorPreference: calls.executor) { [weak self] in
            for await event in session.events {
                guard let self else { break }
                await self.handle(event, from: session, generation: generation)
            }
        }
        Task(executorPreference: calls.executor) { [weak self] in
            var messages = session.messages.makeAsyncIterator()
            while true {
                let batch = await messages.nextBatch()
                guard !batch.isEmpty, let self else { break }
                await self.deliver(batch)
            }
        }
    }

    /// Gives a batch of messages to the delegate (on the delegate queue), each after its sender's `.connected`.
    private func deliver(_ batch: [ReceivedMessage]) async {
        let receiver = dataReceiver.withLock { $0 }?.value
        // The last sender looked up, valid until this task next suspends (only then can its state change).
        var known: (fingerprint: PeerFingerprint, peerID: MCPeerID)?
        for message in batch {
            let fp = message.peer.claimedFingerprint
            let peerID: MCPeerID
            if let known, known.fingerprint == fp {
                peerID = known.peerID
            } else {
                let (wait, found) = state.withLock { state in (state.mustWait(fp), state.peerID(for: message.peer)) }
                if wait {
                    await awaitReported(fp)
                    peerID = state.withLock { $0.peerID(for: message.peer) }
                    known = nil
                } else {
                    peerID = found
                    known = (fp, found)
                }
            }
            if let receiver {
                await receiver(Data(message.bytes), peerID)
                known = nil
            } else {
                delegate?.session(self, didReceive: Data(message.bytes), fromPeer: peerID)
            }
        }
    }

    /// Waits until the delegate has heard `fp` connected (or gone); at most 2 s, should its event never come
    /// (the native session drops events an application leaves unread beyond its limit).
    private func awaitReported(_ fp: PeerFingerprint) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let number = state.withLock { state -> Int? in
                guard state.mustWait(fp) else { return nil }
                state.awaitNumber += 1
                state.awaiting = (fp, state.awaitNumber, continuation)
                return state.awaitNumber
            }
            guard let number else { return continuation.resume() }
            Task { [weak self] in
                try? await Task.sleep(for: .seconds(2))
                let late = self?.state.withLock { state -> CheckedContinuation<Void, Never>? in
                    guard let waiting = state.awaiting, waiting.number == number else { return nil }
                    state.awaiting = nil
                    return waiting.continuation
                }
                late?.resume()
            }
        }
    }

    /// One native event, on the delegate queue.
    private func handle(_ event: SessionEvent, from session: Session, generation: Int) async {
        switch event {
        case .peerChanged(let peer, let native, let reason):
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
            let (change, waiter) = state.withLock {
                state -> (MCPeerID?, CheckedContinuation<Void, Never>?) in
                // After `disconnect()`, the old session only ends the peers it reported.
                if generation != state.generation {
                    guard mapped == .notConnected, state.reported[fp]?.generation == generation else {
                        return (nil, nil)
                    }
                }
                let previous = state.reported[fp]?.state
                // The session a peer's state came from is recorded even when the state is unchanged, so a late
                // notConnected from an older session cannot end a peer the new one connected.
                state.reported[fp] = mapped == .notConnected ? nil : (mapped, generation)
                let peerID = state.peerIDs[fp] ?? MCPeerID(peer: peer)
                if mapped == .notConnected {
                    state.peerIDs[fp] = nil
                    state.connected[fp] = nil
                    state.reasons.removeValue(forKey: fp)
                    if state.reasons.count >= 1_024 { state.reasons.removeFirst() }
                    state.reasons[fp] = why
                } else {
                    state.peerIDs[fp] = peerID
                    if mapped == .connected {
                        state.connected[fp] = peerID
                        state.reasons[fp] = nil
                    } else {
                        state.connected[fp] = nil
                    }
                }
                var waiter: CheckedContinuation<Void, Never>?
                if let waiting = state.awaiting, waiting.fingerprint == fp, !state.mustWait(fp) {
                    state.awaiting = nil
                    waiter = waiting.continuation
                }
                return (previous != mapped ? peerID : nil, waiter)
            }
            // The reader resumes after this job: the delegate hears of the change before the peer's data.
            waiter?.resume()
            guard let peerID = change else { return }
            delegate?.session(self, peer: peerID, didChange: mapped)
        case .stream(let stream, let peer):
            let peerID = state.withLock { $0.peerID(for: peer) }
            delegate?.session(self, didReceive: MCInputStream(stream), withName: stream.name, fromPeer: peerID)
        case .undelivered(let peer, let numbers, let reason):
            // Apple's API has no way to say this (the native API does): the log says it.
            let peerID = state.withLock { $0.peerID(for: peer) }
            report("\(numbers.count) message(s) to \(peer.displayName) were not delivered: \(reason)", peer: peerID)
        case .resourceStarted(let incoming):
            let peerID = state.withLock { $0.peerID(for: incoming.peer) }
            delegate?.session(
                self, didStartReceivingResourceWithName: incoming.name, fromPeer: peerID, with: incoming.progress)
        case .resourceFinished(let incoming, let result):
            let peerID = state.withLock { $0.peerID(for: incoming.peer) }
            switch result {
            case .success(let url):
                delegate?.session(
                    self, didFinishReceivingResourceWithName: incoming.name, fromPeer: peerID, at: url, withError: nil)
                // Apple's file is temporary: valid only during the call.
                try? FileManager.default.removeItem(at: url)
            case .failure(let error):
                delegate?.session(
                    self, didFinishReceivingResourceWithName: incoming.name, fromPeer: peerID, at: nil,
                    withError: MCError(error))
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
            let once = Lock(false)
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

    /// Sends data to connected peers; returns once it is queued (delivery is not confirmed, as in Apple's API),
    /// without waiting. Reliable data to each peer waits in that peer's own queue, so a peer that does not keep
    /// up delays only what goes to it; unreliable data is sent at once or dropped.
    /// - Throws: ``MCError`` `notConnected` naming a peer that is not connected (then no peer gets the data);
    ///   `invalidParameter` for data longer than one message carries (4 MiB by default: send more with
    ///   `sendResource` or a stream); `unavailable` when ``maximumQueuedBytes`` of reliable data to one of the
    ///   peers are not yet confirmed (the other peers get the data).
    open func send(_ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode) throws {
        if peerIDs.count == 1 { return try send(data, to: peerIDs[0], mode: mode) }
        let (session, peers) = try targets(data, peerIDs)
        let bytes = [UInt8](data)
        var failure: SessionError?
        for peer in peers {
            guard
                case .failed(let error) = session.trySend(bytes, to: peer, mode: mode.native)
            else { continue }
            // An unreliable message may be dropped: that is its contract, not an error.
            if mode == .reliable, failure == nil { failure = error }
        }
        if let failure { throw MCError(failure) }
    }

    /// ``send(_:toPeers:with:)`` to one peer: the native session says whether it is a member.
    private func send(_ data: Data, to peerID: MCPeerID, mode: MCSessionSendDataMode) throws(MCError) {
        try checkLength(data)
        guard let session = state.withLock({ $0.current }) else { throw Self.notConnected(peerID) }
        guard case .failed(let error) = session.trySend([UInt8](data), to: peerID.nativePeer, mode: mode.native)
        else { return }
        if error.code == .notConnected { throw Self.notConnected(peerID) }
        // An unreliable message may be dropped: that is its contract, not an error.
        if mode == .reliable { throw MCError(error) }
    }

    /// `invalidParameter` for data longer than one message carries, with the way out.
    private func checkLength(_ data: Data) throws(MCError) {
        guard data.count <= maximumDataLength else {
            throw MCError(
                .invalidParameter,
                reason: "\(data.count) bytes are more than one message carries (\(maximumDataLength)); send them "
                    + "with sendResource(at:withName:toPeer:) or startStream(withName:toPeer:)")
        }
    }

    static func notConnected(_ peerID: MCPeerID) -> MCError {
        MCError(.notConnected, reason: "\(peerID.displayName) is not connected to this session")
    }

    /// The native session and peers `data` goes to (each once), after checking that it fits and that every
    /// peer is connected.
    private func targets(_ data: Data, _ peerIDs: [MCPeerID]) throws(MCError) -> (Session, [Peer]) {
        try checkLength(data)
        let session = state.withLock { $0.current }
        var peers: [Peer] = []
        var seen: Set<PeerFingerprint> = []
        for peerID in peerIDs {
            guard let session, session.isMember(peerID.nativePeer) else { throw Self.notConnected(peerID) }
            if seen.insert(peerID.fingerprint).inserted { peers.append(peerID.nativePeer) }
        }
        guard let session else { throw MCError(.notConnected, reason: "no peer is connected to this session") }
        return (session, peers)
    }

    /// Sends data with a completion that says, per peer, whether it arrived (an addition: Apple's `send`
    /// only says it was queued). For `.reliable`, `completionHandler` runs on the session's queue once every
    /// peer's session has taken the data from the connection for its delegate (in order after everything sent
    /// before), with the peers that did not get it and why (empty: all did; `unavailable` for a peer whose
    /// queue was full); for `.unreliable`, once the datagrams left, with the peers they could not be sent to.
    /// - Throws: ``MCError`` `notConnected` and `invalidParameter` as ``send(_:toPeers:with:)`` (then the
    ///   handler is not called).
    open func send(
        _ data: Data, toPeers peerIDs: [MCPeerID], with mode: MCSessionSendDataMode,
        completionHandler: @escaping ([MCPeerID: any Error]) -> Void
    ) throws {
        let (session, peers) = try targets(data, peerIDs)
        let bytes = [UInt8](data)
        var failures: [Peer: SessionError] = [:]
        var pending: [(Peer, PendingDelivery)] = []
        for peer in peers {
            if mode == .reliable {
                do throws(SessionError) {
                    pending.append((peer, try session.trySendExpectingReceipt(bytes, to: peer)))
                } catch {
                    failures[peer] = error
                }
            } else if case .failed(let error) = session.trySend(bytes, to: peer, mode: .unreliable) {
                failures[peer] = error
            }
        }
        nonisolated(unsafe) let handler = completionHandler
        let calls = calls
        let done: @Sendable ([Peer: SessionError]) -> Void = { failures in
            let errors = Dictionary(
                failures.map { (MCPeerID(peer: $0.key), MCError($0.value) as any Error) },
                uniquingKeysWith: { first, _ in first })
            calls.post { handler(errors) }
        }
        guard !pending.isEmpty else { return done(failures) }
        let waiting = pending
        let known = failures
        Task {
            var failures = known
            for (peer, delivery) in waiting {
                do throws(SessionError) {
                    try await delivery.delivered()
                } catch {
                    failures[peer] = error
                }
            }
            done(failures)
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
        guard let peer = member(peerID) else {
            complete(Self.notConnected(peerID))
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
        guard let peer = member(peerID) else {
            throw Self.notConnected(peerID)
        }
        let opening = Task { [weak self] () async throws -> PeerStream in
            guard let session = try await self?.nativeSession() else {
                throw MCError(.cancelled, reason: "the session is gone")
            }
            return try await session.openStream(named: streamName, to: peer)
        }
        return MCOutputStream(opening: opening)
    }

    /// The native peer of a connected peer ID, nil when it is not a member.
    private func member(_ peerID: MCPeerID) -> Peer? {
        let (session, known) = state.withLock { ($0.current, $0.peerIDs[peerID.fingerprint]) }
        guard let session, session.isMember(peerID.nativePeer) else { return nil }
        return known?.nativePeer ?? peerID.nativePeer
    }

    /// Leaves the session: every peer sees this side `.notConnected`, and the delegate hears each peer go
    /// `.notConnected`. `connectedPeers` is empty when this returns. The session can invite and be invited again
    /// afterwards (a fresh one underneath).
    open func disconnect() {
        let (old, waiter) = state.withLock { state -> (Task<Session, any Error>, CheckedContinuation<Void, Never>?) in
            let old = state.native
            state.generation += 1
            state.native = startNative(generation: state.generation)
            state.current = nil
            state.connected = [:]
            defer { state.awaiting = nil }
            return (old, state.awaiting?.continuation)
        }
        waiter?.resume()
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
