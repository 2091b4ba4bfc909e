/// Puts message fragments back together: a pure state machine, one per connection.
///
/// Memory is bounded by what the first fragments *declare*: a message is admitted only if the declared
/// lengths of all partial messages, its own included, stay within ``Limits/maximumBufferedBytes``, and the
/// bytes are appended as they arrive (never allocated from the declaration), so a peer that declares 1 GiB
/// and sends nothing costs nothing but a slot.
///
/// Flow control: the bytes of a fragment count as consumed (see ``FlowController/consumed(channel:count:)``)
/// as soon as the fragment is handed to the reassembler; otherwise a message larger than the channel window
/// could never complete. Its memory bound is this type's limits instead.
public struct MessageReassembler: Sendable {
    /// The reassembler's bounds.
    public struct Limits: Sendable, Hashable {
        /// The most partial messages at once, over all channels.
        ///
        /// 64: our sender has at most one partial message per channel; 64 leaves room for a peer that
        /// interleaves, without letting one hold thousands of slots.
        public var maximumMessages: Int
        /// The most bytes that partial messages may declare in total.
        ///
        /// 1 GiB plus 64 MiB: one maximum-size message and a margin for small ones alongside it.
        public var maximumBufferedBytes: UInt64

        /// Creates limits; the defaults are 64 messages and 1 GiB + 64 MiB.
        /// - Parameters:
        ///   - maximumMessages: The most partial messages.
        ///   - maximumBufferedBytes: The most bytes declared by partial messages.
        public init(maximumMessages: Int = 64, maximumBufferedBytes: UInt64 = (1 << 30) + (64 << 20)) {
            self.maximumMessages = maximumMessages
            self.maximumBufferedBytes = maximumBufferedBytes
        }
    }

    private struct Key: Hashable, Sendable {
        var channel: UInt32
        var id: UInt32
    }

    private struct Partial: Sendable {
        var declared: UInt64
        var bytes: [UInt8]
    }

    /// The bounds in force.
    public let limits: Limits
    private var partials: [Key: Partial] = [:]
    /// The sum of the declared lengths of `partials`.
    public private(set) var declaredBytes: UInt64 = 0

    /// Creates an empty reassembler.
    /// - Parameter limits: The bounds to enforce.
    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// The number of messages started and not yet complete.
    public var partialMessageCount: Int { partials.count }

    /// Adds one fragment.
    /// - Parameters:
    ///   - fragment: The fragment, from a decoded `message` frame.
    ///   - channel: The frame's channel.
    /// - Returns: The whole message when this was its last fragment, else `nil`.
    /// - Throws: ``MessageReassemblyError``; the message in question is dropped.
    public mutating func receive(_ fragment: Frame.MessageFragment, channel: UInt32) throws(MessageReassemblyError)
        -> [UInt8]?
    {
        if fragment.isFirst && fragment.isLast {
            // A message sent whole keeps its array (the decoder checked its length).
            try checkNewStart(channel: channel, id: fragment.id)
            return fragment.bytes
        }
        return try fragment.bytes.withUnsafeBytesTyped { bytes throws(MessageReassemblyError) in
            try receive(
                id: fragment.id, totalLength: fragment.totalLength, isLast: fragment.isLast, bytes, channel: channel)
        }
    }

    /// Adds one fragment whose data is lent (the connection passes it straight from its receive buffer).
    /// - Parameters:
    ///   - id: The message id.
    ///   - totalLength: The message's length, on its first fragment only.
    ///   - isLast: Whether this is the message's last fragment.
    ///   - bytes: The fragment's data, copied before this returns.
    ///   - channel: The frame's channel.
    /// - Returns: The whole message when this was its last fragment, else `nil`.
    /// - Throws: ``MessageReassemblyError``; the message in question is dropped.
    public mutating func receive(
        id: UInt32, totalLength: UInt64?, isLast: Bool, _ bytes: UnsafeRawBufferPointer, channel: UInt32
    ) throws(MessageReassemblyError) -> [UInt8]? {
        let key = Key(channel: channel, id: id)
        var partial: Partial
        if let declared = totalLength {
            try checkNewStart(channel: channel, id: id)
            if isLast { return Array(bytes) }  // the decoder checked its length
            guard partials.count < limits.maximumMessages, declared <= limits.maximumBufferedBytes - declaredBytes
            else {
                throw .tooMuchInFlight(messages: partials.count + 1, bytes: declaredBytes + declared)
            }
            declaredBytes += declared
            partial = Partial(declared: declared, bytes: [])
        } else {
            guard let existing = partials[key] else { throw .fragmentWithoutStart(channel: channel, id: id) }
            partial = existing
        }
        partials[key] = nil  // so appending does not copy the buffer
        let received = UInt64(partial.bytes.count) + UInt64(bytes.count)
        guard received <= partial.declared, !isLast || received == partial.declared else {
            declaredBytes -= partial.declared
            throw .lengthMismatch(channel: channel, id: id, declared: partial.declared, received: received)
        }
        partial.bytes.append(contentsOf: bytes)
        if isLast {
            declaredBytes -= partial.declared
            return partial.bytes
        }
        partials[key] = partial
        return nil
    }

    /// Refuses a first fragment for a message already started (and drops that message).
    private mutating func checkNewStart(channel: UInt32, id: UInt32) throws(MessageReassemblyError) {
        let key = Key(channel: channel, id: id)
        guard partials[key] == nil else {
            drop(key)
            throw .duplicateStart(channel: channel, id: id)
        }
    }

    /// Drops the partial messages of a channel that was closed or reset.
    /// - Parameter channel: The channel.
    public mutating func removeChannel(_ channel: UInt32) {
        for key in partials.keys where key.channel == channel { drop(key) }
    }

    private mutating func drop(_ key: Key) {
        if let removed = partials.removeValue(forKey: key) { declaredBytes -= removed.declared }
    }
}
