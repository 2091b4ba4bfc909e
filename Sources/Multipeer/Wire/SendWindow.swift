/// The credit this side may still send on one channel, or on the whole connection (channel 0): a pure
/// state machine, as in HTTP/2 and yamux. Sending takes credit with ``reserve(upTo:)``; the peer's window
/// updates give it back with ``grant(_:)``.
package struct SendWindow: Hashable, Sendable {
    /// The most credit a window may hold: 2^31-1, so credit and increments fit in 31 bits everywhere and
    /// sums of two never overflow 32 bits.
    package static let maximumCredit: UInt32 = 0x7FFF_FFFF

    /// The channel this window belongs to; 0 for the connection.
    package let channel: UInt32
    /// The bytes that may still be sent before the peer grants more.
    package private(set) var credit: Int

    /// Creates a window.
    /// - Parameters:
    ///   - channel: The channel, or 0 for the connection.
    ///   - credit: The initial credit the peer granted (at most ``maximumCredit``).
    package init(channel: UInt32, credit: UInt32) {
        precondition(credit <= Self.maximumCredit, "initial credit above 2^31-1")
        self.channel = channel
        self.credit = Int(credit)
    }

    /// Whether nothing may be sent until the peer grants credit.
    package var isBlocked: Bool { credit == 0 }

    /// Takes up to `count` bytes of credit for sending.
    /// - Parameter count: The bytes the caller wants to send (not negative).
    /// - Returns: The bytes that may be sent now, `min(count, credit)`; 0 when blocked.
    package mutating func reserve(upTo count: Int) -> Int {
        precondition(count >= 0, "negative reservation")
        let granted = min(count, credit)
        credit -= granted
        return granted
    }

    /// Adds credit from a peer's window update.
    /// - Parameter increment: The increment from the `windowUpdate` frame.
    /// - Throws: ``FlowControlError/windowOverflow(channel:credit:increment:)`` if the credit would exceed
    ///   ``maximumCredit``; the credit is then unchanged.
    package mutating func grant(_ increment: UInt32) throws(FlowControlError) {
        guard Int(increment) <= Int(Self.maximumCredit) - credit else {
            throw .windowOverflow(channel: channel, credit: credit, increment: increment)
        }
        credit += Int(increment)
    }
}
