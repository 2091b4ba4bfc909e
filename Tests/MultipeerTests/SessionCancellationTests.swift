import Dispatch
import MultipeerIO
import TestIsolation
import Testing

@testable import Multipeer

/// Every wait of a session ends when its task is cancelled, with a result that says so.
@Suite("Session waits and cancellation", .busy)
struct SessionCancellationTests {
    /// Runs `body` in a task, cancels it after `delay`, and returns its result and how long it took after the cancel.
    static func cancelled<T: Sendable>(after delay: Duration, _ body: @escaping @Sendable () async -> T) async
        -> (T, Duration)
    {
        let task = Task { await body() }
        try? await Task.sleep(for: delay)
        let cancelledAt = ContinuousClock.now
        task.cancel()
        let value = await task.value
        return (value, ContinuousClock.now - cancelledAt)
    }

    /// What "at once" allows on a loaded machine: the waits below were given a minute, and each result says it was
    /// cancelled (a wait that ignored the cancel would end at its deadline with another result).
    static let promptly: Duration = .seconds(30)

    @Test func readingMessagesEndsWhenTheReaderIsCancelled() async throws {
        let alice = try await SessionNode("Alice")
        let messages = alice.session.messages
        let (message, took) = await Self.cancelled(after: .milliseconds(100)) {
            var iterator = messages.makeAsyncIterator()
            return await iterator.next()
        }
        #expect(message == nil)
        #expect(took < Self.promptly)
        await alice.shutdown()
    }

    @Test func anInvitationWaitingForItsAnswerIsWithdrawnWhenCancelled() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        let held = Lock<Invitation?>(nil)
        bob.answerInvitations { invitation in held.withLock { $0 = invitation } }
        let invite = Task { await alice.invite(bob, timeout: .seconds(60)) }
        // Cancelled once Bob's application holds it (a loaded machine may take a while to get it there).
        #expect(await waitUntil(.seconds(30)) { held.withLock { $0 } != nil })
        let cancelledAt = ContinuousClock.now
        invite.cancel()
        let outcome = await invite.value
        let took = ContinuousClock.now - cancelledAt
        #expect(outcome == .refused(reason: "the invitation was cancelled"))
        #expect(took < Self.promptly)
        // Bob's application sees the invitation withdrawn, not left open until its minute is up.
        #expect(await waitUntil { held.withLock { $0 }.map { !$0.isOpen } ?? false })
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob notConnected") } != nil)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aSendWaitingForRoomEndsWhenCancelled() async throws {
        var configuration = SessionConfiguration()
        configuration.replayBufferBytes = 16
        let alice = try await SessionNode("Alice", configuration: configuration)
        var quiet = SessionConfiguration()
        quiet.reconnectGrace = .zero
        let bob = try await SessionNode("Bob", configuration: quiet)
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        // Bob goes away without a word: nothing acknowledges Alice's messages, so her replay buffer holds her back.
        #expect(await alice.silence(bob), "\(alice.recorder.states)")
        let session = alice.session
        let peer = bob.peer
        _ = await session.send([UInt8](repeating: 1, count: 16), to: [peer])  // one message always fits
        let (results, took) = await Self.cancelled(after: .milliseconds(200)) {
            await session.send([UInt8](repeating: 2, count: 16), to: [peer])
        }
        guard case .failed(let error)? = results[peer] else {
            Issue.record("the waiting send was not ended: \(results)")
            return
        }
        #expect(error.code == .cancelled)
        #expect(took < Self.promptly)
        await alice.shutdown()
    }

    @Test func aWaitForAReceiptEndsWhenCancelled() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        // Bob's application never takes the message: no receipt comes.
        let pending = try await alice.session.sendExpectingReceipt([7], to: bob.peer)
        let (error, took) = await Self.cancelled(after: .milliseconds(200)) { () -> SessionError? in
            do throws(SessionError) {
                try await pending.delivered()
                return nil
            } catch {
                return error
            }
        }
        #expect(error?.code == .cancelled)
        #expect(took < Self.promptly)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func waitingForAPeerWithConnectionDataEndsWhenCancelled() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        // The higher fingerprint waits to be dialed.
        let (low, high) =
            alice.identity.fingerprint.bytes.lexicographicallyPrecedes(bob.identity.fingerprint.bytes)
            ? (alice, bob) : (bob, alice)
        let data = try await low.session.connectionData(for: high.peer)
        let session = high.session
        let peer = low.peer
        let (outcome, took) = await Self.cancelled(after: .milliseconds(200)) {
            await session.connect(peer, connectionData: data, timeout: .seconds(60))
        }
        #expect(outcome == .refused(reason: "cancelled by this side"))
        #expect(took < Self.promptly)
        #expect(await high.recorder.wait { $0.hasPrefix("\(peer.displayName) notConnected") } != nil)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func leavingReturnsAtOnceWhenCancelled() async throws {
        // Alice's clock only moves when the test moves it, and Bob's loop is held so he cannot answer her close:
        // a leave that ignored the cancel would wait for his close until the clock passed its bound, never.
        let clock = ManualClock()
        let alice = try await SessionNode("Alice", clock: clock)
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let gate = DispatchSemaphore(value: 0)
        let held = Lock(false)
        _ = bob.network.loop.execute {
            held.withLock { $0 = true }
            gate.wait()
        }
        #expect(await waitUntil(.seconds(30)) { held.withLock { $0 } })
        let session = alice.session
        let returned = Lock(false)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await session.disconnect()
            returned.withLock { $0 = true }
        }
        #expect(await waitUntil(.seconds(30)) { returned.withLock { $0 } }, "a cancelled leave waited for the close")
        gate.signal()
        if !returned.withLock({ $0 }) { clock.advance(by: Session.leaveWait * 2) }
        await task.value
        // It still left: Bob sees it once his loop runs again.
        #expect(await bob.recorder.wait { $0 == "Alice notConnected: left" } != nil)
        await alice.shutdown()
        await bob.shutdown()
    }
}
