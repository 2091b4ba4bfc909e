import MultipeerIO
import Testing

@testable import Multipeer

/// Invitations between in-process sessions over loopback: every outcome, seen the same on both sides.
@Suite("Session invitations")
struct SessionInvitationTests {
    @Test func inviteThenAcceptConnectsBothSidesAndMessagesFlow() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        let outcome = await alice.invite(bob, context: Array("hello".utf8))
        #expect(outcome == .accepted)
        #expect(await alice.recorder.wait { $0 == "Bob connected: accepted the invitation" } != nil)
        #expect(await bob.recorder.wait { $0 == "Alice connected: accepted an invitation" } != nil)
        let bobPeers = await bob.session.connectedPeers
        #expect(bobPeers.map(\.displayName) == ["Alice"])
        #expect(bobPeers.first?.isAuthenticated == true)
        #expect(bobPeers.first?.fingerprint == alice.identity.fingerprint)

        let results = await alice.session.send(Array("hi bob".utf8), to: [bob.peer])
        #expect(results[bob.peer] == .enqueued)
        var iterator = bob.session.messages.makeAsyncIterator()
        let received = await iterator.next()
        #expect(received.map { String(decoding: $0.data, as: UTF8.self) } == "hi bob")
        #expect(received?.peer == alice.peer)

        // An acknowledged send returns only once Alice's application took the message.
        let reader = Task {
            try await Task.sleep(for: .milliseconds(200))
            var messages = alice.session.messages.makeAsyncIterator()
            return (ContinuousClock.now, await messages.next())
        }
        try await bob.session.sendAcknowledged(Array("ack me".utf8), to: alice.peer)
        let acknowledged = ContinuousClock.now
        let (read, message) = try await reader.value
        #expect(message.map { String(decoding: $0.data, as: UTF8.self) } == "ack me")
        #expect(read <= acknowledged)
        await alice.shutdown()
        #expect(await bob.recorder.wait { $0 == "Alice notConnected: left" } != nil)
        await bob.shutdown()
    }
}
