internal import MultipeerIO

/// A one-shot timer on an event loop's clock (so tests drive it with a `ManualClock`), cancellable from any
/// thread; the work runs at most once.
final class SessionTimer: Sendable {
    private let loop: EventLoop
    private let state = Lock<(id: TimerID?, done: Bool)>((nil, false))

    /// Starts a timer that runs `work` after `delay`, off the loop thread.
    init(after delay: Duration, on loop: EventLoop, _ work: @escaping @Sendable () -> Void) {
        self.loop = loop
        let scheduled = loop.execute { [self] in
            let id = loop.scheduleTimer(after: delay) { [self] in
                let fire = state.withLock { state -> Bool in
                    guard !state.done else { return false }
                    state.done = true
                    return true
                }
                if fire { Task { work() } }
            }
            let cancelled = state.withLock { state -> Bool in
                state.id = id
                return state.done
            }
            if cancelled { loop.cancelTimer(id) }
        }
        // A loop that was shut down runs nothing: fire now, so whoever waits on the timer is not left waiting.
        if !scheduled,
            state.withLock({ state in
                defer { state.done = true }
                return !state.done
            })
        {
            Task { work() }
        }
    }

    /// Stops the timer if it has not fired; returns whether it was still pending.
    @discardableResult
    func cancel() -> Bool {
        let (wasPending, id) = state.withLock { state -> (Bool, TimerID?) in
            defer { state.done = true }
            return (!state.done, state.id)
        }
        if let id { _ = loop.execute { self.loop.cancelTimer(id) } }
        return wasPending
    }

    /// Waits `delay` on the loop's clock (a manual clock in tests); returns false at once when the waiting task is
    /// cancelled (or was already).
    static func sleep(for delay: Duration, on loop: EventLoop) async -> Bool {
        let waiter = Lock<(continuation: CheckedContinuation<Bool, Never>?, done: Bool)>((nil, false))
        let timer = Lock<SessionTimer?>(nil)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let cancelled = waiter.withLock { state -> Bool in
                    if state.done { return true }
                    state.continuation = continuation
                    return false
                }
                if cancelled { return continuation.resume(returning: false) }
                let made = SessionTimer(after: delay, on: loop) {
                    let ready = waiter.withLock { state -> CheckedContinuation<Bool, Never>? in
                        defer { state = (nil, true) }
                        return state.continuation
                    }
                    ready?.resume(returning: true)
                }
                timer.withLock { $0 = made }
            }
        } onCancel: {
            let ready = waiter.withLock { state -> CheckedContinuation<Bool, Never>? in
                defer { state = (nil, true) }
                return state.continuation
            }
            timer.withLock { $0 }?.cancel()
            ready?.resume(returning: false)
        }
    }
}
