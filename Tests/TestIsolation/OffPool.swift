internal import Foundation

/// Runs blocking work (a process run to completion, a blocking read) on a thread of its own, so the
/// cooperative pool, two threads on a 2-core machine, keeps serving the tests that run beside it.
public func offPool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}
