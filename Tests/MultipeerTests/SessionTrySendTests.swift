import MultipeerIO
import Synchronization
import TestIsolation
import Testing

@testable import Multipeer

/// The session's calls for callers that cannot wait (the Multipeer Connectivity facade's `send`), and the batch
/// reader that hands messages on in one go.
@Suite("Session: sends that do not wait, batches", .busy)
struct SessionTrySendTests {
    @Test func aSendThatCannotWaitIsQueuedOrRefusedAtOnceWithTheReason() async throws {
        var configuration = SessionConfiguration()
        configuration.replayBufferBytes = 64
        let alice = try await SessionNode("Alice", configuration: configuration)
        var quiet = SessionConfiguration()
        quiet.reconnectGrace = .zero
        let bob = try await SessionNode("Bob", configuration: quiet)
        let carol = try await SessionNode("Carol")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        #expect(alice.session.isMember(bob.peer))
        #expect(!alice.session.isMember(carol.peer))
        guard case .failed(let stranger) = alice.session.trySend([1], to: carol.peer) else {
            Issue.record("a message to a stranger was queued")
            return
        }
        #expect(stranger.code == .notConnected)
        // Bob goes silent (his link is cut and he leaves): nothing confirms Alice's messages any more.
        #expect(await alice.silence(bob), "\(alice.recorder.states)")
        // Still a member while reconnecting: the first 64 bytes are queued, the next refused, neither waits.
        let chunk = [UInt8](repeating: 7, count: 32)
        #expect(alice.session.trySend(chunk, to: bob.peer).isEnqueued)
        #expect(alice.session.trySend(chunk, to: bob.peer).isEnqueued)
        guard case .failed(let full) = alice.session.trySend(chunk, to: bob.peer) else {
            Issue.record("a message beyond the replay buffer was queued")
            return
        }
        #expect(full.code == .unavailable)
        #expect(full.reason.contains("64 bytes") && full.reason.contains("Bob"), "\(full.reason)")
        #expect(throws: SessionError.self) { try alice.session.trySendExpectingReceipt(chunk, to: bob.peer) }
        await alice.shutdown()
        await carol.shutdown()
    }

    @Test func aBatchHoldsWhatWaitsInOrderAndEachMessageOnce() async throws {
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice connected") } != nil)
        for index in 0..<200 {
            #expect(alice.session.trySend([UInt8(index)], to: bob.peer).isEnqueued)
        }
        var iterator = bob.session.messages.makeAsyncIterator()
        // One taken singly first: the batch after it starts with what that read left.
        let first = await iterator.next()
        #expect(first?.data == [0])
        var received: [UInt8] = [0]
        var batches = 0
        while received.count < 200 {
            let batch = await iterator.nextBatch()
            #expect(!batch.isEmpty && batch.count <= 64)
            batches += 1
            received += batch.flatMap(\.data)
        }
        #expect(received == (0..<200).map { UInt8($0) })
        #expect(batches >= 4)  // at most 64 a batch
        await alice.shutdown()
        await bob.shutdown()
    }
}
