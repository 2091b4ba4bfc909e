/// One unit of the wire protocol: a 12-byte header and a payload whose layout depends on the type.
///
/// The layouts are documented byte by byte in `docs/PROTOCOL.md` section 2. Channel numbers are those of the header;
/// connection-level frames (hello, ping, pong, goodbye, error) always travel on channel 0 and channel frames
/// never do.
public enum Frame: Hashable, Sendable {
    /// The first frame each side sends after the secure channel is up.
    case hello(Hello)
    /// Asks the peer to echo `token` in a ``pong(token:)``, to measure round-trip time and liveness.
    case ping(token: UInt64)
    /// Echoes the token of a ``ping(token:)``.
    case pong(token: UInt64)
    /// The sender is closing the connection gracefully; `text` is at most ``FrameLimits/maximumTextLength``
    /// bytes of UTF-8.
    case goodbye(reason: UInt32, text: String)
    /// The sender found a connection-level protocol error and will close; `text` is at most
    /// ``FrameLimits/maximumTextLength`` bytes of UTF-8.
    case error(code: UInt32, text: String)
    /// Opens `channel` (nonzero). `name` is empty for an unnamed channel and at most
    /// ``FrameLimits/maximumChannelNameLength`` bytes; `initialWindow` is the credit the opener grants the
    /// peer for sending on this channel.
    case channelOpen(channel: UInt32, kind: ChannelKind, name: String, initialWindow: UInt32)
    /// Bytes on a stream or resource channel; at most ``FrameLimits/maximumPayloadLength`` per frame.
    case channelData(channel: UInt32, bytes: [UInt8])
    /// The sender will send nothing more on `channel`.
    case channelClose(channel: UInt32)
    /// Aborts `channel` in both directions.
    case channelReset(channel: UInt32, code: UInt32)
    /// Grants `increment` (1 through 2^31-1) more bytes of credit on `channel`, or on the whole connection
    /// when `channel` is 0.
    case windowUpdate(channel: UInt32, increment: UInt32)
    /// One fragment of a message on a message channel.
    case message(channel: UInt32, fragment: MessageFragment)
    /// A frame of a type this implementation does not know, passed up whole so the connection can ignore it
    /// or refuse it. Its length was still checked against ``FrameLimits/maximumPayloadLength``.
    case unknown(type: FrameType, flags: UInt8, channel: UInt32, payload: [UInt8])

    /// The header's type byte for this frame.
    public var type: FrameType {
        switch self {
        case .hello: .hello
        case .ping: .ping
        case .pong: .pong
        case .goodbye: .goodbye
        case .error: .error
        case .channelOpen: .channelOpen
        case .channelData: .channelData
        case .channelClose: .channelClose
        case .channelReset: .channelReset
        case .windowUpdate: .windowUpdate
        case .message: .message
        case .unknown(let type, _, _, _): type
        }
    }

    /// The header's channel field for this frame.
    public var channel: UInt32 {
        switch self {
        case .hello, .ping, .pong, .goodbye, .error: 0
        case .channelOpen(let channel, _, _, _), .channelData(let channel, _), .channelClose(let channel),
            .channelReset(let channel, _), .windowUpdate(let channel, _), .message(let channel, _),
            .unknown(_, _, let channel, _):
            channel
        }
    }
}

extension Frame {
    /// The protocol version this implementation speaks, sent in ``Hello``.
    public static let protocolMajorVersion: UInt8 = 1
    /// The minor version: additions a major-1 peer may safely ignore.
    public static let protocolMinorVersion: UInt8 = 0
    /// The value of the header's version byte (the framing itself, not the protocol).
    public static let headerVersion: UInt8 = 1
    /// The size of the fixed frame header in bytes.
    public static let headerLength = 12

    /// The contents of a hello frame.
    public struct Hello: Hashable, Sendable {
        /// The protocol major version; a peer refuses any major version it does not speak.
        public var majorVersion: UInt8
        /// The protocol minor version; newer minors only add what older peers may ignore.
        public var minorVersion: UInt8
        /// Optional features the sender supports.
        public var capabilities: Capabilities
        /// The sender's display name: 1 through ``FrameLimits/maximumDisplayNameLength`` bytes of UTF-8.
        public var displayName: String
        /// The sender's identity fingerprint, empty when not sent; at most
        /// ``FrameLimits/maximumFingerprintLength`` bytes.
        public var fingerprint: [UInt8]
        /// The sender's group-secret proof (see ``GroupSecret``): empty when the sender has no group secret,
        /// otherwise at most ``FrameLimits/maximumGroupProofLength`` bytes. Encoded after the fingerprint only
        /// when not empty, so a hello without it has the minor-0 layout.
        public var groupProof: [UInt8]
        /// The UDP port of the sender's datagram endpoint for unreliable messages (see
        /// ``Capabilities/unreliableDatagrams``), or nil. Encoded after the group proof (whose length byte is
        /// then present even when the proof is empty).
        public var datagramPort: UInt16?

        /// Creates a hello; versions default to this implementation's.
        /// - Parameters:
        ///   - majorVersion: The protocol major version.
        ///   - minorVersion: The protocol minor version.
        ///   - capabilities: Optional features supported.
        ///   - displayName: The sender's display name.
        ///   - fingerprint: The sender's identity fingerprint, or empty.
        ///   - groupProof: The sender's group-secret proof, or empty.
        ///   - datagramPort: The sender's datagram UDP port, or nil.
        public init(
            majorVersion: UInt8 = Frame.protocolMajorVersion, minorVersion: UInt8 = Frame.protocolMinorVersion,
            capabilities: Capabilities = [], displayName: String, fingerprint: [UInt8] = [], groupProof: [UInt8] = [],
            datagramPort: UInt16? = nil
        ) {
            self.majorVersion = majorVersion
            self.minorVersion = minorVersion
            self.capabilities = capabilities
            self.displayName = displayName
            self.fingerprint = fingerprint
            self.groupProof = groupProof
            self.datagramPort = datagramPort
        }
    }

    /// Optional features announced in ``Hello``. Unknown bits are kept and must be ignored.
    public struct Capabilities: OptionSet, Hashable, Sendable {
        /// The 32 capability bits, bit 0 first.
        public let rawValue: UInt32

        /// Creates a capability set from its bits.
        /// - Parameter rawValue: The capability bits.
        public init(rawValue: UInt32) {
            self.rawValue = rawValue
        }

        /// The sender can carry unreliable messages as UDP datagrams keyed from the TLS session.
        public static let unreliableDatagrams = Capabilities(rawValue: 1 << 0)
    }

    /// What a channel carries.
    public enum ChannelKind: UInt8, Hashable, Sendable, CaseIterable {
        /// Whole messages, sent as ``Frame/message(channel:fragment:)`` fragments.
        case message = 1
        /// An ordered byte stream, sent as ``Frame/channelData(channel:bytes:)``.
        case stream = 2
        /// A file or other named resource, sent as ``Frame/channelData(channel:bytes:)``.
        case resource = 3
    }

    /// One fragment of a message. A message's fragments are sent in order with the same `id` on one channel;
    /// fragments of different messages may interleave, so a large message never holds up a small one.
    public struct MessageFragment: Hashable, Sendable {
        /// Identifies the message among those in flight on its channel.
        public var id: UInt32
        /// The whole message's length, present exactly in the first fragment.
        public var totalLength: UInt64?
        /// Whether this is the message's last fragment.
        public var isLast: Bool
        /// This fragment's bytes.
        public var bytes: [UInt8]

        /// Whether this is the message's first fragment (it carries ``totalLength``).
        public var isFirst: Bool { totalLength != nil }

        /// Creates a fragment.
        /// - Parameters:
        ///   - id: The message id.
        ///   - totalLength: The whole message's length in the first fragment, `nil` in the others.
        ///   - isLast: Whether this is the last fragment.
        ///   - bytes: The fragment's bytes.
        public init(id: UInt32, totalLength: UInt64?, isLast: Bool, bytes: [UInt8]) {
            self.id = id
            self.totalLength = totalLength
            self.isLast = isLast
            self.bytes = bytes
        }
    }

    /// Flag bits of a message frame (header byte 2).
    enum MessageFlags {
        /// The fragment is the first of its message and starts with the 8-byte total length.
        static let first: UInt8 = 0x01
        /// The fragment is the last of its message.
        static let last: UInt8 = 0x02
    }
}
