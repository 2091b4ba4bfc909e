import DequeModule

/// Chooses the next frame to send on a connection: a pure state machine, driven by the connection owner
/// whenever the socket can take more bytes.
///
/// Order of service:
/// 1. Control frames (hello, ping, pong, window updates, channel open and reset, goodbye, error), first in
///    first out, so liveness and credit never wait behind data.
/// 2. Channels whose next message is small (at most ``Limits/smallMessageLength`` bytes), round robin.
/// 3. All other channels with queued work, round robin, one frame per turn.
///
/// Every data frame is cut to fit ``Limits/maximumPayloadLength`` and the flow-control credit of its channel
/// and the connection, taken from the ``FlowController`` passed to ``next(flow:)``; a message's first fragment
/// takes the whole message's cost at once. A channel without credit is skipped, never waited for, except that
/// a message with its channel's credit but not the connection's keeps the connection's for itself until it
/// starts (streams would take it piece by piece and starve it). So a small message queued during a 1 GiB transfer on another channel waits
/// for at most the one frame being written. Within a channel, work goes out in the order it was queued
/// (Apple's reliable mode delivers in order), so a message's fragments never interleave with another's of
/// the same channel.
package struct FrameScheduler: Sendable {
    /// The scheduler's bounds.
    package struct Limits: Sendable, Hashable {
        /// The most control frames waiting.
        ///
        /// 1024: a healthy connection has a handful (a pong, some window updates); a thousand means the peer
        /// is flooding requests faster than the socket drains, and the connection should be closed.
        package var maximumControlFrames: Int
        /// The most messages and writes waiting per channel.
        ///
        /// 64: enough to keep a channel busy between wake-ups; beyond that the `async` send suspends, so the
        /// memory held is what callers already hold, in a bounded number of pieces.
        package var maximumQueuedItemsPerChannel: Int
        /// The largest message that gets priority over bulk data.
        ///
        /// 16 KiB: chat, game state and control messages fit; the priority class cannot starve bulk data for
        /// long because each of its messages is at most a quarter of one frame.
        package var smallMessageLength: Int
        /// The largest frame payload produced; the peer's ``FrameLimits/maximumPayloadLength``.
        package var maximumPayloadLength: Int

        /// Creates limits; the defaults are 1024 control frames, 64 items per channel, 16 KiB small
        /// messages and 64 KiB payloads.
        /// - Parameters:
        ///   - maximumControlFrames: The most control frames waiting.
        ///   - maximumQueuedItemsPerChannel: The most messages and writes waiting per channel.
        ///   - smallMessageLength: The largest message with priority.
        ///   - maximumPayloadLength: The largest frame payload (more than 12 bytes).
        package init(
            maximumControlFrames: Int = 1024, maximumQueuedItemsPerChannel: Int = 64,
            smallMessageLength: Int = 16_384, maximumPayloadLength: Int = FrameLimits.standard.maximumPayloadLength
        ) {
            precondition(maximumPayloadLength > messageFirstOverhead, "payload too small for a message fragment")
            self.maximumControlFrames = maximumControlFrames
            self.maximumQueuedItemsPerChannel = maximumQueuedItemsPerChannel
            self.smallMessageLength = smallMessageLength
            self.maximumPayloadLength = maximumPayloadLength
        }
    }

    /// One queued message or write, with how much of it has been sent.
    private struct Item: Sendable {
        enum Kind: Sendable {
            case message(id: UInt32)
            case data
            case close
        }

        var kind: Kind
        /// What a message starts with before `bytes` (a layer above's header, never copied into `bytes`).
        var prefix = MessagePrefix.none
        var bytes: [UInt8]
        /// Data bytes already sent, prefix included.
        var sent = 0

        /// The item's data length: prefix and bytes.
        var length: Int { prefix.count + bytes.count }
        /// Whether the first fragment of a message has been sent (an empty message has one fragment).
        var started = false

        /// Whether sending this item's next frame takes connection credit: stream data, and a message's first
        /// fragment (a close, or a message's later fragments, take none).
        var needsConnectionCredit: Bool {
            switch kind {
            case .data: true
            case .message: !started
            case .close: false
            }
        }
    }

    /// A channel's queued items, first in first out (a `Deque`: taken from the front without moving the rest).
    private struct ItemQueue: Sendable {
        private var items: Deque<Item> = []

        var count: Int { items.count }
        var isEmpty: Bool { items.isEmpty }

        /// Whether the first item is a message of at most `limit` bytes. Mutating only to read the item in place:
        /// `Deque`'s getter copies an element, which would retain the caller's array.
        mutating func headIsMessage(atMost limit: Int) -> Bool {
            guard !items.isEmpty else { return false }
            return Self.isMessage(&items[0], atMost: limit)
        }

        private static func isMessage(_ item: inout Item, atMost limit: Int) -> Bool {
            guard case .message = item.kind else { return false }
            return item.length <= limit
        }
        /// Data bytes queued and not sent yet.
        var unsentBytes: Int { items.reduce(0) { $0 + $1.length - $1.sent } }

        mutating func append(_ item: Item) { items.append(item) }

        mutating func replaceFirst(_ item: Item) { items[0] = item }

        /// Moves the first item out (its slot keeps an empty placeholder until ``removeFirst()`` or
        /// ``replaceFirst(_:)``): no reference count changes, which matter when the caller's array is shared
        /// with the sending thread.
        mutating func takeFirst() -> Item? {
            guard !items.isEmpty else { return nil }
            var taken = Item(kind: .data, bytes: [])
            swap(&taken, &items[0])
            return taken
        }

        /// Drops the first item's slot (after ``takeFirst()`` moved it out).
        mutating func removeFirst() { items.removeFirst() }
    }

    /// Bytes of a first message fragment's payload before its data: id and total length.
    static let messageFirstOverhead = 12
    /// Bytes of a later fragment's payload before its data: the id.
    static let messageOverhead = 4

    /// The bounds in force.
    package let limits: Limits
    /// Control frames waiting, first in first out.
    private var control: Deque<Frame> = []
    private var queues: [UInt32: ItemQueue] = [:]
    private var closing: Set<UInt32> = []
    private var nextMessageID: [UInt32: UInt32] = [:]
    /// Channels with queued work, in round-robin order; `cursor` is the next to serve.
    private var ring: [UInt32] = []
    private var cursor = 0
    /// A channel whose next message has its channel's credit but waits for the connection's: until it starts, no
    /// other channel takes connection credit. Streams take it piece by piece as it comes back and would otherwise
    /// starve a message, which needs its whole cost at once.
    private var creditWaiter: UInt32?

    /// Creates an empty scheduler.
    /// - Parameter limits: The bounds to enforce.
    package init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// The number of control frames waiting.
    package var queuedControlFrames: Int { control.count }
    /// The channels with queued work, in the order they will next be served.
    package var activeChannels: [UInt32] { Array(ring[cursor...] + ring[..<cursor]) }

    /// Whether a close was queued on `channel`, so nothing more may be queued.
    /// - Parameter channel: The channel.
    package func isClosing(channel: UInt32) -> Bool {
        closing.contains(channel)
    }

    /// How many more items `channel` can take before ``Limits/maximumQueuedItemsPerChannel``.
    /// - Parameter channel: The channel.
    package func queueRoom(channel: UInt32) -> Int {
        max(0, limits.maximumQueuedItemsPerChannel - (queues[channel]?.count ?? 0))
    }

    /// Queues a control frame, sent before any data.
    /// - Parameter frame: The frame.
    /// - Throws: ``FrameSchedulerError/controlQueueFull(limit:)``.
    package mutating func enqueueControl(_ frame: Frame) throws(FrameSchedulerError) {
        guard queuedControlFrames < limits.maximumControlFrames else {
            throw .controlQueueFull(limit: limits.maximumControlFrames)
        }
        // A deque keeps no sent frame: a queue that never fully drains (a frame queued for every one sent) holds
        // at most its limit.
        control.append(frame)
    }

    /// Queues a whole message on a message channel; it is sent in fragments.
    /// - Parameters:
    ///   - bytes: The message, at most ``FrameLimits/maximumMessageLength`` bytes (the caller checks).
    ///   - channel: The channel.
    /// - Returns: The message id used in its fragments.
    /// - Throws: ``FrameSchedulerError``.
    @discardableResult
    package mutating func enqueueMessage(_ bytes: [UInt8], channel: UInt32) throws(FrameSchedulerError) -> UInt32 {
        let id = nextMessageID[channel, default: 0]
        try enqueue(Item(kind: .message(id: id), bytes: bytes), channel: channel)
        nextMessageID[channel] = id &+ 1
        return id
    }

    /// Queues bytes on a stream or resource channel.
    /// - Parameters:
    ///   - bytes: The bytes.
    ///   - channel: The channel.
    /// - Throws: ``FrameSchedulerError``.
    /// Queues several messages on `channel` in order, all or none: the batch must fit in the channel's queue.
    /// - Parameters:
    ///   - messages: The messages, each sent whole or in fragments like ``enqueueMessage(_:channel:)``.
    ///   - channel: A writable channel (not 0).
    /// - Throws: ``FrameSchedulerError`` if the channel is not writable or the batch does not fit.
    package mutating func enqueueMessages(_ messages: consuming [OutboundMessage], channel: UInt32)
        throws(FrameSchedulerError)
    {
        guard !messages.isEmpty else { return }
        guard channel != 0, !closing.contains(channel) else { throw .channelNotWritable(channel) }
        var queue = queues.removeValue(forKey: channel) ?? ItemQueue()
        guard queue.count + messages.count <= limits.maximumQueuedItemsPerChannel else {
            if !queue.isEmpty { queues[channel] = queue }
            throw .channelQueueFull(channel: channel, limit: limits.maximumQueuedItemsPerChannel)
        }
        if queue.isEmpty { ring.append(channel) }
        var id = nextMessageID[channel, default: 0]
        var messages = messages
        for index in messages.indices {
            // Moved out, not copied: no reference count traffic on arrays the sending thread may still hold.
            var bytes: [UInt8] = []
            swap(&bytes, &messages[index].body)
            queue.append(Item(kind: .message(id: id), prefix: messages[index].prefix, bytes: bytes))
            id &+= 1
        }
        nextMessageID[channel] = id
        queues[channel] = queue
    }

    package mutating func enqueueData(_ bytes: [UInt8], channel: UInt32) throws(FrameSchedulerError) {
        // An empty write has nothing to send; it still must be a writable channel.
        guard !bytes.isEmpty else {
            guard channel != 0, !closing.contains(channel) else { throw .channelNotWritable(channel) }
            return
        }
        try enqueue(Item(kind: .data, bytes: bytes), channel: channel)
    }

    /// Queues a `channelClose` after everything already queued on the channel.
    /// - Parameter channel: The channel.
    /// - Throws: ``FrameSchedulerError``.
    package mutating func enqueueClose(channel: UInt32) throws(FrameSchedulerError) {
        try enqueue(Item(kind: .close, bytes: []), channel: channel)
        closing.insert(channel)
    }

    /// Forgets a channel: call it when the channel is finished (closed both ways) or reset, which drops
    /// anything still queued on it.
    /// - Parameter channel: The channel.
    /// - Returns: The data bytes that were queued and will now never be sent.
    @discardableResult
    package mutating func removeChannel(_ channel: UInt32) -> Int {
        let unsent = queues[channel]?.unsentBytes ?? 0
        queues[channel] = nil
        closing.remove(channel)
        nextMessageID[channel] = nil
        removeFromRing(channel)
        if creditWaiter == channel { creditWaiter = nil }
        return unsent
    }

    /// One frame's worth of work, chosen and paid for, before it becomes a ``Frame`` or wire bytes. Data
    /// refers to the queued array and a range of it: nothing is copied until the bytes are encoded.
    private enum Piece {
        /// Control frames and channel closes.
        case frame(Frame)
        case data(channel: UInt32, bytes: [UInt8], range: Range<Int>)
        /// `range` counts `prefix` first, then `bytes`.
        case fragment(
            channel: UInt32, id: UInt32, totalLength: UInt64?, isLast: Bool, prefix: MessagePrefix, bytes: [UInt8],
            range: Range<Int>)
    }

    /// Which of a fragment's `range` (counted over prefix then bytes) lies in a prefix of `prefixCount` bytes,
    /// and which in the bytes after it (as indices of those bytes).
    private static func split(_ range: Range<Int>, prefixCount: Int) -> (prefix: Range<Int>, bytes: Range<Int>) {
        let prefix = min(range.lowerBound, prefixCount)..<min(range.upperBound, prefixCount)
        return (
            prefix, max(range.lowerBound, prefixCount) - prefixCount..<max(range.upperBound, prefixCount) - prefixCount
        )
    }

    /// What ``encodeNext(flow:encoder:into:)`` appended.
    package struct EncodedFrame: Sendable, Hashable {
        /// The frame's type.
        package var type: FrameType
        /// The frame's channel.
        package var channel: UInt32
        /// The application bytes it carries (stream data or message fragment data; 0 for control frames).
        package var dataBytes: Int
    }

    /// Chooses the next frame to send and takes its flow-control credit.
    /// - Parameter flow: The connection's flow controller; credit for the returned frame is reserved in it.
    /// - Returns: The frame, or `nil` when nothing is queued or every channel with work lacks credit.
    package mutating func next(flow: inout FlowController) -> Frame? {
        switch nextPiece(flow: &flow) {
        case nil: return nil
        case .frame(let frame): return frame
        case .data(let channel, let bytes, let range):
            return .channelData(channel: channel, bytes: range == bytes.indices ? bytes : Array(bytes[range]))
        case .fragment(let channel, let id, let total, let isLast, let prefix, let bytes, let range):
            let parts = Self.split(range, prefixCount: prefix.count)
            var data = parts.bytes == bytes.indices ? bytes : Array(bytes[parts.bytes])
            if !parts.prefix.isEmpty { data.insert(contentsOf: prefix.bytes[parts.prefix], at: 0) }
            return .message(
                channel: channel,
                fragment: Frame.MessageFragment(id: id, totalLength: total, isLast: isLast, bytes: data))
        }
    }

    /// Chooses the next frame like ``next(flow:)`` and appends its wire form to `bytes`, copying data straight
    /// from the queued arrays (``next(flow:)`` copies a fragment's data into the frame first).
    /// - Parameters:
    ///   - flow: The connection's flow controller; credit for the frame is reserved in it.
    ///   - encoder: The encoder (its limits must allow the frames this scheduler makes).
    ///   - bytes: The buffer to append to.
    /// - Returns: What was appended, or `nil` when nothing is queued or every channel with work lacks credit.
    /// - Throws: ``FrameEncodingError`` if the frame cannot be encoded; the frame is dropped and `bytes` is
    ///   left as it was.
    package mutating func encodeNext(flow: inout FlowController, encoder: FrameEncoder, into bytes: inout [UInt8])
        throws(FrameEncodingError) -> EncodedFrame?
    {
        try encodeNext(flow: &flow, encoder: encoder, into: &bytes, gatheringFrom: .max)?.frame
    }

    /// Like ``encodeNext(flow:encoder:into:)``, but the data of a frame carrying at least `threshold` bytes
    /// is not appended: it is returned, to be sent right after `bytes` with a gathering write (no copy at all).
    /// - Returns: What was encoded, and the data that follows it on the wire (empty when it was appended).
    package mutating func encodeNext(
        flow: inout FlowController, encoder: FrameEncoder, into bytes: inout [UInt8], gatheringFrom threshold: Int
    ) throws(FrameEncodingError) -> (frame: EncodedFrame, payload: ArraySlice<UInt8>)? {
        switch nextPiece(flow: &flow) {
        case nil:
            return nil
        case .frame(let frame):
            try encoder.encode(frame, into: &bytes)
            let data: Int
            switch frame {
            case .message(_, let fragment): data = fragment.bytes.count
            case .channelData(_, let payload): data = payload.count
            default: data = 0
            }
            return (EncodedFrame(type: frame.type, channel: frame.channel, dataBytes: data), [])
        case .data(let channel, let data, let range):
            let gather = range.count >= threshold
            // Lent as raw bytes: unlike a slice, no reference count change on an array the sending thread may
            // be using at the same time.
            try data.withUnsafeBytesTyped { all throws(FrameEncodingError) in
                try encoder.encodeChannelData(
                    channel: channel, UnsafeRawBufferPointer(rebasing: all[range]), into: &bytes,
                    payloadFollows: gather)
            }
            return (
                EncodedFrame(type: .channelData, channel: channel, dataBytes: range.count), gather ? data[range] : []
            )
        case .fragment(let channel, let id, let total, let isLast, let prefix, let data, let range):
            // The prefix's part is appended; the caller's bytes are appended or gathered, never joined to it first.
            let parts = Self.split(range, prefixCount: prefix.count)
            let gather = parts.bytes.count >= threshold
            func encode(leading: UnsafeRawBufferPointer) throws(FrameEncodingError) {
                try data.withUnsafeBytesTyped { all throws(FrameEncodingError) in
                    try encoder.encodeMessageFragment(
                        channel: channel, id: id, totalLength: total, isLast: isLast, leading: leading,
                        UnsafeRawBufferPointer(rebasing: all[parts.bytes]), into: &bytes, payloadFollows: gather)
                }
            }
            if parts.prefix.isEmpty {
                try encode(leading: UnsafeRawBufferPointer(start: nil, count: 0))
            } else {
                try prefix.withUnsafeBytes { all throws(FrameEncodingError) in
                    try encode(leading: UnsafeRawBufferPointer(rebasing: all[parts.prefix]))
                }
            }
            return (
                EncodedFrame(type: .message, channel: channel, dataBytes: range.count),
                gather ? data[parts.bytes] : []
            )
        }
    }

    private mutating func nextPiece(flow: inout FlowController) -> Piece? {
        if let frame = control.popFirst() { return .frame(frame) }
        for smallOnly in [true, false] {
            for step in 0..<ring.count {
                let index = (cursor + step) % ring.count
                let channel = ring[index]
                if smallOnly && !headIsSmallMessage(channel) { continue }
                if let piece = makePiece(channel: channel, flow: &flow) {
                    if queues[channel] == nil {
                        removeFromRing(channel)
                    } else if !smallOnly {
                        // Only bulk turns move the cursor: a small message jumping the queue does not cost
                        // the bulk channel whose turn it is.
                        cursor = (index + 1) % ring.count
                    }
                    return piece
                }
            }
        }
        return nil
    }

    private mutating func enqueue(_ item: Item, channel: UInt32) throws(FrameSchedulerError) {
        guard channel != 0, !closing.contains(channel) else { throw .channelNotWritable(channel) }
        let count = queues[channel]?.count ?? 0
        guard count < limits.maximumQueuedItemsPerChannel else {
            throw .channelQueueFull(channel: channel, limit: limits.maximumQueuedItemsPerChannel)
        }
        if count == 0 { ring.append(channel) }
        queues[channel, default: ItemQueue()].append(item)
    }

    private mutating func headIsSmallMessage(_ channel: UInt32) -> Bool {
        queues[channel]?.headIsMessage(atMost: limits.smallMessageLength) ?? false
    }

    /// Takes the next frame's worth of `channel`'s first item, or returns `nil` if its credit does not allow one.
    private mutating func makePiece(channel: UInt32, flow: inout FlowController) -> Piece? {
        // Taken out of the dictionary so the queue is uniquely referenced: changing it must not copy it.
        guard var queue = queues.removeValue(forKey: channel) else { return nil }
        defer { queues[channel] = queue.isEmpty ? nil : queue }
        guard var item = queue.takeFirst() else { return nil }
        if let creditWaiter, creditWaiter != channel, item.needsConnectionCredit {
            queue.replaceFirst(item)
            return nil
        }
        let piece: Piece
        let isDone: Bool
        switch item.kind {
        case .close:
            // The channel stays in `closing` until removeChannel, so nothing can be queued after its close.
            piece = .frame(.channelClose(channel: channel))
            isDone = true
        case .data:
            let remaining = item.bytes.count - item.sent
            guard let count = reserve(channel: channel, remaining: remaining, flow: &flow) else {
                queue.replaceFirst(item)
                return nil
            }
            let range = item.sent..<item.sent + count
            item.sent += count
            isDone = item.sent == item.bytes.count
            piece = .data(channel: channel, bytes: Self.hand(&item.bytes, whole: isDone), range: range)
        case .message(let id):
            // The first fragment pays for the whole message (see FlowController); the rest travel on that credit.
            if !item.started {
                let cost = FlowController.messageCost(length: item.length)
                guard (try? flow.reserveWhole(channel: channel, count: cost)) == true else {
                    if creditWaiter == nil, (flow.sendWindow(channel)?.credit ?? 0) >= cost { creditWaiter = channel }
                    queue.replaceFirst(item)
                    return nil
                }
                if creditWaiter == channel { creditWaiter = nil }
            }
            let overhead = item.started ? Self.messageOverhead : Self.messageFirstOverhead
            let remaining = item.length - item.sent
            let count = min(remaining, limits.maximumPayloadLength - overhead)
            let total = item.length
            let range = item.sent..<item.sent + count
            let totalLength = item.started ? nil : UInt64(total)
            item.started = true
            item.sent += count
            isDone = item.sent == total
            piece = .fragment(
                channel: channel, id: id, totalLength: totalLength, isLast: count == remaining, prefix: item.prefix,
                bytes: Self.hand(&item.bytes, whole: isDone), range: range)
        }
        if isDone {
            // The item's array now lives on in the piece alone (moved, not copied or retained).
            queue.removeFirst()
        } else {
            queue.replaceFirst(item)
        }
        return piece
    }

    /// The item's array for a piece: moved out when the item is done (no reference count change on an array the
    /// sending thread may be retaining and releasing at the same time, as when it sends one array repeatedly),
    /// shared otherwise.
    private static func hand(_ bytes: inout [UInt8], whole: Bool) -> [UInt8] {
        guard whole else { return bytes }
        var taken: [UInt8] = []
        swap(&taken, &bytes)
        return taken
    }

    /// Takes credit for up to one frame of stream data: as many of `remaining` bytes as fit.
    /// - Returns: The bytes to send, or `nil` if there is no credit for even one.
    private func reserve(channel: UInt32, remaining: Int, flow: inout FlowController) -> Int? {
        let available = min(flow.sendWindow(channel)?.credit ?? 0, flow.connectionSend.credit)
        guard available > 0 || remaining == 0 else { return nil }
        let wanted = min(remaining, limits.maximumPayloadLength, available)
        return try? flow.reserve(channel: channel, upTo: wanted)
    }

    private mutating func removeFromRing(_ channel: UInt32) {
        guard let index = ring.firstIndex(of: channel) else { return }
        ring.remove(at: index)
        if index < cursor { cursor -= 1 }
        if cursor >= ring.count { cursor = 0 }
    }
}
