import Logging
import MultipeerIO

/// The logger the tool gives the library: `--log-level`, else the environment's `MULTIPEER_LOG`, as
/// `LineLogHandler` lines on standard error (nothing for `off`, the default).
enum ToolLog {
    private static let current = Lock(MultipeerLogging.fallback)

    /// The logger every configuration the tool makes carries; set once, before any command runs.
    static var logger: Logger {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
}
