public import Foundation
internal import Logging
internal import MulticastDNS
public import MultipeerConnectivity
internal import MultipeerIO
internal import OrderedCollections

/// The PeerConnectivity library's manager (rchatham/PeerConnectivity) on this project's `MultipeerConnectivity`
/// module: start it, listen to its events by key, send data, events, typed messages, streams and resources.
///
/// Differences from the original, all in the direction of its own open issues: events reach listeners in the
/// order they happened; streams, resources and discovery info work whatever the backend; a pre-shared key works
/// with either backend; the completion forms of `sendData` and `sendMessage` report each peer's real outcome;
/// typed messages that fail to decode are reported as `.error`; a received resource's file is kept for the
/// application (in ``receivedResourcesDirectory``) instead of vanishing while a listener is queued.
public class PeerConnectionManager: @unchecked Sendable {
    // Safety of @unchecked Sendable: immutable properties, and mutable state behind `state`.

    // MARK: Shared managers

    private static let registry = Lock<[ServiceType: WeakManager]>([:])

    private struct WeakManager: @unchecked Sendable {
        weak var manager: PeerConnectionManager?
    }

    /// The live managers by service type; a new manager for a service type stops the previous one.
    public static var shared: [ServiceType: PeerConnectionManager] {
        registry.withLock { $0.compactMapValues { $0.manager } }
    }

    /// Whether `serviceType` is 1-15 letters of either case, digits and hyphens, with a letter, no hyphen at either
    /// end and none twice in a row.
    public static func isValidServiceType(_ serviceType: ServiceType) -> Bool {
        // The one implementation of the rules (RFC 6335), as MCNearbyServiceAdvertiser and the engine use them.
        (try? MulticastDNS.ServiceType(serviceType)) != nil
    }

    // MARK: Properties

    /// How found peers are connected.
    public let connectionType: PeerConnectionType
    /// The backend asked for (both are the same implementation here).
    public let backend: PeerConnectionBackend
    /// The pre-shared key, if any.
    public let networkSecurity: PeerConnectionNetworkSecurity
    /// The local user.
    public let peer: Peer
    /// The session's security.
    public let securityConfiguration: PeerSecurityConfiguration
    /// The discovery info advertised.
    public let discoveryInfo: PeerDiscoveryInfo?
    /// How invitations are answered in `.automatic` mode.
    public let invitationPolicy: PeerInvitationPolicy
    /// Where received resources are kept for the application (it moves or deletes them).
    public let receivedResourcesDirectory: URL

    /// The peers connected now.
    public var connectedPeers: [Peer] { session.connectedPeers.map { Peer(peerID: $0, status: .connected) } }
    /// The nearby peers found and not lost.
    public var foundPeers: [Peer] { state.withLock { Array($0.found) } }
    /// The service type.
    public var peerServiceType: ServiceType { serviceType }
    /// The Multipeer Connectivity session (always available here).
    public var availableMultipeerSession: MCSession? { session }
    /// The Multipeer Connectivity session.
    public var multipeerSession: MCSession { session }

    let serviceType: ServiceType
    let session: MCSession
    private let advertiser: MCNearbyServiceAdvertiser
    private let browser: MCNearbyServiceBrowser
    private let bridge: DelegateBridge
    /// Every event goes through this queue, so listeners see them in order.
    private let events = DispatchQueue(label: "PeerConnectionManager.events")
    private let state = Lock(State())

    private struct State {
        /// Found and not lost, in the order found.
        var found: OrderedSet<Peer> = []
        var listeners: [String: Listener] = [:]
        var running: (browsing: Bool, advertising: Bool) = (false, false)
        /// The mode of the last start, which `refresh()` starts again.
        var mode: (browsing: Bool, advertising: Bool) = (true, true)
        /// Automatic re-invitations in a row per peer since it was last connected.
        var retries: [Peer: Int] = [:]
    }

    /// Data waiting for listeners: a peer sending faster than the listeners take it is held back (the session's
    /// delegate queue waits here, and flow control reaches the sender) instead of filling memory.
    private let budget = ByteBudget(limit: 16 << 20)

    private struct Listener: @unchecked Sendable {
        // Safety: called on the events queue only (or on the main queue, one call at a time).
        /// Calls the listener with an event; a listener that runs later (on the main queue) enters the group and
        /// leaves it when done.
        let call: (PeerConnectionEvent, DispatchGroup) -> Void
    }

    /// A manager for `serviceType`. Stops with the rule broken for an invalid service type, as the original's
    /// Multipeer Connectivity objects raise; an empty or overlong display name is sanitized.
    /// - Parameters:
    ///   - serviceType: The service type.
    ///   - connectionType: `.automatic` (default), `.inviteOnly` or `.custom`.
    ///   - displayName: The name others see; the host name by default.
    ///   - securityConfiguration: Encryption and the certificate policy.
    ///   - discoveryInfo: Public metadata for browsers.
    ///   - invitationPolicy: How `.automatic` answers invitations.
    ///   - backend: Either; the same implementation.
    ///   - networkSecurity: A pre-shared key every peer must prove (at least 32 bytes), or none.
    public init(
        serviceType: ServiceType, connectionType: PeerConnectionType = .automatic,
        displayName: String = ProcessInfo.processInfo.hostName,
        securityConfiguration: PeerSecurityConfiguration = .default, discoveryInfo: PeerDiscoveryInfo? = nil,
        invitationPolicy: PeerInvitationPolicy = .acceptAll, backend: PeerConnectionBackend = .multipeerConnectivity,
        networkSecurity: PeerConnectionNetworkSecurity = .unauthenticated
    ) {
        guard Self.isValidServiceType(serviceType) else {
            fatalError(
                "PeerConnectivity: invalid serviceType '\(serviceType)': 1-15 letters, digits and hyphens, "
                    + "with a letter, no hyphen at either end or twice in a row")
        }
        self.serviceType = serviceType
        self.connectionType = connectionType
        self.backend = backend
        self.networkSecurity = networkSecurity
        self.securityConfiguration = securityConfiguration
        self.discoveryInfo = discoveryInfo
        self.invitationPolicy = invitationPolicy
        let peerID = MCPeerID(displayName: Peer.sanitizedDisplayName(displayName))
        peer = Peer(peerID: peerID, status: .currentUser)
        var secret: Data?
        var encryption = securityConfiguration.encryptionPreference
        if case .preSharedKey(let key) = networkSecurity {
            secret = key
            if encryption == .none { encryption = .required }  // a shared key is only proven over TLS
        }
        session = MCSession(
            peer: peerID, securityIdentity: securityConfiguration.securityIdentity, encryptionPreference: encryption,
            maximumNumberOfPeers: kMCSessionMaximumNumberOfPeers, groupSecret: secret)
        advertiser = MCNearbyServiceAdvertiser(
            peer: peerID, discoveryInfo: discoveryInfo, serviceType: serviceType, groupSecret: secret)
        browser = MCNearbyServiceBrowser(peer: peerID, serviceType: serviceType)
        receivedResourcesDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "PeerConnectivity-\(getuid())-\(UUID().uuidString)", isDirectory: true)
        bridge = DelegateBridge()
        bridge.manager = self
        session.delegate = bridge
        session.receiveData { [weak self] data, peerID in await self?.received(data, from: peerID) }
        advertiser.delegate = bridge
        browser.delegate = bridge
        let previous = Self.registry.withLock { registry -> PeerConnectionManager? in
            defer { registry[serviceType] = WeakManager(manager: self) }
            return registry[serviceType]?.manager
        }
        if let previous {
            previous.stop()
            previous.removeAllListeners()
        }
    }

    deinit {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        session.disconnect()
        let serviceType = serviceType
        Self.registry.withLock { if $0[serviceType]?.manager == nil { $0[serviceType] = nil } }
    }

    // MARK: Starting and stopping

    /// Starts advertising and browsing; `completion` runs once they started.
    public func start(_ completion: (() -> Void)? = nil) {
        startAdvertisingAndBrowsing(completion)
    }

    /// Starts advertising and browsing.
    public func startAdvertisingAndBrowsing(_ completion: (() -> Void)? = nil) {
        begin(browse: true, advertise: true, completion)
    }

    /// Starts browsing only (this peer is not discoverable).
    public func startBrowsingOnly(_ completion: (() -> Void)? = nil) {
        begin(browse: true, advertise: false, completion)
    }

    /// Starts advertising only (this peer does not look for others).
    public func startAdvertisingOnly(_ completion: (() -> Void)? = nil) {
        begin(browse: false, advertise: true, completion)
    }

    private func begin(browse: Bool, advertise: Bool, _ completion: (() -> Void)?) {
        state.withLock {
            $0.running = (browse, advertise)
            $0.mode = (browse, advertise)
            $0.found = []
            $0.retries = [:]
        }
        if advertise { advertiser.startAdvertisingPeer() }
        if browse { browser.startBrowsingForPeers() }
        emit(.started)
        if let completion {
            nonisolated(unsafe) let unsafeCompletion = completion
            events.async { unsafeCompletion() }
        }
    }

    /// Stops advertising and browsing and leaves the session (every connected peer sees this one leave).
    public func stop() {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        session.disconnect()
        let hadPeers = state.withLock { state -> Bool in
            defer {
                state.found = []
                state.running = (false, false)
            }
            return !state.found.isEmpty
        }
        emit(.ended)
        if hadPeers { emit(.nearbyPeersChanged(foundPeers: [])) }
        emit(.ready)
    }

    /// Stops, then starts again in the same mode.
    public func refresh(_ completion: (() -> Void)? = nil) {
        let (browse, advertise) = state.withLock { $0.mode }
        stop()
        begin(browse: browse, advertise: advertise, completion)
    }

    /// Stops browsing (no more peers are found or invited).
    public func closeSession() { browser.stopBrowsingForPeers() }

    /// Starts browsing again.
    public func openSession() { browser.startBrowsingForPeers() }

    // MARK: Connecting and sending

    /// Invites a found peer into the session; the outcome shows as `devicesChanged`.
    public func invitePeer(_ peer: Peer, withContext context: Data? = nil, timeout: TimeInterval = 30) {
        browser.invitePeer(peer.peerID, to: session, withContext: context, timeout: timeout)
    }

    private func targets(_ peers: [Peer]) -> [MCPeerID] {
        (peers.isEmpty ? connectedPeers : peers).map(\.peerID)
    }

    /// Sends data to `peers` (every connected peer when empty). Failures are written to standard error; use the
    /// completion form to learn them.
    public func sendData(_ data: Data, toPeers peers: [Peer] = []) {
        do {
            try session.send(data, toPeers: targets(peers), with: .reliable)
        } catch {
            report("sendData: \(error.localizedDescription)")
        }
    }

    /// Sends data and reports, per peer, whether it arrived (its session took it for its listeners): `completion`
    /// runs (on the events queue) with the peers that did not and why; empty when every peer did.
    public func sendData(_ data: Data, toPeers peers: [Peer] = [], completion: @escaping ([Peer: any Error]) -> Void) {
        nonisolated(unsafe) let handler = completion
        let targets = targets(peers)
        let events = events
        do {
            try session.send(data, toPeers: targets, with: .reliable) { failures in
                let byPeer = Dictionary(
                    failures.map { (Peer(peerID: $0.key, status: .notConnected), $0.value) },
                    uniquingKeysWith: { first, _ in first })
                events.async { handler(byPeer) }
            }
        } catch {
            let failure = error
            events.async {
                handler(
                    Dictionary(
                        targets.map { (Peer(peerID: $0, status: .notConnected), failure) },
                        uniquingKeysWith: { first, _ in first })
                )
            }
        }
    }

    /// Sends a dictionary of strings, numbers, booleans, dates, data, arrays and dictionaries; peers get
    /// `.receivedEvent`. (JSON on the wire: the original's `NSKeyedArchiver` form cannot be decoded safely here.)
    @available(*, deprecated, message: "Use sendMessage(_:toPeers:) with PeerMessage types for type-safe messaging")
    public func sendEvent(_ eventInfo: [String: Any], toPeers peers: [Peer] = []) {
        guard let data = EventCoding.encode(eventInfo) else {
            return report(
                "sendEvent: an event carries strings, numbers, booleans, dates, data, arrays and dictionaries only")
        }
        sendData(data, toPeers: peers)
    }

    /// Sends a typed message as JSON; peers get `.receivedMessage` and their `observeMessages` listeners.
    public func sendMessage<T: PeerMessage>(_ message: T, toPeers peers: [Peer] = []) {
        do {
            sendData(try Self.envelope(message), toPeers: peers)
        } catch {
            report("sendMessage: cannot encode \(T.messageType): \(error.localizedDescription)")
        }
    }

    /// Sends a typed message and reports each peer's outcome, as the completion form of `sendData`.
    public func sendMessage<T: PeerMessage>(
        _ message: T, toPeers peers: [Peer] = [], completion: @escaping ([Peer: any Error]) -> Void
    ) {
        do {
            sendData(try Self.envelope(message), toPeers: peers, completion: completion)
        } catch {
            let failure = error
            let targets = targets(peers)
            nonisolated(unsafe) let handler = completion
            events.async {
                handler(
                    Dictionary(
                        targets.map { (Peer(peerID: $0, status: .notConnected), failure) },
                        uniquingKeysWith: { first, _ in first })
                )
            }
        }
    }

    /// The wire form of a typed message: a JSON object of `type` and `payload`, both base64 data (the original
    /// library's envelope, so the two can talk).
    static func envelope<T: PeerMessage>(_ message: T) throws -> Data {
        let envelope: [String: Data] = [
            "type": Data(T.messageType.utf8), "payload": try JSONEncoder().encode(message),
        ]
        return try JSONEncoder().encode(envelope)
    }

    /// Opens a byte stream to a connected peer.
    /// - Throws: `MCError` `notConnected`.
    public func sendDataStream(streamName name: String, toPeer peer: Peer) throws -> OutputStream {
        try session.startStream(withName: name, toPeer: peer.peerID)
    }

    /// Sends a resource to `peers` (every connected peer when empty); the completion runs once per peer.
    /// - Returns: Each peer's progress (nil where it could not start).
    @discardableResult
    public func sendResourceAtURL(
        _ resourceURL: URL, withName name: String, toPeers peers: [Peer] = [],
        withCompletionHandler completion: (((any Error)?) -> Void)?
    ) -> [Peer: Progress?] {
        var progress: [Peer: Progress?] = [:]
        for peerID in targets(peers) {
            progress[Peer(peerID: peerID, status: .connected)] = session.sendResource(
                at: resourceURL, withName: name, toPeer: peerID, withCompletionHandler: completion)
        }
        return progress
    }

    // MARK: Listeners

    /// Adds (or replaces) the listener for `key`. By default it runs on the main queue (run the main run loop or
    /// `dispatchMain()`); with `performListenerInBackground`, on the manager's own serial queue. Either way it sees
    /// the events in the order they happened.
    public func listenOn(
        _ listener: @escaping PeerConnectionEventListener, performListenerInBackground background: Bool = false,
        withKey key: String
    ) {
        let call: (PeerConnectionEvent, DispatchGroup) -> Void
        if background {
            call = { event, _ in listener(event) }
        } else {
            call = { event, group in
                nonisolated(unsafe) let event = event
                nonisolated(unsafe) let listener = listener
                group.enter()
                DispatchQueue.main.async {
                    listener(event)
                    group.leave()
                }
            }
        }
        state.withLock { $0.listeners[key] = Listener(call: call) }
    }

    /// Calls `listener` with each event dictionary received (`sendEvent`), on the manager's queue (in the
    /// background, as the original did).
    @available(*, deprecated, message: "Use observeMessages(ofType:forKey:listener:) for type-safe messaging")
    public func observeEventListenerForKey(_ key: String, listener: @escaping ([String: Any], Peer) -> Void) {
        listenOn(
            { event in
                if case .receivedEvent(let peer, let info) = event { listener(info, peer) }
            }, performListenerInBackground: true, withKey: key)
    }

    /// Calls `listener` on the main queue with each message of type `T`; one that does not decode is reported as
    /// `.error` to every listener instead of vanishing.
    public func observeMessages<T: PeerMessage>(
        ofType type: T.Type, forKey key: String, listener: @escaping (T, Peer) -> Void
    ) {
        listenOn(
            { [weak self] event in
                guard case .receivedMessage(let peer, T.messageType, let data) = event else { return }
                do {
                    guard EventCoding.isSafeJSON(data) else {
                        throw CocoaError(.coderReadCorrupt, userInfo: [NSLocalizedDescriptionKey: "nested too deep"])
                    }
                    listener(try JSONDecoder().decode(T.self, from: data), peer)
                } catch {
                    self?.emit(.error(MessageDecodingError(messageType: T.messageType, peer: peer, reason: "\(error)")))
                }
            }, withKey: key)
    }

    /// Removes the listener for `key`.
    public func removeListenerForKey(_ key: String) {
        _ = state.withLock { $0.listeners.removeValue(forKey: key) }
    }

    /// Removes every listener.
    public func removeAllListeners() {
        state.withLock { $0.listeners = [:] }
    }

    /// Delivers `event` to every listener, in order with every other event; `done` runs once every listener
    /// (also those on the main queue) has had it.
    func emit(_ event: PeerConnectionEvent, done: (@Sendable () -> Void)? = nil) {
        nonisolated(unsafe) let event = event
        events.async { [weak self] in
            guard let self else {
                done?()
                return
            }
            let listeners = self.state.withLock { Array($0.listeners.values) }
            let group = DispatchGroup()
            for listener in listeners { listener.call(event, group) }
            if let done { group.notify(queue: self.events, execute: done) }
        }
    }

    // MARK: From the session, advertiser and browser

    func found(_ peerID: MCPeerID, info: PeerDiscoveryInfo?) {
        let peer = Peer(peerID: peerID, status: .notConnected)
        let list = state.withLock { state -> [Peer]? in
            // A report still on its way when browsing stopped does not count.
            guard state.running.browsing, state.found.append(peer).inserted else { return nil }
            return Array(state.found)
        }
        guard let list else { return }
        emit(.foundPeer(peer: peer))
        emit(.foundPeerWithDiscoveryInfo(peer: peer, discoveryInfo: info))
        emit(.nearbyPeersChanged(foundPeers: list))
        if connectionType == .automatic, !session.connectedPeers.contains(peerID) {
            browser.invitePeer(peerID, to: session, withContext: nil, timeout: 30)
        }
    }

    func lost(_ peerID: MCPeerID) {
        let peer = Peer(peerID: peerID, status: .notConnected)
        let list = state.withLock { state -> [Peer]? in
            guard state.found.remove(peer) != nil else { return nil }
            return Array(state.found)
        }
        guard let list else { return }
        emit(.lostPeer(peer: peer))
        emit(.nearbyPeersChanged(foundPeers: list))
    }

    func invited(by peerID: MCPeerID, context: Data?, answer: @escaping (Bool, MCSession?) -> Void) {
        let peer = Peer(peerID: peerID, status: .notConnected)
        let session = session
        nonisolated(unsafe) let answer = answer
        let reply: (Bool) -> Void = { accept in answer(accept, accept ? session : nil) }
        guard connectionType == .automatic else {
            return emit(.receivedInvitation(peer: peer, withContext: context, invitationHandler: reply))
        }
        switch invitationPolicy {
        case .manual:
            emit(.receivedInvitation(peer: peer, withContext: context, invitationHandler: reply))
        case .acceptAll:
            emit(.receivedInvitation(peer: peer, withContext: context, invitationHandler: { _ in }))
            reply(true)
        case .rejectAll:
            emit(.receivedInvitation(peer: peer, withContext: context, invitationHandler: { _ in }))
            reply(false)
        case .custom(let decide):
            emit(.receivedInvitation(peer: peer, withContext: context, invitationHandler: { _ in }))
            reply(decide(peer, context))
        }
    }

    func certificate(_ certificate: [Any]?, from peerID: MCPeerID, handler: @escaping (Bool) -> Void) {
        let peer = Peer(peerID: peerID, status: .connecting)
        switch securityConfiguration.certificatePolicy {
        case .acceptAll: handler(true)
        case .rejectAll: handler(false)
        case .requireCertificate: handler(certificate?.isEmpty == false)
        case .custom(let decide): decide(peer, certificate, handler)
        }
        emit(.receivedCertificate(peer: peer, certificate: certificate, handler: { _ in }))
    }

    func changed(_ peerID: MCPeerID, _ state: MCSessionState) {
        let status: Peer.Status =
            switch state {
            case .connected: .connected
            case .connecting: .connecting
            case .notConnected: .notConnected
            }
        let peer = Peer(peerID: peerID, status: status)
        emit(.devicesChanged(peer: peer, connectedPeers: connectedPeers))
        // `.automatic` keeps trying a found peer that dropped out or whose invitation failed (the original
        // refreshed the whole manager for this), at most 3 times in a row.
        let retry = self.state.withLock { state -> Bool in
            if status == .connected { state.retries[peer] = nil }
            guard status == .notConnected, connectionType == .automatic, state.running.browsing,
                state.found.contains(peer), state.retries[peer, default: 0] < 3
            else { return false }
            state.retries[peer, default: 0] += 1
            return true
        }
        guard retry else { return }
        // At once: the session already bridged a short outage, and the invitation's own timeout paces a peer that
        // does not answer.
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 30)
    }

    /// Called by the session's message reader, which waits here (suspended, no thread held) while listeners have
    /// 16 MiB of data to take: flow control then holds the sender back.
    func received(_ data: Data, from peerID: MCPeerID) async {
        let peer = Peer(peerID: peerID, status: .connected)
        await budget.take(data.count)
        let budget = budget
        let count = data.count
        let release: @Sendable () -> Void = { budget.give(count) }
        // JSON a peer sent is parsed only when short and shallow enough (see EventCoding).
        switch EventCoding.classify(data) {
        case .message(let type, let payload):
            emit(.receivedData(peer: peer, data: data))
            emit(.receivedMessage(peer: peer, messageType: type, data: payload), done: release)
        case .event(let info):
            emit(.receivedData(peer: peer, data: data))
            emit(.receivedEvent(peer: peer, eventInfo: info), done: release)
        case .data:
            emit(.receivedData(peer: peer, data: data), done: release)
        }
    }

    func receivedStream(_ stream: InputStream, name: String, from peerID: MCPeerID) {
        emit(.receivedStream(peer: Peer(peerID: peerID, status: .connected), stream: stream, name: name))
    }

    func startedResource(_ name: String, from peerID: MCPeerID, progress: Progress) {
        emit(.startedReceivingResource(peer: Peer(peerID: peerID, status: .connected), name: name, progress: progress))
    }

    /// Called while the file still exists (inside the session's delegate call): moves it where it stays.
    func finishedResource(_ name: String, from peerID: MCPeerID, at url: URL?, error: (any Error)?) {
        var kept: URL?
        var failure = error
        if let url {
            do {
                try FileManager.default.createDirectory(
                    at: receivedResourcesDirectory, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
                // A folder per resource: two with the same name never collide.
                let folder = receivedResourcesDirectory.appendingPathComponent(UUID().uuidString, isDirectory: true)
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
                let target = folder.appendingPathComponent(url.lastPathComponent)
                try FileManager.default.moveItem(at: url, to: target)
                kept = target
            } catch {
                failure = error
            }
        }
        emit(
            .finishedReceivingResource(
                peer: Peer(peerID: peerID, status: .connected), name: name, url: kept, error: failure))
    }

    func failed(_ error: any Error) { emit(.error(error)) }

    /// Logs what the manager could not do where the original printed it, through the MultipeerConnectivity
    /// module's logger (nothing unless the application gives one or `MULTIPEER_LOG` names a level).
    private func report(_ line: String) {
        MCNetwork.logger.warning("PeerConnectivity: \(line)")
    }
}

/// A typed message whose payload did not decode as its type.
public struct MessageDecodingError: Error, CustomStringConvertible {
    /// The message type.
    public let messageType: String
    /// Who sent it.
    public let peer: Peer
    /// Why it did not decode.
    public let reason: String

    /// The message type, the sender and the reason.
    public var description: String { "a \(messageType) message from \(peer.displayName) did not decode: \(reason)" }
}

/// Receives the Multipeer Connectivity delegate calls of a manager's session, advertiser and browser.
final class DelegateBridge: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate,
    MCNearbyServiceBrowserDelegate, @unchecked Sendable
{
    // Safety: `manager` is set once, before the objects it is the delegate of start.
    weak var manager: PeerConnectionManager?

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        manager?.changed(peerID, state)
    }

    /// Not called: the manager takes data through the session's data receiver (which may wait).
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        manager?.receivedStream(stream, name: streamName, from: peerID)
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {
        manager?.startedResource(resourceName, from: peerID, progress: progress)
    }

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {
        manager?.finishedResource(resourceName, from: peerID, at: localURL, error: error)
    }

    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        guard let manager else { return certificateHandler(false) }
        manager.certificate(certificate, from: peerID, handler: certificateHandler)
    }

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        guard let manager else { return invitationHandler(false, nil) }
        manager.invited(by: peerID, context: context, answer: invitationHandler)
    }

    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        manager?.failed(error)
    }

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        manager?.found(peerID, info: info)
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        manager?.lost(peerID)
    }

    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        manager?.failed(error)
    }
}

/// A byte budget one side takes from (suspending while it is spent, no thread blocked) and the other gives back to.
final class ByteBudget: Sendable {
    /// The bytes taken, and the takers waiting for some to come back (each looks again when woken).
    private let state = Lock<(used: Int, waiting: [CheckedContinuation<Bool, Never>])>((0, []))
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes `count` bytes, waiting while the budget is spent (a single take larger than the limit waits for all).
    func take(_ count: Int) async {
        while true {
            let taken = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let fits = state.withLock { state -> Bool in
                    guard state.used == 0 || state.used + count <= limit else {
                        state.waiting.append(continuation)
                        return false
                    }
                    state.used += count
                    return true
                }
                if fits { continuation.resume(returning: true) }
            }
            if taken { return }
        }
    }

    /// Gives `count` bytes back.
    func give(_ count: Int) {
        let woken = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.used -= count
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in woken { continuation.resume(returning: false) }
    }
}
