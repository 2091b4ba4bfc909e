/// One unit of the wire protocol: a 12-byte header and a payload whose layout depends on the type.
///
/// The layouts are documented byte by byte in `docs/PROTOCOL.md` section 2. Channel numbers are those of the header;
/// connection-level frames (hello, ping, pong, goodbye, error) always travel on channel 0 and channel frames
/// never do.
package enum Frame: Hashable, Sendable {
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
    /// The dialer's verification-code nonce, revealed after the acceptor's hello (whose nonce it could not know
    /// when it committed to this one in its own hello): exactly ``Hello/codeNonceLength`` bytes.
    case codeReveal(nonce: [UInt8])
    /// One of the session layer's control messages: invitations, answers, membership. Sent ahead of data,
    /// like control frames, and never flow controlled (their number and size are bounded instead).
    case session(SessionMessage)
    /// A frame of a type this implementation does not know, passed up whole so the connection can ignore it
    /// or refuse it. Its length was still checked against ``FrameLimits/maximumPayloadLength``.
    case unknown(type: FrameType, flags: UInt8, channel: UInt32, payload: [UInt8])

    /// The header's type byte for this frame.
    package var type: FrameType {
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
        case .codeReveal: .codeReveal
        case .session: .session
        case .unknown(let type, _, _, _): type
        }
    }

    /// The header's channel field for this frame.
    package var channel: UInt32 {
        switch self {
        case .hello, .ping, .pong, .goodbye, .error, .codeReveal, .session: 0
        case .channelOpen(let channel, _, _, _), .channelData(let channel, _), .channelClose(let channel),
            .channelReset(let channel, _), .windowUpdate(let channel, _), .message(let channel, _),
            .unknown(_, _, let channel, _):
            channel
        }
    }
}

extension Frame {
    /// The protocol version this implementation speaks, sent in ``Hello``.
    package static let protocolMajorVersion: UInt8 = 1
    /// The minor version: additions a major-1 peer may safely ignore.
    package static let protocolMinorVersion: UInt8 = 0
    /// The value of the header's version byte (the framing itself, not the protocol).
    package static let headerVersion: UInt8 = 1
    /// The size of the fixed frame header in bytes.
    package static let headerLength = 12

    /// The contents of a hello frame.
    package struct Hello: Hashable, Sendable {
        /// The length of a verification-code commitment and of a verification-code nonce.
        package static let codeNonceLength = 32

        /// The protocol major version; a peer refuses any major version it does not speak.
        package var majorVersion: UInt8
        /// The protocol minor version; newer minors only add what older peers may ignore.
        package var minorVersion: UInt8
        /// Optional features the sender supports.
        package var capabilities: Capabilities
        /// The sender's display name: 1 through ``FrameLimits/maximumDisplayNameLength`` bytes of UTF-8.
        package var displayName: String
        /// The sender's identity fingerprint, empty when not sent; at most
        /// ``FrameLimits/maximumFingerprintLength`` bytes.
        package var fingerprint: [UInt8]
        /// The sender's group-secret proof (see ``GroupSecret``), or empty; at most
        /// ``FrameLimits/maximumGroupProofLength`` bytes.
        package var groupProof: [UInt8]
        /// The UDP port of the sender's datagram endpoint for unreliable messages (see
        /// ``Capabilities/unreliableDatagrams``), or nil.
        package var datagramPort: UInt16?
        /// The dialer's commitment to its verification-code nonce (SHA-256 of it), or empty.
        package var codeCommitment: [UInt8]
        /// The acceptor's verification-code nonce, or empty.
        package var codeNonce: [UInt8]
        /// The longest message the sender accepts, or nil when not announced.
        package var maximumMessageLength: UInt32?

        /// Creates a hello; versions default to this implementation's.
        package init(
            majorVersion: UInt8 = Frame.protocolMajorVersion, minorVersion: UInt8 = Frame.protocolMinorVersion,
            capabilities: Capabilities = [], displayName: String, fingerprint: [UInt8] = [], groupProof: [UInt8] = [],
            datagramPort: UInt16? = nil, codeCommitment: [UInt8] = [], codeNonce: [UInt8] = [],
            maximumMessageLength: UInt32? = nil
        ) {
            self.majorVersion = majorVersion
            self.minorVersion = minorVersion
            self.capabilities = capabilities
            self.displayName = displayName
            self.fingerprint = fingerprint
            self.groupProof = groupProof
            self.datagramPort = datagramPort
            self.codeCommitment = codeCommitment
            self.codeNonce = codeNonce
            self.maximumMessageLength = maximumMessageLength
        }
    }

    /// The tags of the optional fields that follow a hello's fixed part, each as tag (1 byte), length (1 byte)
    /// and value; a receiver skips tags it does not know, so later minor versions can add fields.
    package enum HelloField: UInt8, CaseIterable, Sendable {
        /// ``Hello/groupProof``: 1 through 64 bytes.
        case groupProof = 1
        /// ``Hello/datagramPort``: 2 bytes.
        case datagramPort = 2
        /// ``Hello/codeCommitment``: 32 bytes.
        case codeCommitment = 3
        /// ``Hello/codeNonce``: 32 bytes.
        case codeNonce = 4
        /// ``Hello/maximumMessageLength``: 4 bytes.
        case maximumMessageLength = 5
    }

    /// Optional features announced in ``Hello``. Unknown bits are kept and must be ignored.
    package struct Capabilities: OptionSet, Hashable, Sendable {
        /// The 32 capability bits, bit 0 first.
        package let rawValue: UInt32

        /// Creates a capability set from its bits.
        /// - Parameter rawValue: The capability bits.
        package init(rawValue: UInt32) {
            self.rawValue = rawValue
        }

        /// The sender can carry unreliable messages as UDP datagrams keyed from the TLS session.
        package static let unreliableDatagrams = Capabilities(rawValue: 1 << 0)
    }

    /// What a channel carries.
    package enum ChannelKind: UInt8, Hashable, Sendable, CaseIterable {
        /// Whole messages, sent as ``Frame/message(channel:fragment:)`` fragments.
        case message = 1
        /// An ordered byte stream, sent as ``Frame/channelData(channel:bytes:)``.
        case stream = 2
        /// A file or other named resource, sent as ``Frame/channelData(channel:bytes:)``.
        case resource = 3
    }

    /// One fragment of a message. A message's fragments are sent in order with the same `id` on one channel;
    /// fragments of different messages may interleave, so a large message never holds up a small one.
    package struct MessageFragment: Hashable, Sendable {
        /// Identifies the message among those in flight on its channel.
        package var id: UInt32
        /// The whole message's length, present exactly in the first fragment.
        package var totalLength: UInt64?
        /// Whether this is the message's last fragment.
        package var isLast: Bool
        /// This fragment's bytes.
        package var bytes: [UInt8]

        /// Whether this is the message's first fragment (it carries ``totalLength``).
        package var isFirst: Bool { totalLength != nil }

        /// Creates a fragment.
        /// - Parameters:
        ///   - id: The message id.
        ///   - totalLength: The whole message's length in the first fragment, `nil` in the others.
        ///   - isLast: Whether this is the last fragment.
        ///   - bytes: The fragment's bytes.
        package init(id: UInt32, totalLength: UInt64?, isLast: Bool, bytes: [UInt8]) {
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
