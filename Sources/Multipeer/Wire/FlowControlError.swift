/// Why flow-control accounting failed. Each case is a protocol error by the peer (or, for a local window,
/// a bug in the caller) and closes the connection or resets the channel.
package enum FlowControlError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The peer sent `received` bytes on `channel` (0 = the connection) with only `credit` granted.
    case flowControlViolation(channel: UInt32, received: Int, credit: Int)
    /// A window update of `increment` on `channel` would raise the credit above 2^31-1.
    case windowOverflow(channel: UInt32, credit: Int, increment: UInt32)
    /// A frame referred to a channel the flow controller does not know.
    case unknownChannel(UInt32)
    /// A channel was opened twice, or more channels were opened than the configuration allows.
    case channelRefused(channel: UInt32, reason: String)

    /// What went wrong, for logs and error messages.
    package var description: String {
        switch self {
        case .flowControlViolation(let channel, let received, let credit):
            "peer sent \(received) byte(s) on \(Self.name(channel)) with only \(credit) byte(s) of credit"
        case .windowOverflow(let channel, let credit, let increment):
            "window update of \(increment) on \(Self.name(channel)) would raise credit \(credit) above 2^31-1"
        case .unknownChannel(let channel):
            "flow control has no channel \(channel)"
        case .channelRefused(let channel, let reason):
            "cannot open channel \(channel): \(reason)"
        }
    }

    private static func name(_ channel: UInt32) -> String {
        channel == 0 ? "the connection" : "channel \(channel)"
    }
}
