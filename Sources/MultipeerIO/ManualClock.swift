/// A clock that moves only when told to, for deterministic tests of timer-driven behaviour.
///
/// Advancing it wakes every `EventLoop` that uses it, so timers that became due fire on their loops.
public final class ManualClock: IOClock {
    private struct State {
        var now: IOInstant
        var observers: [ObjectIdentifier: @Sendable () -> Void] = [:]
    }

    private let state: Lock<State>

    /// Creates a clock that reads `start` until advanced.
    /// - Parameter start: The initial time (one second after the origin by default).
    public init(start: IOInstant = IOInstant(nanoseconds: 1_000_000_000)) {
        state = Lock(State(now: start))
    }

    /// Moves the clock forward and wakes every event loop using it so due timers fire.
    /// - Parameter duration: How far to move; negative values are ignored.
    public func advance(by duration: Duration) {
        guard duration > .zero else { return }
        let observers = state.withLock { state in
            state.now = state.now + duration
            return Array(state.observers.values)
        }
        // Wake outside the lock: a loop's wake-up takes its own lock.
        for wake in observers { wake() }
    }

    /// The clock's current time.
    /// - Returns: The start time plus every advance so far.
    public func now() -> IOInstant {
        state.withLock { $0.now }
    }

    func addObserver(_ id: ObjectIdentifier, _ wake: @escaping @Sendable () -> Void) {
        state.withLock { $0.observers[id] = wake }
    }

    func removeObserver(_ id: ObjectIdentifier) {
        _ = state.withLock { $0.observers.removeValue(forKey: id) }
    }
}
