/// Why a ``Frame`` could not be encoded: it breaks a rule that the peer's decoder would enforce, so it is
/// refused before it reaches the wire.
package enum FrameEncodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The payload would exceed ``FrameLimits/maximumPayloadLength``.
    case payloadTooLarge(length: Int, limit: Int)
    /// A connection-level frame names a nonzero channel, or a channel frame names channel 0.
    case unexpectedChannel(type: FrameType, channel: UInt32)
    /// A text or byte field is longer than its limit, or empty where it must not be.
    case fieldLength(type: FrameType, field: String, length: Int, limit: Int)
    /// A field has a value its frame type does not allow.
    case invalidField(type: FrameType, reason: String)

    /// What went wrong, for logs and error messages.
    package var description: String {
        switch self {
        case .payloadTooLarge(let length, let limit):
            "frame payload would be \(length) bytes; at most \(limit) are allowed"
        case .unexpectedChannel(let type, let channel):
            type.isConnectionLevel
                ? "\(type) frame must use channel 0, not channel \(channel)"
                : "\(type) frame must use a nonzero channel"
        case .fieldLength(let type, let field, let length, let limit):
            length == 0
                ? "\(type) frame \(field) must not be empty"
                : "\(type) frame \(field) is \(length) bytes; at most \(limit) are allowed"
        case .invalidField(let type, let reason):
            "invalid \(type) frame: \(reason)"
        }
    }
}
