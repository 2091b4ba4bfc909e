import Foundation
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// Connecting without discovery: connection data carried out of band, then both sides connect (Apple's
/// `nearbyConnectionData` and `connectPeer`).
@Suite("Sessions connected by connection data", .busy)
struct SessionDirectTests {
    @Test func bothSidesConnectWithTheOthersDataAndExchangeMessages() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        let forBob = try await alice.session.connectionData(for: bob.peer)
        let forAlice = try await bob.session.connectionData(for: alice.peer)
        let decoded = try ConnectionData(decoding: forBob)
        #expect(decoded.fingerprint == alice.identity.fingerprint && decoded.displayName == "Alice")
        #expect(
            decoded.addresses.allSatisfy { $0.address == .v4(IPv4Address(127, 0, 0, 1)) } && !decoded.addresses.isEmpty)
        async let a = alice.session.connect(bob.peer, connectionData: forAlice, timeout: TestTime.scaled(.seconds(10)))
        async let b = bob.session.connect(alice.peer, connectionData: forBob, timeout: TestTime.scaled(.seconds(10)))
        #expect(await a == .accepted)
        #expect(await b == .accepted)
        #expect(await alice.session.connectedPeers.map(\.displayName) == ["Bob"])
        #expect(await bob.session.connectedPeers.first?.isAuthenticated == true)
        _ = await alice.session.send([1, 2, 3], to: [bob.peer])
        var messages = bob.session.messages.makeAsyncIterator()
        let received = await messages.next()
        #expect(received?.data == [1, 2, 3])
        // A slice of the message as the link received it: the session's header is sliced off, not copied off.
        #expect(received?.bytes.startIndex == ReliabilityStateMachine.Tag.headerLength)
        // A ticket is good once, and a peer's tickets are withdrawn once it is a member.
        #expect(await bob.session.holdsTicket(try ConnectionData(decoding: forAlice).ticket) == false)
        #expect(await alice.session.holdsTicket(try ConnectionData(decoding: forBob).ticket) == false)
        await bob.session.disconnect()
        #expect(await waitUntil { await alice.session.connectedPeers.isEmpty })
        let again = await Self.presentTicket(forAlice, from: alice, to: bob)
        #expect(again.contains("no session here issued this connection ticket"), "\(again)")
        for node in [alice, bob] { await node.shutdown() }
    }

    @Test func aTicketWorksOnlyForThePeerItWasIssuedTo() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        let mallory = try await SessionNode("Mallory")
        // Bob issued his data for Alice; Mallory got hold of it.
        let forAlice = try await bob.session.connectionData(for: alice.peer)
        let refusal = await Self.presentTicket(forAlice, from: mallory, to: bob)
        #expect(refusal.contains("issued to another peer"), "\(refusal)")
        #expect(await bob.session.connectedPeers.isEmpty)
        // Data that names someone else than the peer it is used for, and data that does not decode.
        let forMallory = try await mallory.session.connectionData(for: alice.peer)
        guard case .refused(let reason) = await alice.session.connect(bob.peer, connectionData: forMallory) else {
            Issue.record("data of another peer accepted")
            return
        }
        #expect(reason.contains("Mallory"), "\(reason)")
        for garbage in [[], [2] + [UInt8](repeating: 0, count: 60), [UInt8](repeating: 1, count: 2_000)] as [[UInt8]] {
            guard case .refused(let why) = await alice.session.connect(bob.peer, connectionData: garbage) else {
                Issue.record("garbage accepted")
                continue
            }
            #expect(why.contains("connection data"), "\(why)")
        }
        for node in [alice, bob, mallory] { await node.shutdown() }
    }

    @Test func theWaitingSideTimesOutOrIsCancelledWithTheReason() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        let lower = alice.identity.fingerprint.bytes.lexicographicallyPrecedes(bob.identity.fingerprint.bytes)
        let (waiter, other) = lower ? (bob, alice) : (alice, bob)
        let data = try await other.session.connectionData(for: waiter.peer)
        // The higher fingerprint waits for the other to dial; here it never does.
        #expect(
            await waiter.session.connect(other.peer, connectionData: data, timeout: .milliseconds(300)) == .timedOut)
        #expect(await waiter.session.invitationOutcome(for: other.peer) == .timedOut)
        let waiting = Task { await waiter.session.connect(other.peer, connectionData: data, timeout: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(100))
        await waiter.session.cancelConnect(other.peer)
        #expect(await waiting.value == .refused(reason: "cancelled by this side"))
        for node in [alice, bob] { await node.shutdown() }
    }

    @Test func connectionDataIsBounded() throws {
        let fingerprint = try PeerIdentity.generate(displayName: "x").fingerprint
        let address = SocketAddress(.v4(IPv4Address(10, 0, 0, 1)), port: 9)
        let data = ConnectionData(
            fingerprint: fingerprint, displayName: "x", ticket: [UInt8](repeating: 1, count: 16),
            addresses: Array(repeating: address, count: 20))
        // At most 8 addresses are written, and a forged count above 8 is refused.
        #expect(try ConnectionData(decoding: data.encoded).addresses.count == 8)
        var forged = data.encoded
        let countOffset = 1 + 32 + 2 + 1 + 16
        forged[countOffset] = 9
        #expect(throws: SessionWireError.self) { try ConnectionData(decoding: forged + [4, 1, 2, 3, 4, 0, 9]) }
        // A display name with a control character (a newline) is refused.
        let control = [UInt8](data.encoded[0..<33]) + [0, 1, 0x0A] + [UInt8](data.encoded[36...])
        #expect(throws: SessionWireError.self) { try ConnectionData(decoding: control) }
    }

    /// Dials `to`'s session listener as `from` and presents `data`'s ticket; returns the refusal reason, or "".
    static func presentTicket(_ data: [UInt8], from: SessionNode, to: SessionNode) async -> String {
        guard let decoded = try? ConnectionData(decoding: data) else { return "undecodable" }
        let outcome = await from.session.invite(
            to.peer, addresses: decoded.addresses, serviceType: SessionWire.directServiceType, context: decoded.ticket,
            timeout: TestTime.scaled(.seconds(10)))
        if case .refused(let reason) = outcome { return reason }
        return "\(outcome)"
    }
}
