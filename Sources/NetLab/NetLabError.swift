#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error from the network-namespace lab, saying which step failed and why.
public struct NetLabError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is.
    public enum Code: String, Sendable {
        /// The lab cannot run on this machine (see ``NetLab/unavailableReason``).
        case unavailable
        /// A setup command (`ip`, `sysctl`, ...) exited with a failure status.
        case commandFailed
        /// A process could not be started.
        case spawnFailed
        /// A process did not finish within its time limit (it was killed).
        case timedOut
        /// The hosts of a freshly created lab cannot reach each other.
        case noConnectivity
        /// A host index outside the lab was given.
        case noSuchHost
    }

    /// What kind of failure this is.
    public let code: Code
    /// A human-readable explanation, including the command and its error output where there is one.
    public let message: String

    /// A textual representation of this error.
    public var description: String { "NetLab \(code.rawValue): \(message)" }

    static func unavailable(_ reason: String) -> Self { .init(code: .unavailable, message: reason) }

    static func commandFailed(_ command: String, status: Int32, stderr: String) -> Self {
        .init(
            code: .commandFailed,
            message: "`\(command)` exited with status \(status): \(stderr.trimmingTrailingWhitespace())")
    }

    static func spawnFailed(_ executable: String, errno code: Int32) -> Self {
        .init(code: .spawnFailed, message: "cannot start \(executable): \(String(cString: strerror(code)))")
    }

    static func timedOut(_ command: String, after timeout: Duration) -> Self {
        .init(code: .timedOut, message: "`\(command)` did not finish within \(timeout)")
    }

    static func noConnectivity(_ detail: String) -> Self { .init(code: .noConnectivity, message: detail) }

    static func noSuchHost(_ index: Int, count: Int) -> Self {
        .init(code: .noSuchHost, message: "host \(index) does not exist (the lab has \(count) hosts)")
    }
}

extension String {
    func trimmingTrailingWhitespace() -> String {
        var result = self
        while let last = result.last, last.isWhitespace { result.removeLast() }
        return result
    }
}
