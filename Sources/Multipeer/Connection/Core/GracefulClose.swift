internal import MultipeerIO

/// The state of an ending connection: whether a graceful close was asked for, the goodbyes each way, the
/// deadline for the peer's answer, and the reason to report.
struct GracefulClose {
    /// The application asked to close: new sends are refused, queued data still goes out before the goodbye.
    private(set) var isRequested = false
    /// Past this the connection closes whether or not the peer answered.
    private(set) var deadline: IOInstant?
    /// The goodbye (or the answer to the peer's) has been encoded: nothing follows it.
    var goodbyeSent = false
    /// The peer's goodbye, once it arrived.
    var goodbyeReceived: (code: UInt32, text: String)?
    /// The reason the connection ended or is ending.
    var reason: ConnectionError?
    /// The goodbye to send once everything queued is out.
    private(set) var pendingGoodbye: (code: UInt32, text: String)?
    /// While true, the goodbye waits: the owner still has accepted messages to hand over.
    private(set) var holdGoodbye: () -> Bool = { false }

    /// Starts a graceful close at `now`, ending at the latest after `timeout`.
    mutating func request(
        code: UInt32, text: String, now: IOInstant, timeout: Duration, holdGoodbye: @escaping () -> Bool
    ) {
        isRequested = true
        reason = .closedLocally(text)
        deadline = now + timeout
        pendingGoodbye = (code, text)
        self.holdGoodbye = holdGoodbye
    }

    /// The goodbye to encode now, if the close is requested, not sent yet, and nothing holds it.
    func goodbyeDue(nothingQueued: Bool) -> (code: UInt32, text: String)? {
        guard isRequested, !goodbyeSent, nothingQueued, !holdGoodbye() else { return nil }
        return pendingGoodbye
    }
}
