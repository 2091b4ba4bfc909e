internal import Dispatch
public import Foundation

extension Process {
    /// Starts the process, runs `whileRunning` (which drains its pipes, if any), then waits until it has exited.
    ///
    /// The wait goes through the termination handler, not `waitUntilExit()`: that one polls a run loop, and on
    /// Linux, called from the concurrency pool's threads, it was seen (here and elsewhere) to wait forever for a
    /// process that had long exited, which hung the whole test run.
    public func runToExit<T>(whileRunning body: () throws -> T) throws -> T {
        let exit = ProcessExit(self)
        try run()
        defer { exit.wait() }
        return try body()
    }

    /// Starts the process and waits until it has exited (see ``runToExit(whileRunning:)``).
    public func runToExit() throws { try runToExit {} }
}

/// The end of a process, told by its termination handler: make one before `run()`, `wait()` after.
public final class ProcessExit: Sendable {
    private let exited = DispatchSemaphore(value: 0)

    /// Sets `process`'s termination handler; the process must not have been started yet.
    public init(_ process: Process) {
        let exited = exited
        process.terminationHandler = { _ in exited.signal() }
    }

    /// Blocks until the process has exited.
    public func wait() { exited.wait() }
}
