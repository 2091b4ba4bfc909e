internal import Foundation
public import Testing

/// Runs each test case of the suite or test that carries it on a thread of its own instead of the shared
/// cooperative pool, which has one thread per core (two here). A test that computes for seconds without
/// suspending (random round trips, megabytes through a codec in a debug build) would otherwise hold a pool thread
/// all that time, and two of them stop every other test in the process: the waits of those tests, which poll on
/// the pool, then see their deadlines pass without having looked.
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard testCase != nil else { return try await function() }
        try await onOwnThread { try await function() }
    }
}

/// Runs `body` with a thread of its own as its task executor: its synchronous stretches (and those of the child
/// tasks it starts) run there, not on the shared pool. For scopes that block (starting processes, waiting for
/// them) or compute for long.
public func onOwnThread<T>(_ body: () async throws -> T) async throws -> T {
    let executor = ThreadExecutor(name: "test-thread")
    defer { executor.finishWhenIdle() }
    return try await withTaskExecutorPreference(executor) { try await body() }
}

extension Trait where Self == OwnThreadTrait {
    /// Computes for long stretches without suspending: runs on a thread of its own, not on the shared pool.
    public static var ownThread: Self { OwnThreadTrait() }
}

/// A task executor with one thread that runs the jobs given to it in order. Once told to finish, the thread ends
/// when no job is left; a job that comes later (a task the test left behind) starts a new thread, so it still runs.
final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    // Safety: every stored property but `name` is touched only with `condition` locked.
    private let name: String
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var running = false
    private var finishing = false

    init(name: String) { self.name = name }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        let start = !running
        running = true
        condition.signal()
        condition.unlock()
        if start { startThread() }
    }

    /// Lets the thread end once it has nothing to run.
    func finishWhenIdle() {
        condition.lock()
        finishing = true
        condition.signal()
        condition.unlock()
    }

    private func startThread() {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !finishing { condition.wait() }
            guard !jobs.isEmpty else {
                running = false
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
