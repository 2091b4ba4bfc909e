/// Identifies a timer scheduled on an `EventLoop`, for `EventLoop.cancelTimer(_:)`.
public struct TimerID: Hashable, Sendable {
    let rawValue: UInt64
}
