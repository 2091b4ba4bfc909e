import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// Peers that do not follow the rules: forged introductions, invitation floods, oversized fields.
@Suite("Session hostile peers", .busy)
struct SessionHostileTests {
    /// A raw connection to a node's listener, for sending control messages by hand.
    static func rawConnection(to node: SessionNode, as name: String = "Mallory") async throws -> PeerConnection {
        let identity = try PeerIdentity.generate(displayName: name)
        return try await PeerConnection.connect(
            to: node.address, expecting: node.identity.fingerprint,
            configuration: ConnectionConfiguration(identity: identity), loop: node.network.loop)
    }

    static func nextControl(_ connection: PeerConnection) async throws -> SessionWire.Message? {
        var iterator = connection.sessionMessages.makeAsyncIterator()
        guard let raw = await iterator.next() else { return nil }
        return try SessionWire.decode(raw)
    }

    /// The answer a reader task got, or nil when none came within a moment (the connection is then aborted).
    static func answer(
        _ task: Task<SessionWire.Message?, any Error>, _ connection: PeerConnection
    ) async throws -> SessionWire.Message? {
        let timer = Task {
            try await Task.sleep(for: .milliseconds(300))
            connection.abort()
        }
        defer { timer.cancel() }
        return try await task.value
    }

    @Test func aJoinForgedByANonMemberIsRefusedWithAReason() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        // Mallory names no session Bob knows, then a session id it guessed with a made-up proof.
        let guess = try await Self.rawConnection(to: bob)
        try guess.sendSessionMessage(
            SessionWire.encode(
                .join(
                    linkID: [UInt8](repeating: 1, count: 16), sessionID: [UInt8](repeating: 2, count: 16),
                    proof: [UInt8](repeating: 3, count: 32))))
        let unknown = try await Self.nextControl(guess)
        #expect(unknown == .joinAnswer(accepted: false, reason: "no session here knows the session you name"))
        // A member's session id leaks (it travels in every link's sessions message): the proof still fails.
        let sessionID = await bob.session.currentSessionID
        let forged = try await Self.rawConnection(to: bob)
        try forged.sendSessionMessage(
            SessionWire.encode(
                .join(
                    linkID: [UInt8](repeating: 1, count: 16), sessionID: sessionID,
                    proof: SessionWire.joinProof(
                        secret: [UInt8](repeating: 9, count: 32), binding: forged.sessionBinding,
                        linkID: [UInt8](repeating: 1, count: 16)))))
        let refused = try await Self.nextControl(forged)
        #expect(
            refused
                == .joinAnswer(
                    accepted: false,
                    reason: "the membership proof is wrong: only members of this session can join it this way"))
        #expect(await bob.session.connectedPeers.map(\.displayName) == ["Alice"])
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aProofMadeForAnotherConnectionIsRefused() async throws {
        // A member's proof is bound to its connection: replayed on another, it is worthless.
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let (sessionID, secret) = await bob.session.currentSecret
        let first = try await Self.rawConnection(to: bob)
        let second = try await Self.rawConnection(to: bob)
        let linkID = [UInt8](repeating: 4, count: 16)
        try second.sendSessionMessage(
            SessionWire.encode(
                .join(
                    linkID: linkID, sessionID: sessionID,
                    proof: SessionWire.joinProof(secret: secret, binding: first.sessionBinding, linkID: linkID))))
        guard case .joinAnswer(false, _) = try await Self.nextControl(second) else {
            Issue.record("a replayed proof was accepted")
            return
        }
        // The secret bound to the right connection is still not enough: no member introduced this peer (a
        // former member or an eavesdropper may know a secret), so it is refused after the introduction wait.
        try first.sendSessionMessage(
            SessionWire.encode(
                .join(
                    linkID: linkID, sessionID: sessionID,
                    proof: SessionWire.joinProof(secret: secret, binding: first.sessionBinding, linkID: linkID))))
        #expect(
            try await Self.nextControl(first)
                == .joinAnswer(accepted: false, reason: "no member of this session introduced you"))
        #expect(await bob.session.connectedPeers.map(\.displayName) == ["Alice"])
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func anInvitationFloodFromOnePeerIsCappedAndHonestInvitationsAreStillAnswered() async throws {
        let bob = try await SessionNode("Bob")
        let mallory = try PeerIdentity.generate(displayName: "Mallory")
        var refusals: [String] = []
        var held: [PeerConnection] = []
        for index in 0..<10 {
            let connection = try await PeerConnection.connect(
                to: bob.address, expecting: bob.identity.fingerprint,
                configuration: ConnectionConfiguration(identity: mallory), loop: bob.network.loop)
            held.append(connection)
            try connection.sendSessionMessage(
                SessionWire.encode(
                    .invite(
                        id: [UInt8](repeating: UInt8(index), count: 16), timeoutMilliseconds: 60_000,
                        serviceType: "_mp-test._tcp", context: [], encryption: .required)))
        }
        // The connections are routed concurrently, so which four get through is not fixed: read every answer.
        let answers = held.map { connection in Task { try await Self.nextControl(connection) } }
        #expect(await waitUntil { bob.advertiser.statistics.refusedPerPeer == 6 })
        #expect(bob.advertiser.statistics.delivered == 4)
        for (connection, answer) in zip(held, answers) {
            if case .inviteAnswer(_, .refused, let reason, _)? = try await Self.answer(answer, connection) {
                refusals.append(reason)
            }
        }
        #expect(refusals.count == 6)
        #expect(refusals.allSatisfy { $0.contains("too many invitations from you") }, "\(refusals)")
        #expect(bob.advertiser.statistics.refusedPerPeer == 6)
        // An honest inviter is answered at once.
        let alice = try await SessionNode("Alice")
        let bobSession = bob.session
        for connection in held { connection.abort() }
        let answered = Task {
            var invitations = bob.advertiser.invitations.makeAsyncIterator()
            while let invitation = await invitations.next() {
                if invitation.peer.displayName == "Alice" { try await invitation.accept(into: bobSession) }
            }
        }
        let started = ContinuousClock.now
        #expect(await alice.invite(bob) == .accepted)
        // Answered, not left until the 60 s deadlines.
        #expect(ContinuousClock.now - started < TestTime.scaled(.seconds(10)))
        answered.cancel()
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func anInvitationFloodFromManyPeersIsCappedInTotalAndRefusedAtOnce() async throws {
        var limits = PeerAdvertiser.Limits()
        limits.total = 8
        let bob = try await SessionNode("Bob", limits: limits)
        var held: [PeerConnection] = []
        for index in 0..<12 {
            let connection = try await Self.rawConnection(to: bob, as: "Sybil\(index)")
            held.append(connection)
            try connection.sendSessionMessage(
                SessionWire.encode(
                    .invite(
                        id: [UInt8](repeating: UInt8(index), count: 16), timeoutMilliseconds: 60_000,
                        serviceType: "_mp-test._tcp", context: [], encryption: .required)))
        }
        var refused = 0
        for connection in held.suffix(4) {
            if case .inviteAnswer(_, .refused, let reason, _) = try await Self.nextControl(connection),
                reason.contains("too many invitations are pending here")
            {
                refused += 1
            }
        }
        #expect(refused == 4)
        #expect(bob.advertiser.statistics.refusedTotal == 4)
        // Honest inviters are refused at once with the reason, not left waiting; once the flood's
        // invitations are gone, they get through.
        let alice = try await SessionNode("Alice")
        let started = ContinuousClock.now
        guard case .refused(let reason) = await alice.invite(bob) else {
            Issue.record("expected a refusal while the flood holds every slot")
            return
        }
        #expect(reason.contains("too many invitations are pending here"))
        // Answered, not left until the 60 s deadlines.
        #expect(ContinuousClock.now - started < TestTime.scaled(.seconds(10)))
        for connection in held { connection.abort() }
        #expect(await waitUntil { await alice.invite(bob, timeout: .seconds(1)) != .refused(reason: reason) })
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A member introduces peers that never join, at an address of its choice, over and over: each introducer
    /// holds a bounded share of the table, each introduction is dialed once, and they go when the member goes,
    /// so a later honest member still joins the mesh.
    @Test func introductionsAreBoundedPerIntroducerDialedOnceAndLeaveWithTheirIntroducer() async throws {
        var configuration = SessionConfiguration()
        configuration.maximumPeers = 8
        let alice = try await SessionNode("Alice", configuration: configuration)
        let bob = try await SessionNode("Bob")
        let carol = try await SessionNode("Carol")
        for node in [alice, bob, carol] { node.acceptAll() }
        #expect(await alice.invite(bob) == .accepted)
        // Where the ghosts "listen": a listener that counts the dials aimed at it (each fails the identity check).
        let sink = try await PeerListener(
            configuration: ConnectionConfiguration(identity: try PeerIdentity.generate(displayName: "Sink")),
            address: SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: 0), loop: alice.network.loop)
        let mallory = try await HandDrivenPeer(try PeerIdentity.generate(displayName: "Mallory"), to: alice)
        #expect(try await mallory.inviteAndJoin())
        #expect(await alice.recorder.wait { $0.hasPrefix("Mallory connected") } != nil)
        let sessionID = await alice.session.currentSessionID
        let ghosts = (0..<48).map { index in
            SessionWire.Member(
                fingerprint: PeerFingerprint(bytes: [0xFF, 0xFF] + SecureRandom.bytes(30))!,
                displayName: "Ghost\(index)", sessionID: sessionID, addresses: [sink.localAddress])
        }
        for _ in 0..<20 {
            try mallory.send(.members(ghosts))
            try await Task.sleep(for: .milliseconds(50))
        }
        try await Task.sleep(for: .seconds(1))
        // Alice dials at most her share of Mallory's ghosts once each, and Bob at most what Alice passed on (a
        // dial the sink answers "busy" is tried again: that is one dial).
        let dials = sink.statistics.accepted - sink.statistics.refusedBusy
        #expect(dials <= 2 * configuration.maximumPeers, "\(dials) dials at the address Mallory chose")
        try mallory.send(.leave(reason: "left"))
        #expect(await alice.recorder.wait { $0.hasPrefix("Mallory notConnected") } != nil)
        #expect(await bob.invite(carol) == .accepted)
        let meshed = await SessionMeshTests.fullyMeshed([alice, bob, carol], within: .seconds(15))
        let view = await alice.session.connectedPeers.map(\.displayName)
        #expect(meshed, "Alice: \(view), \(alice.recorder.states)")
        sink.close()
        for node in [alice, bob, carol] { await node.shutdown() }
    }

    /// Invitations the session does not keep (its hook refuses them) leave nothing behind in it.
    @Test func refusedInvitationsLeaveNoLinkBehind() async throws {
        var configuration = SessionConfiguration()
        configuration.verifyPeer = { _ in .refuse(reason: "no strangers") }
        let bob = try await SessionNode("Bob", configuration: configuration)
        bob.acceptAll()
        for index in 0..<10 {
            let mallory = try await HandDrivenPeer(try PeerIdentity.generate(displayName: "Mallory\(index)"), to: bob)
            #expect(try await mallory.inviteAndJoin() == false)
            _ = await mallory.connection.closed()
        }
        #expect(await waitUntil { await bob.session.linkCount == 0 })
        #expect(await bob.session.linkCount == 0)
        await bob.shutdown()
    }

    @Test func aHostileOversizedContextIsRefusedByTheDecoder() async throws {
        let bob = try await SessionNode("Bob")
        let connection = try await Self.rawConnection(to: bob)
        var body = [UInt8](repeating: 1, count: 16) + [0, 0, 0xEA, 0x60]
        body += [0, 13] + Array("_mp-test._tcp".utf8)
        body += [0x23, 0x29] + [UInt8](repeating: 0, count: 9001)
        try connection.sendSessionMessage(SessionMessage(kind: SessionWire.Kind.invite.rawValue, body: body))
        let end = await connection.closed()
        #expect(end.reason.contains("context of 9001 bytes, more than 8192"), "\(end.reason)")
        #expect(bob.advertiser.statistics.delivered == 0)
        await bob.shutdown()
    }
}
