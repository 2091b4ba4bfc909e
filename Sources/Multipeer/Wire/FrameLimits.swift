/// The bounds the frame codec enforces, so a hostile peer meets a limit and a clear error instead of
/// unbounded memory.
package struct FrameLimits: Sendable, Hashable {
    /// The largest payload of one frame, in bytes (the 12-byte header comes on top).
    ///
    /// 64 KiB: big enough that the header costs under 0.02% of a bulk transfer and one frame fills four TLS
    /// records, small enough that a control frame or a small message queued behind a data frame waits for at
    /// most 64 KiB on the wire (about 0.5 ms at 1 Gbit/s). It also bounds the decoder's buffer.
    package var maximumPayloadLength: Int

    /// The largest message length a first fragment may declare.
    ///
    /// 1 GiB: messages are held whole in memory at the receiver (Apple's `send(_:toPeers:with:)` takes a
    /// `Data`); anything larger belongs on a resource or stream channel, which has no such limit.
    package var maximumMessageLength: UInt64

    /// The longest display name in a hello, in bytes of UTF-8.
    ///
    /// 63: Apple's `MCPeerID` limit, which is also the longest DNS label, so the name fits a Bonjour
    /// instance name unchanged. Not configurable upward in practice: peers would disagree.
    package var maximumDisplayNameLength: Int

    /// The longest fingerprint in a hello, in bytes.
    ///
    /// 64: a SHA-512 digest; today's fingerprints are SHA-256 (32 bytes).
    package var maximumFingerprintLength: Int

    /// The longest goodbye or error text, in bytes of UTF-8.
    ///
    /// 256: enough for a sentence explaining the reason; the codes carry the meaning, the text is for logs.
    package var maximumTextLength: Int

    /// The longest channel name, in bytes of UTF-8.
    ///
    /// 255: a resource name is a file name, and common file systems cap file names at 255 bytes.
    package var maximumChannelNameLength: Int

    /// The longest group-secret proof in a hello, in bytes.
    ///
    /// 64: an HMAC-SHA-512; today's proofs are HMAC-SHA-256 (32 bytes).
    package var maximumGroupProofLength = 64

    /// The limits of protocol version 1: 64 KiB payloads, 1 GiB messages, 63-byte display names, 64-byte
    /// fingerprints, 256-byte texts, 255-byte channel names.
    package static let standard = FrameLimits()

    /// Creates limits; every default is the ``standard`` value.
    /// - Parameters:
    ///   - maximumPayloadLength: The largest frame payload in bytes.
    ///   - maximumMessageLength: The largest declared message length in bytes.
    ///   - maximumDisplayNameLength: The longest display name in bytes.
    ///   - maximumFingerprintLength: The longest fingerprint in bytes.
    ///   - maximumTextLength: The longest goodbye or error text in bytes.
    ///   - maximumChannelNameLength: The longest channel name in bytes.
    package init(
        maximumPayloadLength: Int = 65_536, maximumMessageLength: UInt64 = 1 << 30,
        maximumDisplayNameLength: Int = 63, maximumFingerprintLength: Int = 64, maximumTextLength: Int = 256,
        maximumChannelNameLength: Int = 255
    ) {
        self.maximumPayloadLength = maximumPayloadLength
        self.maximumMessageLength = maximumMessageLength
        self.maximumDisplayNameLength = maximumDisplayNameLength
        self.maximumFingerprintLength = maximumFingerprintLength
        self.maximumTextLength = maximumTextLength
        self.maximumChannelNameLength = maximumChannelNameLength
    }
}
