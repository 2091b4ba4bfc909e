/// Puts message fragments back together: a pure state machine, one per connection.
///
/// Memory: a message's first fragment declares its length, at most ``Limits/maximumMessageLength``, and the
/// message's buffer is allocated at that size at once. That is safe because the first fragment also paid the
/// whole message's flow-control cost (``FlowController/messageCost(length:)``), which the connection returns
/// only when the application takes the message: the sum of the buffers is bounded by the receive windows.
/// ``Limits/maximumMessages`` bounds the number of partial messages.
package struct MessageReassembler: Sendable {
    /// The reassembler's bounds.
    package struct Limits: Sendable, Hashable {
        /// The most partial messages at once, over all channels.
        ///
        /// 64: our sender has at most one partial message per channel; 64 leaves room for a peer that
        /// interleaves, without letting one hold thousands of slots.
        package var maximumMessages: Int
        /// The longest message a first fragment may declare: what this side announced in its hello.
        package var maximumMessageLength: UInt64

        /// Creates limits; the defaults are 64 messages of at most 4 MiB.
        /// - Parameters:
        ///   - maximumMessages: The most partial messages.
        ///   - maximumMessageLength: The longest message.
        package init(maximumMessages: Int = 64, maximumMessageLength: UInt64 = 4 << 20) {
            self.maximumMessages = maximumMessages
            self.maximumMessageLength = maximumMessageLength
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
    package let limits: Limits
    private var partials: [Key: Partial] = [:]
    /// The sum of the declared lengths of `partials`: the memory they hold.
    package private(set) var declaredBytes: UInt64 = 0

    /// Creates an empty reassembler.
    /// - Parameter limits: The bounds to enforce.
    package init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// The number of messages started and not yet complete.
    package var partialMessageCount: Int { partials.count }

    /// Adds one fragment.
    /// - Parameters:
    ///   - fragment: The fragment, from a decoded `message` frame.
    ///   - channel: The frame's channel.
    /// - Returns: The whole message when this was its last fragment, else `nil`.
    /// - Throws: ``MessageReassemblyError``; the message in question is dropped.
    package mutating func receive(_ fragment: Frame.MessageFragment, channel: UInt32) throws(MessageReassemblyError)
        -> [UInt8]?
    {
        if let total = fragment.totalLength, fragment.isLast {
            // A message sent whole keeps its array (the decoder checked that its length matches).
            try checkNewStart(channel: channel, id: fragment.id, declared: total)
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
    package mutating func receive(
        id: UInt32, totalLength: UInt64?, isLast: Bool, _ bytes: UnsafeRawBufferPointer, channel: UInt32
    ) throws(MessageReassemblyError) -> [UInt8]? {
        let key = Key(channel: channel, id: id)
        var partial: Partial
        if let declared = totalLength {
            try checkNewStart(channel: channel, id: id, declared: declared)
            if isLast { return Array(bytes) }  // the decoder checked its length
            guard partials.count < limits.maximumMessages else {
                throw .tooMuchInFlight(messages: partials.count + 1, bytes: declaredBytes + declared)
            }
            declaredBytes += declared
            partial = Partial(declared: declared, bytes: [])
            // Paid for in flow-control credit already, so allocated once instead of grown (and copied) by doubling.
            partial.bytes.reserveCapacity(Int(declared))
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

    /// Refuses a first fragment for a message already started (and drops that message), or one that declares
    /// more than the limit.
    private mutating func checkNewStart(channel: UInt32, id: UInt32, declared: UInt64) throws(MessageReassemblyError) {
        guard declared <= limits.maximumMessageLength else {
            throw .tooLong(channel: channel, id: id, declared: declared, limit: limits.maximumMessageLength)
        }
        let key = Key(channel: channel, id: id)
        guard partials[key] == nil else {
            drop(key)
            throw .duplicateStart(channel: channel, id: id)
        }
    }

    /// Drops the partial messages of a channel that was closed or reset.
    /// - Parameter channel: The channel.
    package mutating func removeChannel(_ channel: UInt32) {
        for key in partials.keys where key.channel == channel { drop(key) }
    }

    private mutating func drop(_ key: Key) {
        if let removed = partials.removeValue(forKey: key) { declaredBytes -= removed.declared }
    }
}
