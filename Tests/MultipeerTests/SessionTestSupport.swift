import Logging
import MultipeerIO
import NetLab
import Testing

@testable import Multipeer

/// One peer of an in-process session test: its own network on loopback (own event loop and listener), an
/// identity, a session, and an advertiser that receives invitations without publishing (tests dial the
/// listener's port directly, so no multicast is needed).
final class SessionNode: Sendable {
    static let serviceType = "mp-test"

    let identity: PeerIdentity
    let network: PeerNetwork
    let session: Session
    let advertiser: PeerAdvertiser
    let recorder: EventRecorder
    /// Whether the node's loop runs on a manual clock: its timeouts are then the test's subject, never stretched.
    let manualClock: Bool

    init(
        _ name: String, configuration: SessionConfiguration = SessionConfiguration(),
        advertiserEncryption: EncryptionPreference? = nil, advertiserSecret: GroupSecret? = nil,
        limits: PeerAdvertiser.Limits = PeerAdvertiser.Limits(), clock: (any IOClock)? = nil, logger: Logger? = nil,
        relay: RelayConfiguration? = nil
    ) async throws {
        identity = try PeerIdentity.generate(displayName: name)
        manualClock = clock != nil
        let loop = try clock.map { try EventLoop(name: "test-\(name)", clock: $0) }
        var networkConfiguration = PeerNetwork.Configuration.loopback
        if let logger { networkConfiguration.logger = logger }
        networkConfiguration.relay = relay
        if clock != nil {
            // A manual clock jumps: keep keepalives from calling a connection silent across a jump.
            networkConfiguration.tuneConnections = {
                $0.silenceTimeout = .seconds(3600)
                $0.keepaliveInterval = .seconds(1200)
            }
        }
        network = try PeerNetwork(configuration: networkConfiguration, loop: loop)
        var configuration = configuration
        if clock == nil, configuration.reconnectGrace == SessionConfiguration().reconnectGrace {
            // The default grace is not what a test checks (those set their own): a sanitized build is several times
            // slower to reconnect, and a member giving up during it would start a conversation anew.
            configuration.reconnectGrace = TestTime.scaled(configuration.reconnectGrace)
        }
        session = try await Session(identity: identity, configuration: configuration, network: network)
        advertiser = try await PeerAdvertiser(
            serviceType: Self.serviceType, identity: identity,
            encryption: advertiserEncryption ?? configuration.encryption,
            groupSecret: advertiserSecret ?? configuration.groupSecret, limits: limits, network: network,
            publish: false)
        recorder = EventRecorder(session.events)
    }

    var peer: Peer { Peer(identity: .advertised(identity.fingerprint), displayName: identity.displayName) }
    var address: SocketAddress { SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: advertiser.port) }

    /// Invites `other` into this node's session, dialing its advertiser's port. The default timeout is generous:
    /// the tests that use it are about the outcome, and a loaded machine may take seconds to answer. Stretched by
    /// the sanitizer builds' factor, like every deadline the tests set (not on a manual clock, which only moves
    /// when the test says).
    func invite(_ other: SessionNode, context: [UInt8] = [], timeout: Duration = .seconds(30)) async
        -> InvitationOutcome
    {
        await session.invite(
            other.peer, addresses: [other.address], serviceType: "_\(Self.serviceType)._tcp", context: context,
            timeout: manualClock ? timeout : TestTime.scaled(timeout))
    }

    /// Answers every invitation with `answer` until the advertiser stops.
    func answerInvitations(_ answer: @escaping @Sendable (Invitation) async -> Void) {
        let invitations = advertiser.invitations
        Task { for await invitation in invitations { await answer(invitation) } }
    }

    func acceptAll() {
        let session = session
        answerInvitations { try? await $0.accept(into: session) }
    }

    /// Makes `other` (a member made with `reconnectGrace = .zero`) go away without a word: this side's link to
    /// it is cut, and only once both saw the link end does it shut down (else its goodbye may still arrive). This
    /// side keeps it `reconnecting`, a member nothing confirms messages for. Returns whether both saw the cut.
    func silence(_ other: SessionNode) async -> Bool {
        await session.memberLink(other.identity.fingerprint)?.connection.abort()
        let here = await recorder.wait { $0.hasPrefix("\(other.identity.displayName) reconnecting") } != nil
        let there = await other.recorder.wait { $0.hasPrefix("\(self.identity.displayName) notConnected") } != nil
        await other.shutdown()
        return here && there
    }

    func shutdown() async {
        await session.disconnect()
        await advertiser.stop()
        await network.shutdown()
    }
}

/// Collects a session's events so tests can wait for one without owning the stream.
final class EventRecorder: Sendable {
    private let state = Lock<[SessionEvent]>([])

    init(_ events: AsyncStream<SessionEvent>) {
        Task { [self] in for await event in events { record(event) } }
    }

    private func record(_ event: SessionEvent) { state.withLock { $0.append(event) } }

    var all: [SessionEvent] { state.withLock { $0 } }

    /// The `undelivered` reports so far.
    var undelivered: [SessionEvent] {
        all.filter {
            if case .undelivered = $0 { true } else { false }
        }
    }

    /// Peer state changes as `NAME state: reason`.
    var states: [String] {
        all.compactMap {
            guard case .peerChanged(let peer, let state, let reason) = $0 else { return nil }
            return "\(peer.displayName) \(state): \(reason)"
        }
    }

    /// Waits until a state line matching `predicate` is recorded; returns it, or nil after `timeout`.
    @discardableResult
    func wait(for timeout: Duration = .seconds(10), _ predicate: (String) -> Bool) async -> String? {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while ContinuousClock.now < deadline {
            if let line = states.first(where: predicate) { return line }
            try? await Task.sleep(for: .milliseconds(5))
        }
        // Once more after the deadline: a starved test process may wake only after it.
        return states.first(where: predicate)
    }
}

/// Polls an async `condition` until it holds or `timeout` passes.
func waitUntil(_ timeout: Duration = .seconds(10), _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + TestTime.scaled(timeout)
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return await condition()
}

/// A peer that speaks the session's control messages by hand over a real connection, to play a member that
/// does not follow the rules (or a restarted one): everything it receives is recorded in order.
final class HandDrivenPeer: Sendable {
    let identity: PeerIdentity
    let connection: PeerConnection
    private let received = Lock<[SessionWire.Message]>([])

    /// Connects to `node`'s listener (TLS proving `identity` unless `encryption` is `.none`).
    init(_ identity: PeerIdentity, to node: SessionNode, encryption: EncryptionPreference = .required) async throws {
        self.identity = identity
        connection = try await PeerConnection.connect(
            to: node.address, expecting: encryption == .none ? nil : node.identity.fingerprint,
            configuration: ConnectionConfiguration(identity: identity, encryption: encryption),
            loop: node.network.loop)
        let connection = connection
        Task { [self] in
            for await raw in connection.sessionMessages {
                guard let message = try? SessionWire.decode(raw) else { continue }
                received.withLock { $0.append(message) }
            }
        }
    }

    var all: [SessionWire.Message] { received.withLock { $0 } }

    func send(_ message: SessionWire.Message) throws { try connection.sendSessionMessage(SessionWire.encode(message)) }

    /// Waits for a received message matching `predicate`.
    @discardableResult
    func wait(for timeout: Duration = .seconds(10), _ predicate: @escaping (SessionWire.Message) -> Bool) async
        -> SessionWire.Message?
    {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while ContinuousClock.now < deadline {
            if let found = all.first(where: predicate) { return found }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return all.first(where: predicate)
    }

    /// Invites the node (which must accept) and, once accepted, says what a member says first: where it listens
    /// (nowhere: port 0) with a session of its own, and that it starts a fresh conversation.
    func inviteAndJoin(epoch: UInt64 = .random(in: 1...UInt64.max)) async throws -> Bool {
        let id = SecureRandom.bytes(SessionWire.idLength)
        try send(
            .invite(
                id: id, timeoutMilliseconds: 10_000, serviceType: "_\(SessionNode.serviceType)._tcp", context: [],
                encryption: .required))
        guard
            case .inviteAnswer(_, .accepted, _, _)? = await wait(
                for: .seconds(10), { if case .inviteAnswer = $0 { true } else { false } })
        else { return false }
        try send(
            .sessions(
                listenPort: 0, current: SecureRandom.bytes(SessionWire.idLength),
                secrets: [SecureRandom.bytes(SessionWire.idLength): SecureRandom.bytes(SessionWire.secretLength)]))
        try send(.resume(epoch: epoch, peerEpoch: 0, received: 0))
        return true
    }
}
