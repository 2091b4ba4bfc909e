import DequeModule
import Dispatch
import Foundation
import MultipeerIO

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A process started by ``NetLab`` (usually inside a host's namespace) whose output is captured.
///
/// Standard output is read line by line on a background thread into a bounded buffer; ``readLine(timeout:)``
/// hands out lines in order, ``lines`` shows everything kept so far. Standard error is kept (bounded) for
/// diagnostics. The process runs in a process group of its own, so ``signal(_:)`` reaches the children of a
/// wrapper shell too. The exit status is collected by the reader thread as soon as the process exits.
public final class LabProcess: Sendable {
    /// The most stdout lines kept; older ones are dropped (a chatty process must not grow memory without bound).
    public static let maximumLines = 100_000
    /// The most bytes of stderr kept (the tail wins: the last words of a failing process matter most).
    public static let maximumStderrBytes = 1 << 20

    /// The process id (also the id of its process group).
    public let pid: Int32
    /// The command line, for diagnostics.
    public let commandLine: String

    private struct State {
        /// The stdout lines kept, oldest first (a `Deque`: dropping the oldest once full moves no other line).
        var lines: Deque<String> = []
        /// Index into `lines` of the next line ``readLine(timeout:)`` returns.
        var cursor = 0
        var partial: [UInt8] = []
        /// The tail of stderr, at most ``LabProcess/maximumStderrBytes``.
        var stderr: Deque<UInt8> = []
        var stdoutClosed = false
        var stderrClosed = false
        var exitStatus: Int32?

        mutating func append(line bytes: [UInt8]) {
            var line = String(decoding: bytes, as: UTF8.self)
            if line.hasSuffix("\r") { line.removeLast() }
            lines.append(line)
            if lines.count > LabProcess.maximumLines {
                let dropped = lines.count - LabProcess.maximumLines
                lines.removeFirst(dropped)
                cursor = max(0, cursor - dropped)
            }
        }
    }

    private let state = Lock(State())
    /// Signalled on every change of `state`; waiters re-check the state, so extra signals are harmless.
    private let changed = DispatchSemaphore(value: 0)

    /// The write end of the process's stdin, for an interactive process; -1 once closed.
    private let input: Lock<Int32>

    init(pid: pid_t, commandLine: String, stdout: Int32, stderr: Int32, stdin: Int32? = nil) {
        input = Lock(stdin ?? -1)
        self.pid = pid
        self.commandLine = commandLine
        Thread.detachNewThread { [self] in readStdout(stdout) }
        Thread.detachNewThread { [self] in readStderr(stderr) }
    }

    // MARK: Input

    /// Writes a line to an interactive process's stdin (started with `interactive: true`); false if its input
    /// is closed or was never open.
    @discardableResult
    public func writeLine(_ line: String) -> Bool {
        let bytes = Array((line + "\n").utf8)
        return input.withLock { fd in
            guard fd >= 0 else { return false }
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }

    /// Closes an interactive process's stdin: it reads end of input.
    public func closeInput() {
        input.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    // MARK: Output

    /// Every stdout line kept so far (without line terminators), including those already read.
    public var lines: [String] { state.withLock { Array($0.lines) } }

    /// The stderr output kept so far.
    public var standardError: String { state.withLock { String(decoding: $0.stderr, as: UTF8.self) } }

    /// Returns the next stdout line not returned before, waiting for it at most `timeout`.
    ///
    /// This blocks the calling thread; from async code prefer ``nextLine(timeout:)``.
    /// - Parameter timeout: How long to wait for a line.
    /// - Returns: The line, or nil if none arrived in time or stdout was closed with no line left.
    public func readLine(timeout: Duration) -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (line, closed) = state.withLock { s -> (String?, Bool) in
                if s.cursor < s.lines.count {
                    defer { s.cursor += 1 }
                    return (s.lines[s.cursor], false)
                }
                return (nil, s.stdoutClosed)
            }
            if let line { return line }
            if closed { return nil }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return nil }
            _ = changed.wait(timeout: .now() + remaining.timeInterval)
        }
    }

    /// Returns the next stdout line not returned before, waiting for it at most `timeout`, without blocking a
    /// thread of the concurrency pool.
    /// - Parameter timeout: How long to wait for a line.
    /// - Returns: The line, or nil if none arrived in time or stdout was closed with no line left.
    public func nextLine(timeout: Duration) async -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let line = readLine(timeout: .zero) { return line }
            if state.withLock({ $0.stdoutClosed && $0.cursor >= $0.lines.count }) { return nil }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Reads lines until one satisfies `predicate`, waiting at most `timeout` in total.
    /// - Parameters:
    ///   - timeout: The total time to wait.
    ///   - predicate: The condition the wanted line satisfies.
    /// - Returns: The first matching line, or nil if none arrived in time.
    public func nextLine(timeout: Duration, where predicate: (String) -> Bool) async -> String? {
        let deadline = ContinuousClock.now + timeout
        while true {
            // Lines already read are checked before the deadline is: a task that resumes late (a busy
            // cooperative pool) must still see lines that arrived in time.
            if let line = readLine(timeout: .zero) {
                if predicate(line) { return line }
                continue
            }
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero, let line = await nextLine(timeout: remaining) else { return nil }
            if predicate(line) { return line }
        }
    }

    // MARK: Lifetime

    /// The exit status if the process has exited: the exit code, or 128 + the signal number if a signal
    /// ended it (as a shell reports it).
    public var exitStatus: Int32? { state.withLock { $0.exitStatus } }

    /// Sends a signal to the process group (the process and any children it started in its group).
    /// Does nothing once the process has exited.
    /// - Parameter signal: For example `SIGINT`, `SIGTERM` or `SIGKILL`.
    public func signal(_ signal: Int32) {
        // Holding the lock keeps the reader thread from reaping the pid (and the pid being reused) meanwhile.
        state.withLock { s in
            if s.exitStatus == nil { _ = Glibc.kill(-pid, signal) }
        }
    }

    /// Waits for the process to exit, blocking the calling thread at most `timeout`.
    /// - Parameter timeout: How long to wait.
    /// - Returns: The exit status (see ``exitStatus``), or nil if the process is still running.
    @discardableResult
    public func waitForExit(timeout: Duration) -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = exitStatus { return status }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return nil }
            _ = changed.wait(timeout: .now() + min(remaining, .milliseconds(50)).timeInterval)
        }
    }

    /// Waits for the process to exit without blocking a thread of the concurrency pool.
    /// - Parameter timeout: How long to wait.
    /// - Returns: The exit status (see ``exitStatus``), or nil if the process is still running.
    public func exited(within timeout: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while true {
            if let status = exitStatus { return status }
            if ContinuousClock.now >= deadline { return nil }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Sends SIGKILL to the process group and waits (bounded) for the process to be reaped.
    public func forceKill() {
        signal(SIGKILL)
        waitForExit(timeout: .seconds(5))
    }

    // MARK: Reader threads

    private func readStdout(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            state.withLock { s in
                for byte in buffer[0..<count] {
                    if byte == UInt8(ascii: "\n") {
                        s.append(line: s.partial)
                        s.partial.removeAll(keepingCapacity: true)
                    } else {
                        s.partial.append(byte)
                    }
                }
            }
            changed.signal()
        }
        close(fd)
        state.withLock { s in
            if !s.partial.isEmpty { s.append(line: s.partial) }
            s.stdoutClosed = true
        }
        changed.signal()
        // Closing stdout almost always means exiting; reaping here keeps zombies from accumulating.
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        state.withLock { $0.exitStatus = code }
        changed.signal()
    }

    private func readStderr(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            state.withLock { s in
                s.stderr.append(contentsOf: buffer[0..<count])
                if s.stderr.count > Self.maximumStderrBytes {
                    s.stderr.removeFirst(s.stderr.count - Self.maximumStderrBytes)
                }
            }
        }
        close(fd)
        state.withLock { $0.stderrClosed = true }
        changed.signal()
    }

    /// Waits (bounded) until stderr reached end of file, so ``standardError`` is complete. A process that left a
    /// daemon holding its stderr would make this wait the whole `timeout`.
    func waitForStandardErrorClosed(timeout: Duration) {
        let deadline = ContinuousClock.now + timeout
        while !state.withLock({ $0.stderrClosed }) {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return }
            _ = changed.wait(timeout: .now() + min(remaining, .milliseconds(50)).timeInterval)
        }
    }
}

extension Duration {
    /// This duration in seconds, for APIs that take a `TimeInterval`.
    var timeInterval: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
