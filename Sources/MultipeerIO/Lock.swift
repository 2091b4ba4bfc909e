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
    //
    // The mutex and the value share one allocation of their own, the value in at least one byte: the thread
    // sanitizer records an `inout` access at the value's address, and a value of no size stored in the class
    // (`Lock<Void>`) sits at the object's own address, which every call reads unlocked for the class's metadata,
    // a false race on every lock of nothing.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline let value: UnsafeMutablePointer<Value>

    /// Creates a lock guarding `initialValue`.
    /// - Parameter initialValue: The value the lock guards from now on.
    public init(_ initialValue: consuming sending Value) {
        let alignment = max(MemoryLayout<Value>.alignment, MemoryLayout<pthread_mutex_t>.alignment)
        let offset = (MemoryLayout<pthread_mutex_t>.stride + alignment - 1) / alignment * alignment
        let memory = UnsafeMutableRawPointer.allocate(
            byteCount: offset + max(1, MemoryLayout<Value>.size), alignment: alignment)
        mutex = memory.initializeMemory(as: pthread_mutex_t.self, repeating: pthread_mutex_t(), count: 1)
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = (memory + offset).bindMemory(to: Value.self, capacity: 1)
        value.initialize(to: initialValue)
    }

    deinit {
        value.deinitialize(count: 1)
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        UnsafeMutableRawPointer(mutex).deallocate()
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
        return try body(&value.pointee)
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
        return try body(&value.pointee)
    }

    @usableFromInline func acquire() { pthread_mutex_lock(mutex) }

    @usableFromInline func release() { pthread_mutex_unlock(mutex) }

    @usableFromInline func tryAcquire() -> Bool { pthread_mutex_trylock(mutex) == 0 }
}
