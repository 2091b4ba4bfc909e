/// Why received bytes were rejected as frames. Every case is fatal for the connection: after one, the
/// decoder's position in the stream is lost, and ``FrameDecoder/next()`` keeps throwing it.
package enum FrameDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A header declared a payload longer than ``FrameLimits/maximumPayloadLength``; detected from the
    /// header alone, before any of the payload is buffered.
    case payloadTooLarge(length: UInt32, limit: Int)
    /// The header's version byte (byte 0) is not one this implementation frames.
    case unknownVersion(UInt8)
    /// A hello announced a protocol major version this implementation does not speak.
    case unsupportedVersion(major: UInt8, minor: UInt8)
    /// The header's reserved byte (byte 3) is not zero.
    case reservedBitsSet(UInt8)
    /// A frame of `type` carried flag bits that type does not define.
    case unknownFlags(type: FrameType, flags: UInt8)
    /// A connection-level frame arrived on a nonzero channel, or a channel frame on channel 0.
    case unexpectedChannel(type: FrameType, channel: UInt32)
    /// A field of a `type` frame ran past the end of its payload: `needed` more bytes were required.
    case truncated(type: FrameType, needed: Int)
    /// A text or byte field of a `type` frame was longer than its limit (or empty where it must not be).
    case fieldLength(type: FrameType, field: String, length: Int, limit: Int)
    /// A text field of a `type` frame was not valid UTF-8.
    case invalidUTF8(type: FrameType, field: String)
    /// A first message fragment declared a length above ``FrameLimits/maximumMessageLength``.
    case messageTooLarge(length: UInt64, limit: UInt64)
    /// A `type` frame broke a rule of its payload layout.
    case malformed(type: FrameType, reason: String)
    /// The byte stream ended with `buffered` bytes of an incomplete frame (see ``FrameDecoder/finish()``).
    case truncatedStream(buffered: Int)

    /// What went wrong, for logs and error messages.
    package var description: String {
        switch self {
        case .payloadTooLarge(let length, let limit):
            "frame declares a \(length)-byte payload; at most \(limit) bytes are accepted"
        case .unknownVersion(let version):
            "frame header version \(version) is not supported (expected \(Frame.headerVersion))"
        case .unsupportedVersion(let major, let minor):
            "peer speaks protocol version \(major).\(minor); only major version \(Frame.protocolMajorVersion) "
                + "is supported"
        case .reservedBitsSet(let value):
            "frame header reserved byte is \(value); it must be 0"
        case .unknownFlags(let type, let flags):
            "\(type) frame has undefined flag bits set (flags 0x\(String(flags, radix: 16)))"
        case .unexpectedChannel(let type, let channel):
            type.isConnectionLevel
                ? "\(type) frame must be sent on channel 0, not channel \(channel)"
                : "\(type) frame must be sent on a nonzero channel"
        case .truncated(let type, let needed):
            "\(type) frame payload ends \(needed) byte(s) before its fields do"
        case .fieldLength(let type, let field, let length, let limit):
            length == 0
                ? "\(type) frame \(field) is empty"
                : "\(type) frame \(field) is \(length) bytes; at most \(limit) are accepted"
        case .invalidUTF8(let type, let field):
            "\(type) frame \(field) is not valid UTF-8"
        case .messageTooLarge(let length, let limit):
            "message declares \(length) bytes; at most \(limit) are accepted"
        case .malformed(let type, let reason):
            "malformed \(type) frame: \(reason)"
        case .truncatedStream(let buffered):
            "connection ended inside a frame (\(buffered) byte(s) of it received)"
        }
    }
}
