import Synchronization
import Testing

@testable import PeerConnectivity

/// A flag set once, read from anywhere.
private final class Flag: Sendable {
    private let value = Atomic(false)
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    func set() { value.store(true, ordering: .sequentiallyConsistent) }
}

/// PeerConnectivity's listener budget: takers suspend while it is spent and go on when bytes come back.
@Suite struct ByteBudgetTests {
    /// Starts a taker of `count` bytes and returns a flag it sets once it has them.
    private func startTaking(_ count: Int, from budget: ByteBudget) -> (Task<Void, Never>, Flag) {
        let done = Flag()
        let task = Task {
            await budget.take(count)
            done.set()
        }
        return (task, done)
    }

    @Test func takesWithinTheLimitAtOnceAndWaitsBeyondItUntilBytesComeBack() async {
        let budget = ByteBudget(limit: 100)
        await budget.take(60)
        await budget.take(40)  // exactly the limit
        let (waiter, done) = startTaking(1, from: budget)
        try? await Task.sleep(for: .milliseconds(200))
        #expect(!done.isSet, "a take beyond the limit waits")
        budget.give(40)
        await waiter.value
        #expect(done.isSet)
    }

    @Test func aTakeLargerThanTheLimitWaitsForEverythingAndThenPasses() async {
        let budget = ByteBudget(limit: 100)
        await budget.take(10)
        let (big, done) = startTaking(1_000, from: budget)
        try? await Task.sleep(for: .milliseconds(200))
        #expect(!done.isSet)
        budget.give(10)
        await big.value  // an empty budget admits any one take, so an oversized message cannot stall forever
        #expect(done.isSet)
    }

    @Test func everyWaiterLooksAgainAndOnlyThoseThatFitGoOn() async {
        let budget = ByteBudget(limit: 100)
        await budget.take(100)
        let (first, firstDone) = startTaking(60, from: budget)
        let (second, secondDone) = startTaking(60, from: budget)
        try? await Task.sleep(for: .milliseconds(200))
        budget.give(100)
        // One of the two fits; the other waits for the next give.
        let passed = { [firstDone, secondDone].filter { $0.isSet }.count }
        #expect(await soon { passed() >= 1 })
        try? await Task.sleep(for: .milliseconds(200))
        #expect(passed() == 1)
        budget.give(60)
        await first.value
        await second.value
    }
}
