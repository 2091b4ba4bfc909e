internal import MultipeerIO
import MultipeerIO
import OrderedCollections

/// What one network knows of relaying: the relayed addresses peers advertised (dialed through a relay, after
/// their direct addresses) and the allocations it holds, one per listening identity, through which it dials them.
///
/// Relayed addresses are the relay's own `IP:port` pairs, where no peer listens directly, so the set alone tells
/// a dialer how to reach one: a member's address kept for a reconnection, or one an introduction names, is
/// dialed through the relay again just as the advertisement's was.
final class RelayRoutes: Sendable {
    /// The most relayed addresses remembered (the oldest forgotten first): each is a few bytes, and only
    /// advertisements, which any host on the link or in the domain can send, add them.
    static let maximumAddresses = 4096

    private struct State {
        var addresses: OrderedSet<SocketAddress> = []
        var clients: [(identity: PeerFingerprint, client: RelayClient)] = []
    }

    private let state = Lock(State())

    /// Remembers a relayed address a peer advertised.
    func learn(_ address: SocketAddress) {
        state.withLock { state in
            guard state.addresses.updateOrAppend(address) == nil else { return }
            if state.addresses.count > Self.maximumAddresses { state.addresses.removeFirst() }
        }
    }

    /// Whether `address` is a relayed address.
    func isRelayed(_ address: SocketAddress) -> Bool { state.withLock { $0.addresses.contains(address) } }

    /// Which of `addresses` are relayed.
    func relayed(among addresses: [SocketAddress]) -> Set<SocketAddress> {
        state.withLock { state in Set(addresses.filter { state.addresses.contains($0) }) }
    }

    /// The allocation to dial through for an identity: its own, or any of the network's.
    func client(for identity: PeerFingerprint) -> RelayClient? {
        state.withLock { state in
            state.clients.first { $0.identity == identity }?.client ?? state.clients.first?.client
        }
    }

    /// Every allocation's client.
    var clients: [RelayClient] { state.withLock { $0.clients.map(\.client) } }

    func add(_ client: RelayClient, for identity: PeerFingerprint) {
        state.withLock { $0.clients.append((identity, client)) }
    }
}
