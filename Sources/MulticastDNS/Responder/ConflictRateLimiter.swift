import MultipeerIO

/// RFC 6762 section 8.1: a host that sees many conflicts in a short time (a misbehaving peer, or one that
/// claims every name we pick) waits before probing again instead of renaming as fast as the packets arrive.
struct ConflictRateLimiter {
    /// The most recent conflicts within the window, oldest first. Only whether there are `limit` of them
    /// matters, so no more are kept: a flood of conflicting packets costs no memory.
    private(set) var recent: [IOInstant] = []

    /// Notes a conflict at `now`.
    /// - Returns: how long to wait before probing again: `configuration.conflictBackoff` once
    ///   `configuration.conflictLimit` conflicts fell within `configuration.conflictWindow`, otherwise zero.
    mutating func delayAfterConflict(now: IOInstant, configuration: ResponderConfiguration) -> Duration {
        recent = recent.filter { now - $0 < configuration.conflictWindow } + [now]
        if recent.count > configuration.conflictLimit { recent.removeFirst(recent.count - configuration.conflictLimit) }
        return recent.count >= configuration.conflictLimit ? configuration.conflictBackoff : .zero
    }
}
