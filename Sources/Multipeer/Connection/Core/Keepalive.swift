internal import MultipeerIO

/// Liveness of an established connection: when the peer was last heard from, when to ping it, when to give up,
/// and the pings still waiting for their pong. Time comes in as arguments, so it runs on any clock.
struct Keepalive {
    /// The most pings remembered at once; a peer that answers none is caught by the silence timeout anyway.
    static let maximumOutstanding = 16

    let interval: Duration
    let silenceTimeout: Duration
    /// When anything last arrived from the peer.
    private(set) var lastReceive: IOInstant
    private var lastPing: IOInstant?
    private var pings: [UInt64: IOInstant] = [:]
    private var nextToken: UInt64 = 1
    /// The most recent round-trip time a ping measured.
    private(set) var lastRoundTrip: Duration?

    init(interval: Duration, silenceTimeout: Duration, now: IOInstant) {
        self.interval = interval
        self.silenceTimeout = silenceTimeout
        lastReceive = now
    }

    /// Something arrived from the peer.
    mutating func heard(at now: IOInstant) {
        lastReceive = now
    }

    /// When the next ping is due.
    var pingDue: IOInstant { max(lastReceive, lastPing ?? lastReceive) + interval }

    /// The earlier of the next ping and the silence deadline.
    var nextDeadline: IOInstant { min(lastReceive + silenceTimeout, pingDue) }

    /// Whether nothing arrived for the silence timeout.
    func isSilent(at now: IOInstant) -> Bool {
        now - lastReceive >= silenceTimeout
    }

    /// Starts a ping sent at `now`.
    /// - Returns: Its token, and the token of the oldest ping forgotten to make room, if any.
    mutating func startPing(at now: IOInstant) -> (token: UInt64, abandoned: UInt64?) {
        let token = nextToken
        nextToken &+= 1
        var abandoned: UInt64?
        if pings.count >= Self.maximumOutstanding, let oldest = pings.min(by: { $0.value < $1.value })?.key {
            pings[oldest] = nil
            abandoned = oldest
        }
        pings[token] = now
        lastPing = now
        return (token, abandoned)
    }

    /// A pong arrived; returns the round trip of its ping, or nil for a token not (or no longer) waiting.
    mutating func pong(_ token: UInt64, at now: IOInstant) -> Duration? {
        guard let sent = pings.removeValue(forKey: token) else { return nil }
        lastRoundTrip = now - sent
        return now - sent
    }
}
