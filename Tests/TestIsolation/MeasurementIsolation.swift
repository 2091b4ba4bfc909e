public import Testing

/// Keeps tests that count process-wide things (live connection objects, descriptors, heap bytes) from running
/// while tests that make many connections run: the counting tests take the lock exclusively, the busy ones
/// share it. Suites run in parallel otherwise, and a crowd of sessions in another suite would show up in the
/// counts as a leak.
actor MeasurementIsolation {
    static let shared = MeasurementIsolation()

    private var sharers = 0
    private var exclusive = false
    private var waiting: [(exclusive: Bool, continuation: CheckedContinuation<Void, Never>)] = []

    private func acquire(exclusive wantsExclusive: Bool) async {
        if canEnter(wantsExclusive), waiting.isEmpty {
            enter(wantsExclusive)
            return
        }
        await withCheckedContinuation { waiting.append((wantsExclusive, $0)) }
    }

    private func canEnter(_ wantsExclusive: Bool) -> Bool {
        wantsExclusive ? !exclusive && sharers == 0 : !exclusive
    }

    private func enter(_ wantsExclusive: Bool) {
        if wantsExclusive { exclusive = true } else { sharers += 1 }
    }

    private func release(exclusive wasExclusive: Bool) {
        if wasExclusive { exclusive = false } else { sharers -= 1 }
        // Wake waiters in order while they can enter (a run of sharers, or one exclusive).
        while let next = waiting.first, canEnter(next.exclusive) {
            waiting.removeFirst()
            enter(next.exclusive)
            next.continuation.resume()
        }
    }

    func run<T: Sendable>(exclusive: Bool, _ body: @Sendable () async throws -> T) async throws -> T {
        await acquire(exclusive: exclusive)
        do {
            let result = try await body()
            release(exclusive: exclusive)
            return result
        } catch {
            release(exclusive: exclusive)
            throw error
        }
    }
}

/// The trait: `.measuring` for tests that count process-wide resources, `.busy` for suites that make many
/// connections.
public struct MeasurementIsolationTrait: TestTrait, SuiteTrait, TestScoping {
    let exclusive: Bool
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // Suites get the trait recursively; only test cases take the lock.
        guard testCase != nil else { return try await function() }
        try await MeasurementIsolation.shared.run(exclusive: exclusive, function)
    }
}

extension Trait where Self == MeasurementIsolationTrait {
    /// Counts process-wide resources: runs alone among the tests that make many connections.
    public static var measuring: Self { MeasurementIsolationTrait(exclusive: true) }
    /// Makes many connections: never overlaps a `.measuring` test.
    public static var busy: Self { MeasurementIsolationTrait(exclusive: false) }
}
