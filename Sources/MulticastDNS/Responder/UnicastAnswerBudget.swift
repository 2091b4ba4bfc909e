import MultipeerIO

/// A token bucket for unicast answers (QU and legacy queries): at most a configured number per second, so a
/// flood of queries with spoofed sources cannot turn the responder into an amplifier aimed at a victim.
struct UnicastAnswerBudget {
    /// Tokens added per second, and the most the bucket holds.
    private let rate: Double
    private var tokens: Double
    /// When `tokens` was last brought up to date; nil before the first answer.
    private var refilledAt: IOInstant?

    /// A full bucket of `perSecond` answers.
    init(perSecond: Int) {
        rate = Double(perSecond)
        tokens = rate
    }

    /// Takes one answer's token if there is one.
    /// - Returns: whether a unicast answer may be sent at `now`.
    mutating func take(now: IOInstant) -> Bool {
        if let at = refilledAt {
            let elapsed = Double((now - at).components.seconds) + Double((now - at).components.attoseconds) / 1e18
            tokens = min(rate, tokens + elapsed * rate)
        }
        refilledAt = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
