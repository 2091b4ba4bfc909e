/// Why the frame scheduler refused work. Each bound exists so a stuck or hostile peer (one that never
/// grants credit, or floods pings that each need a pong) cannot make this side queue without limit.
package enum FrameSchedulerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// More than `limit` control frames are waiting; the connection is not draining.
    case controlQueueFull(limit: Int)
    /// More than `limit` messages or writes are waiting on `channel`; the caller must wait for some to go.
    case channelQueueFull(channel: UInt32, limit: Int)
    /// Work was queued on channel 0, or after the channel's close was queued.
    case channelNotWritable(UInt32)

    /// What went wrong, for logs and error messages.
    package var description: String {
        switch self {
        case .controlQueueFull(let limit):
            "more than \(limit) control frames are waiting to be sent"
        case .channelQueueFull(let channel, let limit):
            "more than \(limit) messages or writes are waiting on channel \(channel)"
        case .channelNotWritable(let channel):
            "channel \(channel) does not accept more data (channel 0, or its close is already queued)"
        }
    }
}
