public import MulticastDNS
public import MultipeerIO

/// A peer a browser found: who, what it advertises, and where.
public struct DiscoveredPeer: Sendable, Hashable {
    /// The peer; its identity is `advertised` until a connection proves it.
    public let peer: Peer
    /// The application's discovery info from the peer's TXT record.
    public let discoveryInfo: [String: String]
    /// The addresses it was seen at, with their interfaces.
    public let addresses: [DiscoveredAddress]
    /// The interfaces it was seen on.
    public let interfaces: [String]
    /// The port it listens on.
    public let port: UInt16
    /// Where it can be reached through a TURN relay, when it advertises a relayed address: dialed after every
    /// direct address, through this side's own allocation on that relay (the network needs a relay configured).
    public let relayedAddress: SocketAddress?
}

/// Finds peers advertising a service type and invites them into sessions.
///
/// Events are per identity: one `found` per peer however many instances or interfaces show it, `updated`
/// when its discovery info, addresses or name change, `lost` when its last instance is gone. This peer's own
/// advertisement is never reported, nor are instances whose TXT record is not a valid ``PeerAdvertisement``
/// or that speak another major protocol version (counted in ``ignoredInstances``).
public final class PeerBrowser: Sendable {
    /// What a browser reports.
    public enum Event: Sendable, Hashable {
        /// A new peer.
        case found(DiscoveredPeer)
        /// A peer's discovery info, name or addresses changed.
        case updated(DiscoveredPeer)
        /// A peer's last advertisement is gone.
        case lost(Peer)
    }

    /// The service type browsed.
    public let serviceType: ServiceType
    /// This side's identity (its own advertisement is filtered out).
    public let identity: PeerIdentity
    /// The network.
    public let network: PeerNetwork
    /// Found, updated and lost events, in order; ends when the browser stops.
    public let events: AsyncStream<Event>
    private let browser: ServiceBrowser
    /// The browse of the network's wide-area domains, when it has them.
    private let wideAreaBrowse: WideAreaBrowse?
    private let state = Lock(State())

    /// Where an instance was found: multicast DNS on the link, or a wide-area domain (instances of one name in
    /// two places are two instances; both may name the same peer, which is found once).
    private struct InstanceKey: Hashable {
        var wideArea: Bool
        var name: String
    }

    private struct State {
        /// Instance to the fingerprint and service it advertises.
        var instances: [InstanceKey: (PeerFingerprint, DiscoveredService)] = [:]
        /// What was last reported per peer.
        var peers: [PeerFingerprint: DiscoveredPeer] = [:]
        /// Every address of every instance that names the peer, each with its instance's port: an invitation
        /// tries them all, so an instance that merely claims the peer's identity cannot decide where we dial.
        var dial: [PeerFingerprint: [SocketAddress]] = [:]
        var ignored = 0
    }

    /// Starts browsing.
    /// - Parameters:
    ///   - serviceType: The service type, such as `chat`.
    ///   - identity: This side's identity.
    ///   - network: The process's network.
    /// - Throws: ``SessionError`` with `invalidParameter` for a bad service type, `unavailable` when discovery
    ///   cannot start.
    public init(serviceType: String, identity: PeerIdentity, network: PeerNetwork) async throws(SessionError) {
        do {
            self.serviceType = try ServiceType(serviceType)
        } catch {
            throw SessionError(.invalidParameter, "service type '\(serviceType)': \(error)")
        }
        self.identity = identity
        self.network = network
        let stack = try await network.discovery()
        browser = stack.browse(self.serviceType)
        let limit = stack.configuration.eventBufferLimit
        let (events, sink) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingOldest(limit))
        self.events = events
        wideAreaBrowse = network.wideArea?.browse(self.serviceType, bufferLimit: limit)
        // Both sources feed one reader, so the peers' events come out in the order their changes were made.
        let (merged, mergedSink) = AsyncStream<(Bool, ServiceBrowserEvent)>.makeStream(
            bufferingPolicy: .bufferingOldest(2 * limit))
        let sources = [(false, browser.events)] + (wideAreaBrowse.map { [(true, $0.events)] } ?? [])
        let feeding = SourceCount(sources.count)
        for (wideArea, source) in sources {
            Task {
                for await event in source { mergedSink.yield((wideArea, event)) }
                if feeding.ended() { mergedSink.finish() }
            }
        }
        Task { [weak self] in
            for await (wideArea, event) in merged {
                guard let self else { break }
                for out in self.handle(event, wideArea: wideArea) { sink.yield(out) }
            }
            sink.finish()
        }
    }

    /// Instances ignored: not a valid peer advertisement, or another major protocol version.
    public var ignoredInstances: Int { state.withLock { $0.ignored } }

    /// The peers found and not lost.
    public var peers: [DiscoveredPeer] {
        state.withLock { Array($0.peers.values) }.sorted { $0.peer.displayName < $1.peer.displayName }
    }

    /// Stops browsing; ``events`` ends.
    public func stop() {
        browser.stop()
        wideAreaBrowse?.stop()
    }

    /// Invites a found peer into a session and returns how it ended; the session reports the same as the
    /// peer's state (`connecting`, then `connected` or `notConnected` with the outcome as reason).
    ///
    /// - Parameters:
    ///   - peer: A peer this browser found (equal by fingerprint).
    ///   - session: The session to invite it into.
    ///   - context: Data the invitee's application sees (at most ``Invitation/maximumContextLength`` bytes).
    ///   - timeout: How long to wait for the answer, dialing included; zero or less means 30 s, as in Apple's API.
    /// - Returns: accepted, declined (with the reason), timed out, unreachable (every attempt's error), or
    ///   refused (security, limits, a full session).
    public func invite(
        _ peer: Peer, into session: Session, context: [UInt8] = [], timeout: Duration = .seconds(30)
    ) async -> InvitationOutcome {
        guard
            let (found, addresses) = state.withLock({ state -> (DiscoveredPeer, [SocketAddress])? in
                guard let found = state.peers[peer.claimedFingerprint] else { return nil }
                return (found, state.dial[peer.claimedFingerprint] ?? [])
            })
        else {
            // Through the session, so its application sees the attempt end like any other (`connecting`, then
            // `notConnected` with the reason).
            return await session.inviteUnreachable(
                peer,
                ConnectionError(
                    code: .unreachable, reason: "\(peer.displayName) is not (or no longer) found by this browser"))
        }
        return await session.invite(
            found.peer, addresses: addresses, serviceType: serviceType.description, context: context, timeout: timeout)
    }

    private func handle(_ event: ServiceBrowserEvent, wideArea: Bool) -> [Event] {
        let service = event.service
        let key = InstanceKey(wideArea: wideArea, name: service.name)
        return state.withLock { state -> [Event] in
            var touched: Set<PeerFingerprint> = []
            if let (old, _) = state.instances.removeValue(forKey: key) { touched.insert(old) }
            if case .lost = event {
            } else if let advertisement = try? PeerAdvertisement(parsing: service.txt),
                advertisement.protocolVersion.major == PeerAdvertisement.ProtocolVersion.current.major
            {
                if advertisement.fingerprint != identity.fingerprint {
                    state.instances[key] = (advertisement.fingerprint, service)
                    touched.insert(advertisement.fingerprint)
                }
            } else if case .found = event {
                state.ignored += 1
            }
            var out: [Event] = []
            for fp in touched {
                // The link's instances first: their addresses are dialed before a domain's.
                let current = state.instances.filter { $0.value.0 == fp }.sorted {
                    ($0.key.wideArea ? 1 : 0, $0.key.name) < ($1.key.wideArea ? 1 : 0, $1.key.name)
                }.map(\.value.1)
                guard let primary = current.first, let advertisement = try? PeerAdvertisement(parsing: primary.txt)
                else {
                    state.dial[fp] = nil
                    if let gone = state.peers.removeValue(forKey: fp) { out.append(.lost(gone.peer)) }
                    continue
                }
                var dial: [SocketAddress] = []
                for service in current {
                    for address in PeerConnection.socketAddresses(service.addresses, port: service.port)
                    where !dial.contains(address) && dial.count < 32 {
                        dial.append(address)
                    }
                }
                // The relayed address last: the dialer tries it after the direct ones, through this network's own
                // allocation (without a relay of our own it cannot be dialed).
                let relayed = current.lazy.compactMap { try? PeerAdvertisement(parsing: $0.txt).relayedAddress }.first
                if let relayed, let routes = network.relayRoutes {
                    if dial.count == 32 { dial.removeLast() }
                    if !dial.contains(relayed) { dial.append(relayed) }
                    routes.learn(relayed)
                }
                state.dial[fp] = dial
                var addresses: [DiscoveredAddress] = []
                var interfaces: [String] = []
                for service in current where service.port == primary.port {
                    for address in service.addresses where !addresses.contains(address) { addresses.append(address) }
                    for name in service.interfaces where !interfaces.contains(name) { interfaces.append(name) }
                }
                let discovered = DiscoveredPeer(
                    peer: Peer(identity: .advertised(fp), displayName: advertisement.displayName),
                    discoveryInfo: advertisement.discoveryInfo, addresses: addresses.sorted(),
                    interfaces: interfaces.sorted(),
                    port: primary.port, relayedAddress: relayed)
                let previous = state.peers.updateValue(discovered, forKey: fp)
                if previous == nil {
                    out.append(.found(discovered))
                } else if previous != discovered || previous?.peer.displayName != discovered.peer.displayName {
                    out.append(.updated(discovered))
                }
            }
            return out
        }
    }
}

/// How many of a browser's sources still feed it.
private final class SourceCount: Sendable {
    private let left: Lock<Int>

    init(_ count: Int) { left = Lock(count) }

    /// One source ended; returns whether it was the last.
    func ended() -> Bool {
        left.withLock { left in
            left -= 1
            return left == 0
        }
    }
}
