// Temporary stand-in until the event loop lands; replaced by the io branch's IOInstant.
public struct IOInstant: Comparable, Hashable, Sendable {
    public var nanoseconds: UInt64
    public init(nanoseconds: UInt64) { self.nanoseconds = nanoseconds }
    public static func < (a: IOInstant, b: IOInstant) -> Bool { a.nanoseconds < b.nanoseconds }
    public static func + (a: IOInstant, d: Duration) -> IOInstant {
        let (s, atto) = d.components
        let ns = Int64(s) * 1_000_000_000 + atto / 1_000_000_000
        return IOInstant(nanoseconds: UInt64(max(0, Int64(a.nanoseconds) + ns)))
    }
    public static func - (a: IOInstant, d: Duration) -> IOInstant { a + (.zero - d) }
    public static func - (a: IOInstant, b: IOInstant) -> Duration {
        .nanoseconds(Int64(a.nanoseconds) - Int64(b.nanoseconds))
    }
}
