import Foundation
import MultipeerIO

/// Deadlines of timing-bound tests and lab runs, stretched under sanitizers: `MULTIPEER_TEST_TIME_FACTOR` (set by
/// scripts/sanitize.sh: sanitized code runs several times slower) multiplies every deadline a test waits for,
/// never what a test asserts about the code's own timers (those run on the manual clock or are measured).
public enum TestTime {
    /// The factor, 1 unless the environment sets a larger one.
    public static let factor: Double = {
        guard let text = ProcessInfo.processInfo.environment["MULTIPEER_TEST_TIME_FACTOR"], let value = Double(text),
            value >= 1
        else { return 1 }
        return value
    }()

    /// `duration` stretched by ``factor``.
    /// - Parameter duration: A deadline the test waits for.
    /// - Returns: The deadline for this build.
    public static func scaled(_ duration: Duration) -> Duration {
        factor == 1 ? duration : duration * factor
    }

    /// Whether this process runs under the thread or address sanitizer (so do the processes a test starts: they
    /// come from the same build). Memory measurements mean something else there: the sanitizer's shadow memory is
    /// resident, and its allocator leaves glibc's heap statistics at zero.
    public static var sanitized: Bool { ProcessMemory.underSanitizer }
}
