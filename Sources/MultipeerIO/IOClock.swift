/// A source of the current time for event-loop timers; injected so tests can drive time by hand.
public protocol IOClock: Sendable {
    /// The current instant.
    /// - Returns: The clock's current time.
    func now() -> IOInstant
}
