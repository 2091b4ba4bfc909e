import MultipeerIO
import NetLab
import Synchronization
import TestIsolation
import Testing

@testable import Multipeer

/// Links that drop: the peer is `reconnecting`, both sides redial, and reliable messages sent before and during
/// the outage arrive exactly once and in order; past the grace period the peer is gone and what it never
/// confirmed is reported undelivered.
@Suite("Session resilience", .busy)
struct SessionResilienceTests {
    @Test func aCutLinkReconnectsAndEveryMessageArrivesOnceInOrder() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let count = 5_000
        let reader = Task {
            var sequence: [Int] = []
            var iterator = bob.session.messages.makeAsyncIterator()
            while sequence.count < count, let message = await iterator.next() {
                sequence.append(Int(String(decoding: message.data, as: UTF8.self))!)
            }
            return sequence
        }
        for index in 0..<count {
            let result = await alice.session.send(Array(String(index).utf8), to: [bob.peer])
            #expect(result[bob.peer]?.isEnqueued == true, "message \(index): \(String(describing: result[bob.peer]))")
            if index == count / 3 || index == 2 * count / 3 {
                // Cut the link under the burst, from either side.
                let node = index == count / 3 ? alice : bob
                let other = index == count / 3 ? bob : alice
                await node.session.memberLink(other.identity.fingerprint)?.connection.abort()
            }
        }
        // Bounded: a message lost for good would otherwise leave the reader waiting forever (a thread-sanitized run
        // once stopped here), and the account below says what each side saw.
        let watchdog = Task {
            try await Task.sleep(for: TestTime.scaled(.seconds(60)))
            reader.cancel()
        }
        let sequence = await reader.value
        watchdog.cancel()
        #expect(
            sequence == Array(0..<count),
            """
            \(sequence.count) received; first out of order: \(firstMismatch(sequence)); Alice saw \(alice.recorder.states), \
            Bob saw \(bob.recorder.states); Alice's undelivered: \(alice.recorder.undelivered)
            """)
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob reconnecting: connection lost") } != nil)
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob connected: reconnected after") } != nil)
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice connected: reconnected after") } != nil)
        #expect(!alice.recorder.states.contains { $0.contains("notConnected") }, "\(alice.recorder.states)")
        // Bob is a member again (eventually: a machine slow enough to let the link fall silent cuts it once more).
        #expect(await waitUntil { await alice.session.connectedPeers.map(\.displayName) == ["Bob"] })
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func anAcknowledgedSendSurvivesACutLink() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        await alice.session.memberLink(bob.identity.fingerprint)?.connection.abort()
        // Sent while reconnecting: kept, delivered after the reconnection, and its receipt comes back.
        let reader = Task {
            var iterator = bob.session.messages.makeAsyncIterator()
            return await iterator.next()
        }
        try await alice.session.sendAcknowledged(Array("are you there?".utf8), to: bob.peer)
        #expect(await reader.value.map { String(decoding: $0.data, as: UTF8.self) } == "are you there?")
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aPeerNotBackWithinTheGraceIsGoneAndItsMessagesAreReportedUndelivered() async throws {
        var configuration = SessionConfiguration()
        configuration.reconnectGrace = .seconds(1)
        let alice = try await SessionNode("Alice", configuration: configuration)
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        // Bob's process "dies": its loop stops, closing every socket without a goodbye.
        bob.network.loop.shutdown()
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob reconnecting: connection lost") } != nil)
        var numbers: [UInt64] = []
        for index in 0..<10 {
            if case .enqueued(let number)? = await alice.session.send([UInt8(index)], to: [bob.peer])[bob.peer] {
                numbers.append(number)
            }
        }
        #expect(numbers.count == 10, "messages to a reconnecting peer are taken")
        // Generous: under CI load the recorder lags well behind the 1 s grace (the reason is what is checked).
        let gone = await alice.recorder.wait(for: .seconds(20)) { $0.hasPrefix("Bob notConnected:") }
        #expect(gone?.contains("not back within 1.0 seconds") == true, "\(gone ?? "")")
        let undelivered = alice.recorder.all.compactMap { event -> [UInt64]? in
            if case .undelivered(_, let lost, _) = event { return lost }
            return nil
        }.flatMap { $0 }
        #expect(Set(numbers).isSubset(of: Set(undelivered)), "undelivered \(undelivered), sent \(numbers)")
        let after = await alice.session.send([1], to: [bob.peer])
        guard case .failed(let error)? = after[bob.peer] else {
            Issue.record("sending to a peer that is gone succeeded")
            return
        }
        #expect(error.code == .notConnected)
        await alice.shutdown()
    }
}

func firstMismatch(_ sequence: [Int]) -> String {
    for (index, value) in sequence.enumerated() where value != index { return "at \(index): \(value)" }
    return "none"
}

extension SessionResilienceTests {
    /// A member that stops reading fills its replay buffer; a send to it and another member still reaches the
    /// other at once.
    @Test func aStalledMemberDoesNotHoldBackTheOthers() async throws {
        var configuration = SessionConfiguration()
        configuration.replayBufferBytes = 64 * 1024
        var slow = SessionConfiguration()
        slow.receiveBufferMessages = 4
        let alice = try await SessionNode("Alice", configuration: configuration)
        let bob = try await SessionNode("Bob", configuration: slow)  // never reads
        let carol = try await SessionNode("Carol")
        bob.acceptAll()
        carol.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        #expect(await alice.invite(carol) == .accepted)
        let started = DropCounter()
        let sender = Task {
            for index in 0..<100_000 {
                started.add()
                _ = await alice.session.send(Array(String(index).utf8), to: [bob.peer, carol.peer])
            }
        }
        let heard = DropCounter()
        let reader = Task {
            for await message in carol.session.messages where message.peer == alice.peer { heard.add() }
        }
        // Sending stalls on Bob (his replay buffer is full and nothing is acknowledged)...
        var previous = -1
        #expect(
            await waitUntil(.seconds(20)) {
                let now = started.value
                defer { previous = now }
                try? await Task.sleep(for: .milliseconds(200))
                return now == previous && now < 100_000
            })
        // ...and Carol has every message up to the stalled call's, which reached her without waiting for Bob.
        #expect(await waitUntil { heard.value == started.value }, "Carol heard \(heard.value) of \(started.value)")
        sender.cancel()
        reader.cancel()
        for node in [alice, bob, carol] { await node.shutdown() }
    }

    /// A peer that comes back as a new incarnation (a restart) within the grace is never sent the receipts of the
    /// earlier one: a stale `delivered` would confirm the new incarnation's message of the same number.
    @Test func receiptsOfAnEarlierIncarnationAreNeverSentToTheNextOne() async throws {
        var bobConfiguration = SessionConfiguration()
        bobConfiguration.reconnectGrace = .zero
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob", configuration: bobConfiguration)
        alice.acceptAll()
        #expect(await bob.invite(alice) == .accepted)
        // Alice's application takes a message Bob sent with a receipt; a second waits unread in her inbox.
        let messages = alice.session.messages
        let reader = Task {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        try await bob.session.sendAcknowledged(Array("one".utf8), to: alice.peer)
        _ = await reader.value
        _ = try await bob.session.sendExpectingReceipt(Array("two".utf8), to: alice.peer)
        try await Task.sleep(for: .milliseconds(100))
        // Bob's process dies without a word, and comes back within Alice's grace as a new incarnation.
        await alice.session.memberLink(bob.identity.fingerprint)?.connection.abort()
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob reconnecting") } != nil)
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice notConnected") } != nil)
        await bob.shutdown()
        let reborn = try await HandDrivenPeer(bob.identity, to: alice)
        #expect(try await reborn.inviteAndJoin())
        #expect(await waitUntil { alice.recorder.states.filter { $0.hasPrefix("Bob connected") }.count == 2 })
        // Alice's application now takes the earlier incarnation's second message.
        let late = Task {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        #expect(await late.value.map { String(decoding: $0.data, as: UTF8.self) } == "two")
        try await Task.sleep(for: .seconds(1))
        let receipts = reborn.all.filter {
            if case .delivered = $0 { true } else { false }
        }
        #expect(receipts.isEmpty, "receipts of the earlier incarnation reached the new one: \(reborn.all)")
        await alice.shutdown()
    }
}
