/// Credit-based flow control for one connection and all its channels, as a pure state machine: the
/// connection owner reports what was sent, received and consumed, and sends the `windowUpdate` frames it
/// returns.
///
/// A sender may send `min(channel credit, connection credit)` bytes; both are taken together by
/// ``reserve(channel:upTo:)``. A `channelData` frame costs its payload length. A message costs
/// ``messageCost(length:)`` (its length plus ``messageOverhead``), taken whole by its first fragment with
/// ``reserveWhole(channel:count:)``, and returned only when the receiving application has taken the message:
/// what a peer makes the receiver hold in messages, finished or not, is bounded by the windows. Control frames
/// are never flow controlled.
///
/// Every new channel starts with ``Configuration/initialCredit`` in the direction nobody announced: the
/// opener announces its own receive window in `channelOpen`, the acceptor assumes the opener may send
/// `initialCredit` and tops that up with a window update. The connection starts with `initialCredit` both
/// ways, topped up after hello by ``connectionEstablished()``.
package struct FlowController: Sendable {
    /// Window sizes and limits.
    package struct Configuration: Sendable, Hashable {
        /// The credit each side may assume for the connection and for a new channel before any window
        /// update: 256 KiB, as yamux, so a short message or the start of a transfer never waits a round trip.
        /// Part of the protocol; both peers must agree on it.
        package static let initialCredit: UInt32 = 262_144

        /// This side's connection-level receive window: the most bytes buffered across all channels.
        ///
        /// 16 MiB: covers the bandwidth-delay product of a gigabit LAN at 100 ms or loopback at any speed,
        /// while a slow application can never make a peer hold more than this per connection.
        package var connectionWindow: UInt32
        /// This side's receive window for each stream or resource channel: the most bytes buffered for one.
        ///
        /// 4 MiB: one bulk channel alone can still fill a gigabit link at 30 ms round trip, and a quarter of
        /// the connection window stays for the others.
        package var channelWindow: UInt32
        /// This side's receive window for each of the peer's message channels, in message costs (see
        /// ``messageCost(length:)``): twice the cost of the longest message accepted, plus room for the
        /// application's unreported reads, so that once the application has taken every message at least one
        /// more of any size fits without waiting for a window update.
        package var messageWindow: UInt32
        /// The most channels open at once.
        ///
        /// 1024: each costs a few dozen bytes here plus buffers elsewhere; Apple's sessions use a handful of
        /// streams and resources per peer, so more means a misbehaving peer.
        package var maximumChannels: Int

        /// Creates a configuration; windows must be between ``initialCredit`` and 2^31-1.
        /// - Parameters:
        ///   - connectionWindow: The connection receive window in bytes.
        ///   - channelWindow: The per-channel receive window in bytes.
        ///   - maximumChannels: The most open channels.
        package init(
            connectionWindow: UInt32 = 16 << 20, channelWindow: UInt32 = 4 << 20,
            messageWindow: UInt32 = FlowController.messageWindow(maximumMessageLength: 4 << 20),
            maximumChannels: Int = 1024
        ) {
            precondition(
                [connectionWindow, channelWindow, messageWindow].allSatisfy {
                    (Self.initialCredit...SendWindow.maximumCredit).contains($0)
                }, "windows must be between the initial credit and 2^31-1")
            self.connectionWindow = connectionWindow
            self.channelWindow = channelWindow
            self.messageWindow = messageWindow
            self.maximumChannels = maximumChannels
        }
    }

    /// What every message costs on top of its length, in credit.
    ///
    /// 128 bytes: at least what a queued message costs the receiver beyond its bytes (the array's header and
    /// allocator rounding, its queue slots), so however small the messages, what a peer makes the receiver hold
    /// stays within the window; an empty message is not free.
    package static let messageOverhead = 128

    /// Application reads of messages are reported to the connection in batches of at most this many bytes
    /// of message cost (fewer wake-ups of the event loop); a message window leaves room for one batch.
    package static let messageReportBatch = 65_536

    /// The credit a message of `length` bytes costs: taken by its first fragment, returned when the receiving
    /// application takes it.
    package static func messageCost(length: Int) -> Int { length + messageOverhead }

    /// The message window that lets a receiver accept messages of up to `maximumMessageLength` bytes without a
    /// stall: twice the largest cost plus an unreported batch (see ``Configuration/messageWindow``), at least
    /// the initial credit.
    package static func messageWindow(maximumMessageLength: Int) -> UInt32 {
        let window = 2 * (messageCost(length: maximumMessageLength) + messageReportBatch)
        return UInt32(min(Int(SendWindow.maximumCredit), max(Int(Configuration.initialCredit), window)))
    }

    /// The longest message a receive window of `window` bytes takes without a stall (the inverse of
    /// ``messageWindow(maximumMessageLength:)``).
    package static func maximumMessageLength(messageWindow window: UInt32) -> Int {
        max(0, Int(window) / 2 - messageReportBatch - messageOverhead)
    }

    /// The configuration in force.
    package let configuration: Configuration
    /// What this side may still send on the connection as a whole.
    package private(set) var connectionSend: SendWindow
    /// What the peer may still send on the connection as a whole.
    package private(set) var connectionReceive: ReceiveWindow
    private var channels: [UInt32: (send: SendWindow, receive: ReceiveWindow)] = [:]

    /// Creates the flow controller of a new connection.
    /// - Parameter configuration: Window sizes and limits.
    package init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        connectionSend = SendWindow(channel: 0, credit: Configuration.initialCredit)
        connectionReceive = ReceiveWindow(
            channel: 0, window: configuration.connectionWindow, advertised: Configuration.initialCredit)
    }

    /// The number of open channels.
    package var channelCount: Int { channels.count }

    /// This side's send window for `channel`, if open.
    /// - Parameter channel: A channel number.
    /// - Returns: The window, or `nil` if the channel is not open.
    package func sendWindow(_ channel: UInt32) -> SendWindow? { channels[channel]?.send }

    /// This side's receive window for `channel`, if open.
    /// - Parameter channel: A channel number.
    /// - Returns: The window, or `nil` if the channel is not open.
    package func receiveWindow(_ channel: UInt32) -> ReceiveWindow? { channels[channel]?.receive }

    /// Call once the hello exchange is done.
    /// - Returns: The window update raising the connection window from the initial credit to
    ///   ``Configuration/connectionWindow``, if larger.
    package mutating func connectionEstablished() -> [Frame] {
        connectionReceive.takeGrant().map { [.windowUpdate(channel: 0, increment: $0)] } ?? []
    }

    /// Opens a channel this side initiates.
    /// - Parameter channel: The new channel's number (nonzero).
    /// - Returns: The receive window to announce as `initialWindow` in the `channelOpen` frame.
    /// - Throws: ``FlowControlError/channelRefused(channel:reason:)`` if it is open already or too many are.
    package mutating func openLocalChannel(_ channel: UInt32) throws(FlowControlError) -> UInt32 {
        try checkCanOpen(channel)
        let window = configuration.channelWindow
        channels[channel] = (
            SendWindow(channel: channel, credit: Configuration.initialCredit),
            ReceiveWindow(channel: channel, window: window, advertised: window)
        )
        return window
    }

    /// Opens a channel the peer initiated with a `channelOpen` frame.
    /// - Parameters:
    ///   - channel: The channel's number (nonzero).
    ///   - initialWindow: The `initialWindow` of the peer's `channelOpen` frame.
    /// - Returns: The window update raising this side's receive window from the initial credit to
    ///   ``Configuration/channelWindow``, if larger.
    /// - Throws: ``FlowControlError/channelRefused(channel:reason:)`` if it is open already or too many are.
    package mutating func openRemoteChannel(_ channel: UInt32, initialWindow: UInt32, isMessage: Bool = false)
        throws(FlowControlError) -> [Frame]
    {
        try checkCanOpen(channel)
        guard initialWindow <= SendWindow.maximumCredit else {
            throw .windowOverflow(channel: channel, credit: 0, increment: initialWindow)
        }
        var receive = ReceiveWindow(
            channel: channel, window: isMessage ? configuration.messageWindow : configuration.channelWindow,
            advertised: Configuration.initialCredit)
        let update = receive.takeGrant()
        channels[channel] = (SendWindow(channel: channel, credit: initialWindow), receive)
        return update.map { [.windowUpdate(channel: channel, increment: $0)] } ?? []
    }

    /// Forgets a closed or reset channel. Bytes it had buffered and never consumed are given back to the
    /// connection window, except `held`: bytes the application still holds (delivered messages it has not
    /// taken), which ``consumedAfterClose(_:)`` gives back when it takes them.
    /// - Parameters:
    ///   - channel: The channel to forget.
    ///   - held: Buffered bytes that stay with the application.
    /// - Returns: A connection-level window update, if one is due.
    package mutating func closeChannel(_ channel: UInt32, held: Int = 0) -> [Frame] {
        guard let removed = channels.removeValue(forKey: channel) else { return [] }
        return connectionUpdate(consuming: removed.receive.buffered - min(held, removed.receive.buffered))
    }

    /// Accounts for bytes the application consumed from a channel that is already forgotten (see
    /// ``closeChannel(_:held:)``): they go back to the connection window only.
    /// - Returns: A connection-level window update, if one is due.
    package mutating func consumedAfterClose(_ count: Int) -> [Frame] {
        connectionUpdate(consuming: count)
    }

    /// Takes exactly `count` bytes of credit on `channel` and the connection, or nothing: a message's whole
    /// cost, before its first fragment is sent.
    /// - Returns: Whether the credit was taken.
    /// - Throws: ``FlowControlError/unknownChannel(_:)``.
    package mutating func reserveWhole(channel: UInt32, count: Int) throws(FlowControlError) -> Bool {
        guard var windows = channels[channel] else { throw .unknownChannel(channel) }
        guard count <= windows.send.credit, count <= connectionSend.credit else { return false }
        _ = windows.send.reserve(upTo: count)
        _ = connectionSend.reserve(upTo: count)
        channels[channel] = windows
        return true
    }

    /// Takes credit for sending on `channel`: the least of `count`, the channel's credit and the
    /// connection's credit.
    /// - Parameters:
    ///   - channel: An open channel.
    ///   - count: The payload bytes the caller would like to send.
    /// - Returns: The bytes that may be sent now; 0 when blocked until a window update arrives.
    /// - Throws: ``FlowControlError/unknownChannel(_:)``.
    package mutating func reserve(channel: UInt32, upTo count: Int) throws(FlowControlError) -> Int {
        guard var windows = channels[channel] else { throw .unknownChannel(channel) }
        let allowed = min(count, windows.send.credit, connectionSend.credit)
        _ = windows.send.reserve(upTo: allowed)
        _ = connectionSend.reserve(upTo: allowed)
        channels[channel] = windows
        return allowed
    }

    /// Applies a `windowUpdate` frame from the peer.
    /// - Parameters:
    ///   - channel: The frame's channel; 0 for the connection.
    ///   - increment: The frame's increment.
    /// - Throws: ``FlowControlError/windowOverflow(channel:credit:increment:)``. An update for a channel
    ///   that is not open is ignored: it may have crossed a `channelReset` on the wire.
    package mutating func receivedWindowUpdate(channel: UInt32, increment: UInt32) throws(FlowControlError) {
        if channel == 0 {
            try connectionSend.grant(increment)
        } else if var windows = channels[channel] {
            try windows.send.grant(increment)
            channels[channel] = windows
        }
    }

    /// Accounts for a flow-controlled frame received from the peer, against both its channel and the
    /// connection; nothing is accounted if either check fails.
    /// - Parameters:
    ///   - channel: The frame's channel.
    ///   - count: The frame's payload length.
    /// - Throws: ``FlowControlError/flowControlViolation(channel:received:credit:)`` (channel 0 when the
    ///   connection credit was exceeded), or ``FlowControlError/unknownChannel(_:)`` (see ``discard(_:)``).
    package mutating func received(channel: UInt32, count: Int) throws(FlowControlError) {
        guard var windows = channels[channel] else { throw .unknownChannel(channel) }
        var connection = connectionReceive
        try connection.received(count)
        try windows.receive.received(count)
        connectionReceive = connection
        channels[channel] = windows
    }

    /// Accounts for a flow-controlled frame received on a channel this side already closed or reset (the
    /// peer sent it before learning so): it still counts against the connection, and is dropped at once.
    /// - Parameter count: The frame's payload length.
    /// - Returns: A connection-level window update, if one is due.
    /// - Throws: ``FlowControlError/flowControlViolation(channel:received:credit:)`` for the connection.
    package mutating func discard(_ count: Int) throws(FlowControlError) -> [Frame] {
        try connectionReceive.received(count)
        return connectionUpdate(consuming: count)
    }

    /// Accounts for bytes of `channel` the application has consumed.
    /// - Parameters:
    ///   - channel: An open channel.
    ///   - count: At most the channel's buffered bytes.
    /// - Returns: The window updates to send (channel and connection), possibly none.
    package mutating func consumed(channel: UInt32, count: Int) -> [Frame] {
        guard var windows = channels[channel] else { return [] }
        var frames: [Frame] = []
        if let increment = windows.receive.consumed(count) {
            frames.append(.windowUpdate(channel: channel, increment: increment))
        }
        channels[channel] = windows
        return connectionUpdate(consuming: count) + frames
    }

    private mutating func connectionUpdate(consuming count: Int) -> [Frame] {
        if let increment = connectionReceive.consumed(count) {
            return [.windowUpdate(channel: 0, increment: increment)]
        }
        // Below half the window nothing is granted yet, but a peer left with less connection credit than the
        // largest message costs may be waiting for exactly this credit to start one (a message's first fragment
        // needs its whole cost): grant what is pending now. Bulk transfers rarely get here (the peer's credit stays
        // above it while one stream's window is all that is unread), so the updates stay few.
        guard connectionReceive.credit < Int(min(configuration.messageWindow, configuration.connectionWindow)) / 2,
            let increment = connectionReceive.takeGrant()
        else { return [] }
        return [.windowUpdate(channel: 0, increment: increment)]
    }

    private func checkCanOpen(_ channel: UInt32) throws(FlowControlError) {
        guard channel != 0 else { throw .channelRefused(channel: channel, reason: "channel 0 is the connection") }
        guard channels[channel] == nil else { throw .channelRefused(channel: channel, reason: "already open") }
        guard channels.count < configuration.maximumChannels else {
            throw .channelRefused(channel: channel, reason: "\(configuration.maximumChannels) channels already open")
        }
    }
}
