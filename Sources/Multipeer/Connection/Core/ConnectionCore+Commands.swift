/// What the application (through the driver) asks of an established connection.
extension ConnectionCore {
    /// Whether messages may still be queued: established, or closing before the goodbye went out (messages the
    /// application handed over before the close still go out).
    private var acceptsMessages: Bool { phase == .established || (phase == .closing && !ending.goodbyeSent) }

    /// Opens a channel for sending; returns its number.
    func openChannel(kind: Frame.ChannelKind, name: String) throws(ConnectionError) -> UInt32 {
        guard phase == .established else { throw notOpen() }
        guard let channel = channels.availableLocal else { throw .channelNumbersUsedUp() }
        let window: UInt32
        do {
            window = try flow.openLocalChannel(channel)
        } catch {
            throw .cannotOpenChannel(error)
        }
        // A message channel only carries this side's messages; stream channels are two-way.
        channels.openedLocal(
            ChannelTable.Entry(kind: kind, isLocal: true, remoteOpen: kind != .message, inbound: makeInbound(kind)))
        try enqueueControl(.channelOpen(channel: channel, kind: kind, name: name, initialWindow: window))
        return channel
    }

    /// The longest message the peer accepts (from its hello).
    var peerMaximumMessageLength: Int { peer?.maximumMessageLength ?? 0 }

    /// Throws unless the peer accepts a message of `length` bytes.
    private func checkMessageLength(_ length: Int) throws(ConnectionError) {
        guard length <= peerMaximumMessageLength else {
            throw .messageTooLarge(length: length, limit: peerMaximumMessageLength)
        }
    }

    /// Queues a whole message on `channel` (the default message channel when 0).
    func sendMessage(_ bytes: [UInt8], channel: UInt32 = 0) throws(ConnectionError) {
        guard acceptsMessages else { throw notOpen() }
        try checkMessageLength(bytes.count)
        let channel = channel == 0 ? defaultMessageChannel : channel
        try checkWritable(channel)
        do {
            try scheduler.enqueueMessage(bytes, channel: channel)
        } catch {
            throw .schedulerRefused(error)
        }
        queuedBytes += bytes.count
    }

    /// Queues messages on the default message channel, in order, all or none (the batch must fit in
    /// ``queueRoom(channel:)``): ``sendMessage(_:channel:)`` for many messages at the cost of one.
    func sendMessages(_ messages: consuming [OutboundMessage]) throws(ConnectionError) {
        guard acceptsMessages else { throw notOpen() }
        var total = 0
        for index in messages.indices {
            let count = messages[index].count
            try checkMessageLength(count)
            total += count
        }
        try checkWritable(defaultMessageChannel)
        do {
            try scheduler.enqueueMessages(consume messages, channel: defaultMessageChannel)
        } catch {
            throw .schedulerRefused(error)
        }
        queuedBytes += total
    }

    /// Queues a session-layer control message, ahead of data.
    func sendSessionMessage(_ message: SessionMessage) throws(ConnectionError) {
        guard acceptsMessages else { throw notOpen() }
        guard message.body.count <= SessionMessage.maximumBodyLength else {
            throw .sessionMessageTooLarge(message.body.count)
        }
        try enqueueControl(.session(message))
    }

    /// Queues stream bytes on `channel`.
    func write(_ bytes: [UInt8], channel: UInt32) throws(ConnectionError) {
        guard phase == .established else { throw notOpen() }
        try checkWritable(channel)
        do {
            try scheduler.enqueueData(bytes, channel: channel)
        } catch {
            throw .schedulerRefused(error)
        }
        queuedBytes += bytes.count
    }

    /// Whether `channel` can take another queued item right now.
    func canQueue(channel: UInt32) -> Bool {
        queueRoom(channel: channel) > 0
    }

    /// How many more items `channel` (0: the default message channel) can take right now.
    func queueRoom(channel: UInt32) -> Int {
        guard acceptsMessages else { return 0 }
        return scheduler.queueRoom(channel: channel == 0 ? defaultMessageChannel : channel)
    }

    /// Half-closes `channel`: the peer sees the end after everything queued.
    func finishChannel(_ channel: UInt32) throws(ConnectionError) {
        guard phase == .established else { throw notOpen() }
        try checkWritable(channel)
        do {
            try scheduler.enqueueClose(channel: channel)
        } catch {
            throw .schedulerRefused(error)
        }
    }

    /// Aborts `channel` both ways.
    func resetChannel(_ channel: UInt32, code: UInt32) {
        guard phase == .established, channels[channel] != nil else { return }
        forgetChannel(channel, discarding: .streamResetLocally())
        try? enqueueControl(.channelReset(channel: channel, code: code))
    }

    /// The application took `count` bytes of stream data from `channel`.
    func streamConsumed(channel: UInt32, count: Int) {
        guard let state = channels[channel] else { return }
        for frame in flow.consumed(channel: channel, count: count) { try? enqueueControl(frame) }
        if state.lingering, state.inbound?.bufferedByteCount ?? 0 == 0 { forgetChannel(channel) }
    }

    /// The application dropped its object for stream `channel`: a stream finished both ways that still held
    /// unread bytes is forgotten now (the bytes with it). One still open this way is finished (after what is
    /// queued): nobody can write on it any more, and a one-way stream (Apple's model: the receiver only reads) is
    /// only forgotten once both ends are finished, so without this every one-way stream kept its slot for the
    /// connection's life and a connection that carried `maximumChannels` of them could open no more.
    func streamDropped(channel: UInt32) {
        guard var state = channels[channel] else { return }
        if state.lingering {
            forgetChannel(channel, discarding: .streamDropped())
            return
        }
        state.dropped = true
        channels[channel] = state
        if phase == .established, state.localOpen, !scheduler.isClosing(channel: channel) {
            try? scheduler.enqueueClose(channel: channel)
        }
    }

    func enqueueControl(_ frame: Frame) throws(ConnectionError) {
        do {
            try scheduler.enqueueControl(frame)
        } catch {
            throw .controlQueueFull(error)
        }
    }

    /// Throws unless this side may still send on `channel`.
    private func checkWritable(_ channel: UInt32) throws(ConnectionError) {
        guard let state = channels[channel] else { throw .channelGone(channel) }
        guard state.localOpen, !scheduler.isClosing(channel: channel) else { throw .channelFinished(channel) }
    }

    /// Why a command cannot run: the reason the connection ended or is ending, or its phase.
    func notOpen() -> ConnectionError {
        if let reason = ending.reason, phase == .closed || ending.isRequested { return reason }
        return .notEstablished(phase: phase)
    }
}
