/// One control message of the session layer (invitations, answers, membership, introductions), carried by a
/// connection in a `session` frame: typed, ordered among themselves, sent ahead of bulk data like control
/// frames, and bounded in size and number instead of flow controlled.
///
/// The connection does not interpret `kind` or `body`. A receiver that does not know a kind ignores the
/// message unless ``isCritical`` is set, and closes the connection if it is: a peer of a newer minor version
/// marks what an older peer may safely ignore.
package struct SessionMessage: Hashable, Sendable {
    /// The largest body, in bytes: the frame payload limit less the 2-byte kind.
    ///
    /// 16 KiB: invitations with their context data, answers and membership lists fit easily (the session layer
    /// bounds its own fields further); a limit well below the frame's keeps a queue of them small.
    package static let maximumBodyLength = 16_384

    /// What the message is, as the session layer numbers its message types.
    package var kind: UInt16
    /// Whether a receiver that does not know `kind` must refuse it (close the connection) rather than ignore it.
    package var isCritical: Bool
    /// The message's fields, encoded by the session layer; at most ``maximumBodyLength`` bytes.
    package var body: [UInt8]

    /// Creates a message.
    /// - Parameters:
    ///   - kind: The session layer's message type.
    ///   - isCritical: Whether a receiver that does not know `kind` must refuse it.
    ///   - body: The encoded fields, at most ``maximumBodyLength`` bytes.
    package init(kind: UInt16, isCritical: Bool = true, body: [UInt8]) {
        self.kind = kind
        self.isCritical = isCritical
        self.body = body
    }

    /// Bytes the message counts against a connection's bounds on queued session messages: its body plus a
    /// fixed charge for the queue entry, so empty messages are not free.
    var charge: Int { body.count + 64 }

    /// The flag bit of a `session` frame header that marks a critical message.
    static let criticalFlag: UInt8 = 0x01
}
