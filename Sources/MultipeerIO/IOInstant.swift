/// A point in time on an `IOClock`, in nanoseconds since the clock's arbitrary origin.
public struct IOInstant: Comparable, Hashable, Sendable {
    /// Nanoseconds since the clock's origin.
    public var nanoseconds: UInt64

    /// Creates an instant `nanoseconds` after the clock's origin.
    /// - Parameter nanoseconds: Nanoseconds since the origin.
    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// Orders instants by time.
    public static func < (lhs: IOInstant, rhs: IOInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// The instant `duration` later (earlier for a negative duration), clamped to the representable range.
    public static func + (lhs: IOInstant, rhs: Duration) -> IOInstant {
        let delta = rhs.clampedNanoseconds
        if delta >= 0 {
            let (sum, overflow) = lhs.nanoseconds.addingReportingOverflow(UInt64(delta))
            return IOInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = delta.magnitude
        return IOInstant(nanoseconds: lhs.nanoseconds > magnitude ? lhs.nanoseconds - magnitude : 0)
    }

    /// The instant `duration` earlier (later for a negative duration), clamped to the representable range.
    public static func - (lhs: IOInstant, rhs: Duration) -> IOInstant {
        lhs + (.zero - rhs)
    }

    /// The signed time from `rhs` to `lhs`.
    public static func - (lhs: IOInstant, rhs: IOInstant) -> Duration {
        if lhs.nanoseconds >= rhs.nanoseconds {
            return .nanoseconds(Int64(clamping: lhs.nanoseconds - rhs.nanoseconds))
        }
        return .zero - .nanoseconds(Int64(clamping: rhs.nanoseconds - lhs.nanoseconds))
    }
}

extension Duration {
    /// The duration in whole nanoseconds, clamped to `Int64`'s range.
    var clampedNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return sum
    }
}
