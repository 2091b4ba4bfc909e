internal import Glibc

/// The system's `CLOCK_MONOTONIC`: never jumps with wall-clock changes.
public struct MonotonicClock: IOClock {
    /// Creates the clock.
    public init() {}

    /// The current `CLOCK_MONOTONIC` time.
    /// - Returns: Nanoseconds since an unspecified boot-time origin.
    public func now() -> IOInstant {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return IOInstant(nanoseconds: UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec))
    }
}
