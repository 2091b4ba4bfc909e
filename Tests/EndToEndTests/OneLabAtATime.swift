import Testing

/// Runs the tests of the suites that carry it one at a time, across suites: the heavy ones (a 1 GiB transfer,
/// crowds of 16 processes) would otherwise share the two cores with the ones that measure timing (a keepalive
/// bound, discovery latency) and make them measure the machine instead of the protocol.
struct OneLabAtATime: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard testCase != nil else { return try await function() }
        await LabTurn.shared.acquire()
        do {
            try await function()
        } catch {
            await LabTurn.shared.release()
            throw error
        }
        await LabTurn.shared.release()
    }
}

/// A first-come, first-served turn.
actor LabTurn {
    static let shared = LabTurn()
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}

extension Trait where Self == OneLabAtATime {
    /// One such test at a time, across suites.
    static var oneLabAtATime: Self { OneLabAtATime() }
}
