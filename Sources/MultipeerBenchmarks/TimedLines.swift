import Dispatch
import Foundation
import MultipeerIO
import NetLab

/// Reads a ``LabProcess``'s stdout on a dedicated thread and stamps every line with the monotonic clock the moment
/// it is handed over.
///
/// `LabProcess.nextLine(timeout:)` polls every 10 ms, which would add up to 10 ms of error to a 150 ms target;
/// `readLine(timeout:)` wakes on the reader thread's semaphore instead, so a thread blocked in it sees a line
/// within scheduling latency of the pipe read. The benchmark then consumes the stamped lines at leisure.
final class TimedLines: Sendable {
    /// One line and when it was read from the pipe.
    struct Line: Sendable {
        /// The line, without terminator.
        let text: String
        /// When the benchmark read it.
        let time: ContinuousClock.Instant
    }

    private struct State {
        var lines: [Line] = []
        var cursor = 0
        var finished = false
    }

    private let state = Lock(State())
    private let changed = DispatchSemaphore(value: 0)
    /// The process read.
    let process: LabProcess

    init(_ process: LabProcess) {
        self.process = process
        Thread.detachNewThread { [self] in pump() }
    }

    private func pump() {
        while true {
            if let text = process.readLine(timeout: .seconds(1)) {
                let time = ContinuousClock.now
                state.withLock { $0.lines.append(Line(text: text, time: time)) }
                changed.signal()
            } else if process.exitStatus != nil {
                // The status is set only after stdout reached end of file: nothing more will come.
                while let text = process.readLine(timeout: .zero) {
                    let time = ContinuousClock.now
                    state.withLock { $0.lines.append(Line(text: text, time: time)) }
                }
                state.withLock { $0.finished = true }
                changed.signal()
                return
            }
        }
    }

    /// Every line read so far.
    var all: [Line] { state.withLock { $0.lines } }

    /// The next line not returned before, waiting until `deadline` at most (blocking the calling thread).
    /// - Returns: The line, or nil at the deadline or when the process has exited with no line left.
    func next(before deadline: ContinuousClock.Instant) -> Line? {
        while true {
            let (line, finished) = state.withLock { s -> (Line?, Bool) in
                if s.cursor < s.lines.count {
                    defer { s.cursor += 1 }
                    return (s.lines[s.cursor], false)
                }
                return (nil, s.finished)
            }
            if let line { return line }
            if finished { return nil }
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { return nil }
            let (seconds, attoseconds) = min(remaining, .milliseconds(200)).components
            _ = changed.wait(timeout: .now() + Double(seconds) + Double(attoseconds) / 1e18)
        }
    }

    /// Reads lines until one satisfies `predicate`, waiting at most `timeout`.
    func next(within timeout: Duration, where predicate: (String) -> Bool) -> Line? {
        let deadline = ContinuousClock.now + timeout
        while let line = next(before: deadline) {
            if predicate(line.text) { return line }
        }
        return nil
    }
}
