import Foundation
import MultipeerIO
import TestIsolation
import Testing

@testable import Multipeer

/// Identity never weakens: a member that proved its key proves it again on every new link, whichever side dials
/// and whichever way the link comes (a redial, a join, an invitation), and nothing secret goes to a claim.
@Suite("Session identity across links", .busy)
struct SessionIdentityTests {
    /// What a hand-driven peer received, in order.
    final class Received: Sendable {
        private let messages = Lock<[SessionWire.Message]>([])
        func add(_ message: SessionWire.Message) { messages.withLock { $0.append(message) } }
        var all: [SessionWire.Message] { messages.withLock { $0 } }
        var sawSecrets: Bool {
            all.contains {
                if case .sessions = $0 { true } else { false }
            }
        }
    }

    /// Alice (`.optional`, TLS with Bob, so Bob is proven) and Bob are members; then Bob's link is cut and Bob
    /// goes away without a word (its grace is zero, so it does not redial), leaving Alice reconnecting him.
    static func aliceReconnectingAProvenBob(grace: Duration) async throws -> (SessionNode, PeerIdentity, UInt16) {
        var aliceConfiguration = SessionConfiguration(encryption: .optional)
        aliceConfiguration.reconnectGrace = grace
        var bobConfiguration = SessionConfiguration(encryption: .optional)
        bobConfiguration.reconnectGrace = .zero
        let alice = try await SessionNode("Alice", configuration: aliceConfiguration)
        let bob = try await SessionNode("Bob", configuration: bobConfiguration)
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let linked = try #require(await alice.session.memberLink(bob.identity.fingerprint))
        #expect(linked.peer.isAuthenticated)
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice connected") } != nil)
        let port = bob.advertiser.port
        linked.connection.abort()
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob reconnecting") } != nil)
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice notConnected") } != nil)
        await bob.shutdown()
        return (alice, bob.identity, port)
    }

    /// A plaintext listener at Bob's old address that claims Bob's fingerprint and says yes to every join.
    static func impostor(claiming identity: PeerIdentity, port: UInt16, loop: EventLoop, into received: Received)
        async throws -> PeerListener
    {
        var listener: PeerListener?
        // The port was Bob's a moment ago: binding may take a few tries while the old listener goes.
        for _ in 0..<100 {
            listener = try? await PeerListener(
                configuration: ConnectionConfiguration(identity: identity, encryption: .none),
                address: SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: port), loop: loop)
            if listener != nil { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        let made = try #require(listener)
        Task {
            for await connection in made.connections {
                Task {
                    for await raw in connection.sessionMessages {
                        guard let message = try? SessionWire.decode(raw) else { continue }
                        received.add(message)
                        if case .join = message {
                            try? connection.sendSessionMessage(
                                SessionWire.encode(.joinAnswer(accepted: true, reason: "")))
                        }
                    }
                }
            }
        }
        return made
    }

    @Test func aReconnectingProvenMemberIsRedialedOnlyWithItsProof() async throws {
        let (alice, bob, port) = try await Self.aliceReconnectingAProvenBob(grace: .seconds(3))
        let received = Received()
        let impostorLoop = try EventLoop(name: "impostor")
        let impostor = try await Self.impostor(claiming: bob, port: port, loop: impostorLoop, into: received)
        // Alice redials Bob's address every 250 ms for the grace: the plaintext claim there must never pass.
        let gone = await alice.recorder.wait(for: .seconds(10)) { $0.hasPrefix("Bob notConnected") }
        #expect(gone?.contains("not back within") == true, "\(alice.recorder.states)")
        #expect(
            !alice.recorder.states.contains { $0.hasPrefix("Bob connected: reconnected") }, "\(alice.recorder.states)")
        #expect(!received.sawSecrets, "the impostor got the session secrets: \(received.all)")
        impostor.close()
        await alice.shutdown()
        impostorLoop.shutdown()
    }

    @Test func aPlaintextInvitationClaimingAReconnectingProvenMemberIsRefused() async throws {
        let (alice, bob, _) = try await Self.aliceReconnectingAProvenBob(grace: .seconds(10))
        alice.acceptAll()
        // The impostor invites Alice over plaintext (her advertiser allows it, `.optional`) in Bob's name.
        let connection = try await PeerConnection.connect(
            to: alice.address, expecting: nil, configuration: ConnectionConfiguration(identity: bob, encryption: .none),
            loop: alice.network.loop)
        #expect(!connection.peer.isAuthenticated)
        let received = Received()
        let reader = Task {
            for await raw in connection.sessionMessages {
                if let message = try? SessionWire.decode(raw) { received.add(message) }
            }
        }
        try connection.sendSessionMessage(
            SessionWire.encode(
                .invite(
                    id: [UInt8](repeating: 7, count: 16), timeoutMilliseconds: 10_000, serviceType: "_mp-test._tcp",
                    context: [], encryption: .none)))
        _ = await connection.closed()
        await reader.value
        guard case .inviteAnswer(_, .refused, let reason, _)? = received.all.first else {
            Issue.record("the claim was not refused: \(received.all)")
            return
        }
        #expect(reason.contains("proven member cannot come back as a plaintext claim"), "\(reason)")
        #expect(!received.sawSecrets, "the impostor got the session secrets: \(received.all)")
        #expect(!alice.recorder.states.contains { $0.hasPrefix("Bob connected") && $0.contains("reconnect") })
        #expect(await alice.session.connectedPeers.isEmpty)
        await alice.shutdown()
    }
}
