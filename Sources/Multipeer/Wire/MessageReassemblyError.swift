/// Why received message fragments could not be put together. Each is a protocol error by the peer.
package enum MessageReassemblyError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A fragment without FIRST arrived for a message that was never started.
    case fragmentWithoutStart(channel: UInt32, id: UInt32)
    /// A FIRST fragment arrived for a message id still being received on that channel.
    case duplicateStart(channel: UInt32, id: UInt32)
    /// The fragments of a message added up to `received` bytes where the first declared `declared`.
    case lengthMismatch(channel: UInt32, id: UInt32, declared: UInt64, received: UInt64)
    /// Starting this message would exceed the partial messages allowed at once.
    case tooMuchInFlight(messages: Int, bytes: UInt64)
    /// A first fragment declared a message longer than this side accepts (and announced in its hello).
    case tooLong(channel: UInt32, id: UInt32, declared: UInt64, limit: UInt64)

    /// What went wrong, for logs and error messages.
    package var description: String {
        switch self {
        case .fragmentWithoutStart(let channel, let id):
            "fragment of message \(id) on channel \(channel) arrived before its first fragment"
        case .duplicateStart(let channel, let id):
            "message \(id) on channel \(channel) was started again before it was complete"
        case .lengthMismatch(let channel, let id, let declared, let received):
            "message \(id) on channel \(channel) declared \(declared) bytes but its fragments carry \(received)"
        case .tooMuchInFlight(let messages, let bytes):
            "peer has too many partial messages in flight (\(messages) messages, \(bytes) bytes declared)"
        case .tooLong(let channel, let id, let declared, let limit):
            "message \(id) on channel \(channel) declares \(declared) bytes; this side accepts at most \(limit), "
                + "as its hello announced"
        }
    }
}
