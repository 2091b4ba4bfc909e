/// The type byte of a frame header (byte 1). Unknown values are kept, so a decoder can report a frame type
/// from a newer peer as ``Frame/unknown(type:flags:channel:payload:)`` instead of failing.
package struct FrameType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The byte on the wire.
    package let rawValue: UInt8

    /// Creates a frame type from its wire byte.
    /// - Parameter rawValue: The type byte.
    package init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// Connection setup: protocol version, capabilities, display name, fingerprint. Channel 0.
    package static let hello = FrameType(rawValue: 0x01)
    /// A round-trip probe carrying an 8-byte token. Channel 0.
    package static let ping = FrameType(rawValue: 0x02)
    /// The answer to a ping, echoing its token. Channel 0.
    package static let pong = FrameType(rawValue: 0x03)
    /// A graceful close with a reason code and text. Channel 0.
    package static let goodbye = FrameType(rawValue: 0x04)
    /// A connection-level protocol error with a code and text. Channel 0.
    package static let error = FrameType(rawValue: 0x05)
    /// Opens a channel of a kind, with an optional name and the opener's receive window.
    package static let channelOpen = FrameType(rawValue: 0x10)
    /// Bytes on a stream or resource channel.
    package static let channelData = FrameType(rawValue: 0x11)
    /// The sender will send nothing more on the channel (a half close, like TCP FIN).
    package static let channelClose = FrameType(rawValue: 0x12)
    /// Aborts a channel in both directions with an error code.
    package static let channelReset = FrameType(rawValue: 0x13)
    /// Grants flow-control credit on a channel, or on the connection when the channel is 0.
    package static let windowUpdate = FrameType(rawValue: 0x14)
    /// One fragment of a message on a message channel.
    package static let message = FrameType(rawValue: 0x20)
    /// The dialer's verification-code nonce, after the acceptor's hello. Channel 0.
    package static let codeReveal = FrameType(rawValue: 0x06)
    /// A session-layer control message. Channel 0.
    package static let session = FrameType(rawValue: 0x30)

    /// Every type this implementation understands.
    package static let known: [FrameType] = [
        .hello, .ping, .pong, .goodbye, .error, .channelOpen, .channelData, .channelClose, .channelReset,
        .windowUpdate, .message, .codeReveal, .session,
    ]

    /// Whether frames of this type belong to the connection (channel field 0) rather than a channel.
    /// `windowUpdate` is neither: channel 0 means the connection, any other value that channel.
    var isConnectionLevel: Bool {
        self == .hello || self == .ping || self == .pong || self == .goodbye || self == .error
            || self == .codeReveal || self == .session
    }

    /// The name used in docs and errors, or the hex byte for unknown types.
    package var description: String {
        switch self {
        case .hello: "hello"
        case .ping: "ping"
        case .pong: "pong"
        case .goodbye: "goodbye"
        case .error: "error"
        case .channelOpen: "channelOpen"
        case .channelData: "channelData"
        case .channelClose: "channelClose"
        case .channelReset: "channelReset"
        case .windowUpdate: "windowUpdate"
        case .message: "message"
        case .codeReveal: "codeReveal"
        case .session: "session"
        default: "type 0x" + String(rawValue, radix: 16)
        }
    }
}
