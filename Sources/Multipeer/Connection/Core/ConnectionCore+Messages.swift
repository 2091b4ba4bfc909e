/// Received messages and their flow-control credit.
///
/// A message's first fragment pays its whole cost (``FlowController/messageCost(length:)``, the length plus a
/// fixed overhead, so empty messages are not free); the later fragments travel on that credit. The credit comes
/// back to the peer only when the application takes the message (``messagesTaken(_:)``), so unfinished messages
/// and messages the application has not read yet together stay within the receive windows.
extension ConnectionCore {
    /// One message fragment, lent from the decoder's buffer or a decoded frame.
    func receiveFragment(
        channel: UInt32, id: UInt32, totalLength: UInt64?, isLast: Bool, _ bytes: UnsafeRawBufferPointer
    ) throws(ConnectionError) {
        if let total = totalLength {
            guard total <= UInt64(configuration.maximumMessageLength) else {
                throw .announcedLimitExceeded(declared: total, limit: configuration.maximumMessageLength)
            }
            let cost = FlowController.messageCost(length: Int(total))
            guard try acceptFlowControlled(channel: channel, count: cost, kind: .message) else { return }
        } else {
            // Later fragments are paid for; they only need a channel that still takes messages.
            guard let state = channels[channel] else {
                if channels.isForgotten(channel) { return }
                throw .sentBeforeOpen(channel)
            }
            guard state.remoteOpen else { throw .sentAfterClose(channel) }
            guard state.kind == .message else { throw .wrongChannelKind(channel, sent: .message, open: state.kind) }
        }
        let message: [UInt8]?
        do {
            message = try reassembler.receive(id: id, totalLength: totalLength, isLast: isLast, bytes, channel: channel)
        } catch {
            throw .badFragment(error)
        }
        if let message {
            delivered.delivered(channel: channel, cost: FlowController.messageCost(length: message.count))
            events.append(.message(channel: channel, bytes: message))
        }
    }

    /// The application took the next `count` delivered messages: their credit goes back to the peer (in window
    /// updates once enough is pending).
    func messagesTaken(_ count: Int) {
        for (channel, cost) in delivered.taken(count) {
            let frames =
                channels[channel] != nil
                ? flow.consumed(channel: channel, count: cost) : flow.consumedAfterClose(cost)
            for frame in frames { try? enqueueControl(frame) }
        }
    }

    /// Messages delivered to the application and not taken yet.
    var unreadMessageCount: Int { delivered.count }

    /// What this side holds for the peer's data: the buffers of unfinished messages, the cost of messages
    /// delivered and not taken, and the memory of stream buffers. The windows bound it.
    var receiveHeldBytes: Int {
        Int(reassembler.declaredBytes) + delivered.totalHeld
            + channels.entries.values.reduce(0) { $0 + ($1.inbound?.capacity ?? 0) }
    }
}
