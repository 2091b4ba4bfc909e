#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A value guarded by a mutual-exclusion lock: the one lock type of the project.
///
/// It is a POSIX mutex rather than `Synchronization.Mutex` because the thread sanitizer sees POSIX mutexes (it
/// intercepts `pthread_mutex_lock`) and does not see `Mutex` on Linux, which takes a futex directly: under
/// `Mutex` every value handed from one thread to another through the lock is reported as a race, and a real
/// race drowns among them. `multipeer-bench lock` measures the two side by side (docs/BENCHMARKS.md).
///
/// The API is `Mutex`'s: `withLock` hands the guarded value to a closure, with the same `sending` rules, so a
/// value that is not `Sendable` can be guarded and the lock is `Sendable` whatever its value.
public final class Lock<Value: ~Copyable>: @unchecked Sendable {
    // Safety: `value` is read or written only between `pthread_mutex_lock` and `pthread_mutex_unlock` of `mutex`,
    // and only through `withLock`'s `sending` parameter and result, as `Mutex` does. Inlinable, as `Mutex` is: a
    // generic call across modules that is not specialized costs more than the lock itself.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline var value: Value

    /// Creates a lock guarding `initialValue`.
    /// - Parameter initialValue: The value the lock guards from now on.
    public init(_ initialValue: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = initialValue
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the guarded value, the lock held; other threads calling it wait until `body` returns.
    /// - Parameter body: Reads or changes the value; it must not take this lock again.
    /// - Returns: What `body` returns.
    @inlinable
    public func withLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        acquire()
        defer { release() }
        return try body(&value)
    }

    /// Runs `body` with the guarded value if the lock is free now, without waiting.
    /// - Parameter body: Reads or changes the value; it must not take this lock again.
    /// - Returns: What `body` returns, or nil if another thread held the lock.
    @inlinable
    public func withLockIfAvailable<Result, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result? {
        guard tryAcquire() else { return nil }
        defer { release() }
        return try body(&value)
    }

    @usableFromInline func acquire() { pthread_mutex_lock(mutex) }

    @usableFromInline func release() { pthread_mutex_unlock(mutex) }

    @usableFromInline func tryAcquire() -> Bool { pthread_mutex_trylock(mutex) == 0 }
}
