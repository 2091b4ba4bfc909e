public import Foundation

/// The found peers of a manager as a list an application's own UI shows, with an invite action (the
/// original's replacement for Apple's browser view controller).
public final class PeerBrowserModel: @unchecked Sendable {
    // Safety of @unchecked Sendable: the list and handler behind `lock`.

    /// Called on the main queue with the list whenever it changes.
    public typealias PeersChangedHandler = ([Peer]) -> Void

    private let manager: PeerConnectionManager
    private let listenerKey: String
    private let lock = NSLock()
    private var peers: [Peer] = []
    private var peersChanged: PeersChangedHandler?
    private var observing = false

    /// The found peers, in the order they were found, with their latest status.
    public var discoveredPeers: [Peer] { lock.withLock { peers } }

    /// A model of `manager`'s found peers.
    /// - Parameters:
    ///   - manager: The manager to follow.
    ///   - listenerKey: The key it listens under; a unique one by default.
    ///   - peersChanged: Called on the main queue after each change.
    public init(manager: PeerConnectionManager, listenerKey: String? = nil, peersChanged: PeersChangedHandler? = nil) {
        self.manager = manager
        self.listenerKey = listenerKey ?? "PeerConnectivity.PeerBrowserModel.\(UUID().uuidString)"
        self.peersChanged = peersChanged
    }

    deinit { stopObserving() }

    /// Starts following the manager's events.
    public func startObserving() {
        guard
            lock.withLock({ () -> Bool in
                defer { observing = true }
                return !observing
            })
        else { return }
        manager.listenOn(
            { [weak self] event in self?.handle(event) }, performListenerInBackground: true, withKey: listenerKey)
    }

    /// Stops following them.
    public func stopObserving() {
        guard
            lock.withLock({ () -> Bool in
                defer { observing = false }
                return observing
            })
        else { return }
        manager.removeListenerForKey(listenerKey)
    }

    /// Invites a listed peer.
    public func invitePeer(_ peer: Peer, withContext context: Data? = nil, timeout: TimeInterval = 30) {
        manager.invitePeer(peer, withContext: context, timeout: timeout)
    }

    private func handle(_ event: PeerConnectionEvent) {
        switch event {
        case .foundPeer(let peer):
            update { if !$0.contains(peer) { $0.append(peer) } }
        case .lostPeer(let peer):
            update { $0.removeAll { $0 == peer } }
        case .nearbyPeersChanged(let found):
            update { peers in peers = found.map { peer in peers.first { $0 == peer } ?? peer } }
        case .devicesChanged(let peer, _):
            update { peers in
                if let index = peers.firstIndex(of: peer) { peers[index] = peer }
            }
        default:
            break
        }
    }

    private func update(_ change: (inout [Peer]) -> Void) {
        let (list, handler) = lock.withLock { () -> ([Peer], PeersChangedHandler?) in
            change(&peers)
            return (peers, peersChanged)
        }
        guard let handler else { return }
        nonisolated(unsafe) let unsafeHandler = handler
        DispatchQueue.main.async { unsafeHandler(list) }
    }
}
