/// What the peer may still send on one channel, or on the whole connection (channel 0), and when to grant
/// it more: a pure state machine.
///
/// The invariant is `credit + buffered + pendingGrant == window`: bytes the peer may send, plus bytes
/// received but not yet consumed by the application, plus consumed bytes not yet granted back, always add
/// up to the configured window. So however slowly the application reads, it never has more than `window`
/// bytes buffered for this channel, and a peer that sends more is caught by ``received(_:)``.
///
/// Credit is granted back in batches: once at least half the window has been consumed (the
/// ``updateThreshold``), so a steady stream costs one 12-byte window update per half window instead of one
/// per frame, while the peer never runs dry if it reads the update within half a window's time.
package struct ReceiveWindow: Hashable, Sendable {
    /// The channel this window belongs to; 0 for the connection.
    package let channel: UInt32
    /// The configured window: the most bytes ever buffered.
    package let window: Int
    /// The bytes the peer may still send.
    package private(set) var credit: Int
    /// Bytes received and not yet consumed by the application.
    package private(set) var buffered: Int = 0
    /// Bytes consumed (or window not yet advertised) that have not been granted back yet.
    package private(set) var pendingGrant: Int
    /// How much pending credit is granted at once: half the window, at least 1.
    package var updateThreshold: Int { max(1, window / 2) }

    /// Creates a window.
    /// - Parameters:
    ///   - channel: The channel, or 0 for the connection.
    ///   - window: The window size (at most ``SendWindow/maximumCredit``).
    ///   - advertised: The credit the peer already assumes: the whole window when this side announced it
    ///     (in `channelOpen`), or the protocol's initial credit otherwise. The rest is granted by the first
    ///     ``takeGrant()``.
    package init(channel: UInt32, window: UInt32, advertised: UInt32) {
        precondition(window <= SendWindow.maximumCredit, "window above 2^31-1")
        precondition(advertised <= window, "the peer may not assume more credit than the window")
        self.channel = channel
        self.window = Int(window)
        self.credit = Int(advertised)
        self.pendingGrant = Int(window) - Int(advertised)
    }

    /// Accounts for `count` bytes received from the peer.
    /// - Parameter count: The flow-controlled bytes of the frame (its payload length).
    /// - Throws: ``FlowControlError/flowControlViolation(channel:received:credit:)`` if the peer had less
    ///   credit than that; nothing is accounted then.
    package mutating func received(_ count: Int) throws(FlowControlError) {
        guard count >= 0, count <= credit else {
            throw .flowControlViolation(channel: channel, received: count, credit: credit)
        }
        credit -= count
        buffered += count
    }

    /// Accounts for `count` buffered bytes the application has consumed.
    /// - Parameter count: At most ``buffered`` bytes.
    /// - Returns: The increment to send in a `windowUpdate` frame, or `nil` while less than
    ///   ``updateThreshold`` is pending.
    package mutating func consumed(_ count: Int) -> UInt32? {
        precondition(count >= 0 && count <= buffered, "consumed more than was received")
        buffered -= count
        pendingGrant += count
        return pendingGrant >= updateThreshold ? takeGrant() : nil
    }

    /// Grants all pending credit now, whatever the threshold: at channel open to advertise the rest of the
    /// window, or before the application blocks waiting for data.
    /// - Returns: The increment to send in a `windowUpdate` frame, or `nil` if nothing is pending.
    package mutating func takeGrant() -> UInt32? {
        guard pendingGrant > 0 else { return nil }
        defer {
            credit += pendingGrant
            pendingGrant = 0
        }
        return UInt32(pendingGrant)
    }
}
