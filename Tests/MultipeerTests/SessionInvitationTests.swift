import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// Invitations between in-process sessions over loopback: every outcome, seen the same on both sides.
@Suite("Session invitations", .busy)
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
        #expect(results[bob.peer]?.isEnqueued == true)
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

extension SessionInvitationTests {
    @Test func declineCarriesTheReasonToBothSides() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.answerInvitations { $0.decline(reason: "busy right now") }
        let outcome = await alice.invite(bob)
        #expect(outcome == .declined(reason: "busy right now"))
        #expect(await alice.recorder.wait { $0 == "Bob notConnected: declined: busy right now" } != nil)
        #expect(await alice.session.connectedPeers.isEmpty)
        #expect(await bob.session.connectedPeers.isEmpty)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func anUnansweredInvitationExpiresOnBothSidesOnTheManualClock() async throws {
        let clock = ManualClock()
        let alice = try await SessionNode("Alice", clock: clock)
        let bob = try await SessionNode("Bob", clock: clock)
        let outcome = Task { await alice.invite(bob, timeout: .seconds(5)) }
        var invitations = bob.advertiser.invitations.makeAsyncIterator()
        let invitation = try #require(await invitations.next())
        #expect(invitation.isOpen)
        #expect(invitation.timeout <= .seconds(5) && invitation.timeout > .seconds(4))
        #expect(invitation.peer == alice.peer && invitation.peer.isAuthenticated)
        #expect(invitation.verificationCode != nil)
        clock.advance(by: .seconds(6))
        #expect(await outcome.value == .timedOut)
        #expect(await eventually { !invitation.isOpen })
        // Both deadlines pass at once: the invitee's expiry or the inviter's withdrawal ends it, whichever runs
        // first; answering afterwards says which.
        do {
            try await invitation.accept(into: bob.session)
            Issue.record("an expired invitation was accepted")
        } catch {
            #expect(error.code == .invitationClosed)
            #expect(error.reason.contains("expired") || error.reason.contains("withdrawn"), "\(error.reason)")
        }
        #expect(await alice.recorder.wait { $0 == "Bob notConnected: timed out" } != nil)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aZeroTimeoutMeansThirtySeconds() async throws {
        let clock = ManualClock()
        let alice = try await SessionNode("Alice", clock: clock)
        let bob = try await SessionNode("Bob", clock: clock)
        let outcome = Task { await alice.invite(bob, timeout: .zero) }
        var invitations = bob.advertiser.invitations.makeAsyncIterator()
        let invitation = try #require(await invitations.next())
        #expect(invitation.timeout > .seconds(29) && invitation.timeout <= .seconds(30))
        clock.advance(by: .seconds(20))
        try await Task.sleep(for: .milliseconds(50))
        #expect(invitation.isOpen)
        clock.advance(by: .seconds(11))
        #expect(await outcome.value == .timedOut)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aPeerWithNothingListeningIsUnreachableWithEveryAttempt() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        await bob.shutdown()
        // A port bound and not listening, held for the test: Bob's own port, once closed, is free for a test
        // running beside this one to listen on (a run reached another test's peer there and was refused for its
        // identity instead).
        let holder = try RawListener.closedPort(.v4(.loopback))
        defer { holder.close() }
        let outcome = await alice.session.invite(
            bob.peer, addresses: [holder.address], serviceType: "_mp-test._tcp", context: [], timeout: .seconds(30))
        guard case .unreachable(let error) = outcome else {
            Issue.record("expected unreachable, got \(outcome)")
            return
        }
        #expect(error.attempts.count == 1)
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob notConnected: unreachable") } != nil)
        await alice.shutdown()
    }

    @Test func anIdentityMismatchIsRefusedForSecurity() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        let impostor = try PeerIdentity.generate(displayName: "Bob")
        let outcome = await alice.session.invite(
            Peer(identity: .advertised(impostor.fingerprint), displayName: "Bob"), addresses: [bob.address],
            serviceType: "_mp-test._tcp", context: [], timeout: .seconds(30))
        guard case .refused(let reason) = outcome else {
            Issue.record("expected refused, got \(outcome)")
            return
        }
        #expect(reason.contains("identity"), "\(reason)")
        #expect(await bob.session.connectedPeers.isEmpty)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aWrongGroupSecretIsRefusedForSecurity() async throws {
        let first = try GroupSecret([UInt8](repeating: 1, count: 32))
        let second = try GroupSecret([UInt8](repeating: 2, count: 32))
        let alice = try await SessionNode("Alice", configuration: SessionConfiguration(groupSecret: first))
        let bob = try await SessionNode("Bob", configuration: SessionConfiguration(groupSecret: second))
        bob.acceptAll()
        let outcome = await alice.invite(bob)
        guard case .refused(let reason) = outcome else {
            Issue.record("expected refused, got \(outcome)")
            return
        }
        #expect(reason.contains("group"), "\(reason)")
        let carol = try await SessionNode("Carol", configuration: SessionConfiguration(groupSecret: first))
        carol.acceptAll()
        #expect(await alice.invite(carol) == .accepted)
        await alice.shutdown()
        await bob.shutdown()
        await carol.shutdown()
    }

    @Test func theVerificationHookRefusesWithItsReasonOnBothSides() async throws {
        var configuration = SessionConfiguration()
        configuration.verifyPeer = { request in
            request.peer.displayName == "Mallory" ? .refuse(reason: "not on my list") : .accept
        }
        let bob = try await SessionNode("Bob", configuration: configuration)
        let mallory = try await SessionNode("Mallory")
        let alice = try await SessionNode("Alice")
        bob.acceptAll()
        let outcome = await mallory.invite(bob)
        #expect(outcome == .refused(reason: "refused by the invitee's verification hook: not on my list"))
        #expect(await alice.invite(bob) == .accepted)
        #expect(await bob.session.connectedPeers.map(\.displayName) == ["Alice"])
        for node in [alice, bob, mallory] { await node.shutdown() }
    }

    /// Apple's table: `.required` and `.optional` use TLS; `.none` with `.optional` or `.none` is plaintext,
    /// with identities as claims; `.required` and `.none` refuse each other.
    @Test(arguments: [
        (EncryptionPreference.required, EncryptionPreference.required, "tls"),
        (.required, .optional, "tls"), (.optional, .required, "tls"), (.optional, .optional, "tls"),
        (.optional, .none, "plaintext"), (.none, .optional, "plaintext"), (.none, .none, "plaintext"),
        (.required, .none, "refused"), (.none, .required, "refused"),
    ])
    func encryptionFollowsApplesTable(
        inviter: EncryptionPreference, invitee: EncryptionPreference, expected: String
    ) async throws {
        let alice = try await SessionNode("Alice", configuration: SessionConfiguration(encryption: inviter))
        let bob = try await SessionNode("Bob", configuration: SessionConfiguration(encryption: invitee))
        bob.acceptAll()
        let outcome = await alice.invite(bob)
        switch expected {
        case "refused":
            guard case .refused(let reason) = outcome else {
                Issue.record("\(inviter)→\(invitee): expected refused, got \(outcome)")
                break
            }
            #expect(reason.contains("ncrypt") || reason.contains("plaintext"), "\(reason)")
        default:
            #expect(outcome == .accepted, "\(inviter)→\(invitee)")
            let seen = await bob.session.connectedPeers.first
            #expect(seen?.isAuthenticated == (expected == "tls"), "\(inviter)→\(invitee)")
            if expected == "plaintext" {
                #expect(seen?.identity == .claimed(alice.identity.fingerprint))
                #expect(seen?.fingerprint == nil)
            }
        }
        await alice.shutdown()
        await bob.shutdown()
    }

    /// An advertiser that negotiates whatever each inviter wants (`.optional`, as the MultipeerConnectivity
    /// facade's does, not knowing the session yet): accepting into a `.none` session still refuses an inviter whose
    /// session requires encryption (the invitation says so), and admits an `.optional` one.
    @Test func aNoneSessionRefusesAnInviterThatRequiresEncryptionWhateverTheLinkIs() async throws {
        let bob = try await SessionNode(
            "Bob", configuration: SessionConfiguration(encryption: .none), advertiserEncryption: .optional)
        bob.acceptAll()
        let strict = try await SessionNode("Alice", configuration: SessionConfiguration(encryption: .required))
        guard case .refused(let reason) = await strict.invite(bob) else {
            Issue.record("a .required inviter joined a .none session")
            return
        }
        #expect(reason.contains("requires encryption") && reason.contains(".none"), "\(reason)")
        let relaxed = try await SessionNode("Carol", configuration: SessionConfiguration(encryption: .optional))
        #expect(await relaxed.invite(bob) == .accepted)
        #expect(await bob.session.connectedPeers.map(\.displayName) == ["Carol"])
        for node in [bob, strict, relaxed] { await node.shutdown() }
    }

    @Test func oversizedContextIsRefusedBeforeAnythingIsSent() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        let outcome = await alice.invite(
            bob, context: [UInt8](repeating: 7, count: Invitation.maximumContextLength + 1))
        guard case .refused(let reason) = outcome else {
            Issue.record("expected refused, got \(outcome)")
            return
        }
        #expect(reason.contains("8192"), "\(reason)")
        #expect(bob.advertiser.statistics.delivered == 0)
        let fits = await alice.invite(bob, context: [UInt8](repeating: 7, count: Invitation.maximumContextLength))
        #expect(fits == .accepted)
        await alice.shutdown()
        await bob.shutdown()
    }
}

extension SessionInvitationTests {
    /// The inviter gives up while the invitee's verification hook is still thinking: accepting afterwards must
    /// not leave a member that is not there.
    @Test func anInviterThatGaveUpDuringTheHookIsNotAGhostMember() async throws {
        let hookRan = DropCounter()
        let inviterGaveUp = DropCounter()
        var configuration = SessionConfiguration()
        configuration.verifyPeer = { _ in
            hookRan.add()
            // Answer only once the inviter has given up (however long the machine takes to get there; the bound is
            // past the inviter's stretched timeout, or the hook would accept before the inviter gave up).
            let deadline = ContinuousClock.now + TestTime.scaled(.seconds(20))
            while inviterGaveUp.value == 0, ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(10))
            }
            return .accept
        }
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob", configuration: configuration)
        let accepted = Task {
            var invitations = bob.advertiser.invitations.makeAsyncIterator()
            let invitation = try #require(await invitations.next())
            try await invitation.accept(into: bob.session)
        }
        // 8 s: the invitation must reach Bob's hook first, and a loaded CI machine took more than 3 s to get there.
        #expect(await alice.invite(bob, timeout: .seconds(8)) == .timedOut)
        inviterGaveUp.add()
        // The advertiser stops, so a test where the invitation never arrived ends instead of hanging.
        await bob.advertiser.stop()
        // Accepting races the inviter's withdrawal on the wire: it throws when Bob has already seen the link end,
        // and otherwise Bob sees Alice connect and then go. Either way Alice is never a member that is not there.
        let acceptance = await accepted.result
        #expect(hookRan.value == 1, "the invitee's hook was running when the inviter gave up")
        #expect(await waitUntil { await bob.session.connectedPeers.isEmpty })
        let states = bob.recorder.states
        if (try? acceptance.get()) != nil {
            #expect(await bob.recorder.wait { $0.hasPrefix("Alice notConnected") } != nil, "\(states)")
        } else {
            #expect(!states.contains { $0.hasPrefix("Alice connected") }, "\(states)")
        }
        await alice.shutdown()
        await bob.shutdown()
    }

    /// The inviter leaves its session while the invitee is accepting (Ctrl-C right after inviting): the invitee
    /// sees it leave at once, never a member it waits for to reconnect.
    @Test func anInviterThatLeavesWhileBeingAcceptedIsSeenLeaving() async throws {
        for delay in [0, 50, 200] {
            let hookRan = DropCounter()
            var configuration = SessionConfiguration()
            configuration.verifyPeer = { _ in
                hookRan.add()
                try? await Task.sleep(for: .milliseconds(delay))
                return .accept
            }
            let alice = try await SessionNode("Alice")
            let bob = try await SessionNode("Bob", configuration: configuration)
            bob.acceptAll()
            let invitation = Task { await alice.invite(bob, timeout: .seconds(10)) }
            #expect(await waitUntil(.seconds(10)) { hookRan.value > 0 })
            await alice.session.disconnect()
            _ = await invitation.value
            let ended = await bob.recorder.wait(for: .seconds(5)) {
                $0.hasPrefix("Alice notConnected") || $0.hasPrefix("Alice reconnecting")
            }
            let states = bob.recorder.states
            if states.contains(where: { $0.hasPrefix("Alice connected") }) {
                #expect(ended == "Alice notConnected: left", "delay \(delay): \(states)")
            } else {
                #expect(ended?.hasPrefix("Alice notConnected") == true, "delay \(delay): \(states)")
            }
            #expect(await waitUntil { await bob.session.connectedPeers.isEmpty })
            await alice.shutdown()
            await bob.shutdown()
        }
    }
}
