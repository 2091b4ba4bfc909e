/// Credit-based flow control for one connection and all its channels, as a pure state machine: the
/// connection owner reports what was sent, received and consumed, and sends the `windowUpdate` frames it
/// returns.
///
/// A sender may send `min(channel credit, connection credit)` bytes; both are taken together by
/// ``reserve(channel:upTo:)``. The flow-controlled length of a frame is its whole payload length, for
/// `channelData` and `message` frames only; control frames are never flow controlled.
///
/// Every new channel starts with ``Configuration/initialCredit`` in the direction nobody announced: the
/// opener announces its own receive window in `channelOpen`, the acceptor assumes the opener may send
/// `initialCredit` and tops that up with a window update. The connection starts with `initialCredit` both
/// ways, topped up after hello by ``connectionEstablished()``.
public struct FlowController: Sendable {
    /// Window sizes and limits.
    public struct Configuration: Sendable, Hashable {
        /// The credit each side may assume for the connection and for a new channel before any window
        /// update: 256 KiB, as yamux, so a short message or the start of a transfer never waits a round trip.
        /// Part of the protocol; both peers must agree on it.
        public static let initialCredit: UInt32 = 262_144

        /// This side's connection-level receive window: the most bytes buffered across all channels.
        ///
        /// 16 MiB: covers the bandwidth-delay product of a gigabit LAN at 100 ms or loopback at any speed,
        /// while a slow application can never make a peer hold more than this per connection.
        public var connectionWindow: UInt32
        /// This side's receive window for each channel: the most bytes buffered for one channel.
        ///
        /// 4 MiB: one bulk channel alone can still fill a gigabit link at 30 ms round trip, and a quarter of
        /// the connection window stays for the others.
        public var channelWindow: UInt32
        /// The most channels open at once.
        ///
        /// 1024: each costs a few dozen bytes here plus buffers elsewhere; Apple's sessions use a handful of
        /// streams and resources per peer, so more means a misbehaving peer.
        public var maximumChannels: Int

        /// Creates a configuration; windows must be between ``initialCredit`` and 2^31-1.
        /// - Parameters:
        ///   - connectionWindow: The connection receive window in bytes.
        ///   - channelWindow: The per-channel receive window in bytes.
        ///   - maximumChannels: The most open channels.
        public init(connectionWindow: UInt32 = 16 << 20, channelWindow: UInt32 = 4 << 20, maximumChannels: Int = 1024) {
            precondition(
                (Self.initialCredit...SendWindow.maximumCredit).contains(connectionWindow)
                    && (Self.initialCredit...SendWindow.maximumCredit).contains(channelWindow),
                "windows must be between the initial credit and 2^31-1")
            self.connectionWindow = connectionWindow
            self.channelWindow = channelWindow
            self.maximumChannels = maximumChannels
        }
    }

    /// The configuration in force.
    public let configuration: Configuration
    /// What this side may still send on the connection as a whole.
    public private(set) var connectionSend: SendWindow
    /// What the peer may still send on the connection as a whole.
    public private(set) var connectionReceive: ReceiveWindow
    private var channels: [UInt32: (send: SendWindow, receive: ReceiveWindow)] = [:]

    /// Creates the flow controller of a new connection.
    /// - Parameter configuration: Window sizes and limits.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        connectionSend = SendWindow(channel: 0, credit: Configuration.initialCredit)
        connectionReceive = ReceiveWindow(
            channel: 0, window: configuration.connectionWindow, advertised: Configuration.initialCredit)
    }

    /// The number of open channels.
    public var channelCount: Int { channels.count }

    /// This side's send window for `channel`, if open.
    /// - Parameter channel: A channel number.
    /// - Returns: The window, or `nil` if the channel is not open.
    public func sendWindow(_ channel: UInt32) -> SendWindow? { channels[channel]?.send }

    /// This side's receive window for `channel`, if open.
    /// - Parameter channel: A channel number.
    /// - Returns: The window, or `nil` if the channel is not open.
    public func receiveWindow(_ channel: UInt32) -> ReceiveWindow? { channels[channel]?.receive }

    /// Call once the hello exchange is done.
    /// - Returns: The window update raising the connection window from the initial credit to
    ///   ``Configuration/connectionWindow``, if larger.
    public mutating func connectionEstablished() -> [Frame] {
        connectionReceive.takeGrant().map { [.windowUpdate(channel: 0, increment: $0)] } ?? []
    }

    /// Opens a channel this side initiates.
    /// - Parameter channel: The new channel's number (nonzero).
    /// - Returns: The receive window to announce as `initialWindow` in the `channelOpen` frame.
    /// - Throws: ``FlowControlError/channelRefused(channel:reason:)`` if it is open already or too many are.
    public mutating func openLocalChannel(_ channel: UInt32) throws(FlowControlError) -> UInt32 {
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
    public mutating func openRemoteChannel(_ channel: UInt32, initialWindow: UInt32) throws(FlowControlError)
        -> [Frame]
    {
        try checkCanOpen(channel)
        guard initialWindow <= SendWindow.maximumCredit else {
            throw .windowOverflow(channel: channel, credit: 0, increment: initialWindow)
        }
        var receive = ReceiveWindow(
            channel: channel, window: configuration.channelWindow, advertised: Configuration.initialCredit)
        let update = receive.takeGrant()
        channels[channel] = (SendWindow(channel: channel, credit: initialWindow), receive)
        return update.map { [.windowUpdate(channel: channel, increment: $0)] } ?? []
    }

    /// Forgets a closed or reset channel. Bytes it had buffered and never consumed are given back to the
    /// connection window.
    /// - Parameter channel: The channel to forget.
    /// - Returns: A connection-level window update, if one is due.
    public mutating func closeChannel(_ channel: UInt32) -> [Frame] {
        guard let removed = channels.removeValue(forKey: channel) else { return [] }
        return connectionUpdate(consuming: removed.receive.buffered)
    }

    /// Takes credit for sending on `channel`: the least of `count`, the channel's credit and the
    /// connection's credit.
    /// - Parameters:
    ///   - channel: An open channel.
    ///   - count: The payload bytes the caller would like to send.
    /// - Returns: The bytes that may be sent now; 0 when blocked until a window update arrives.
    /// - Throws: ``FlowControlError/unknownChannel(_:)``.
    public mutating func reserve(channel: UInt32, upTo count: Int) throws(FlowControlError) -> Int {
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
    public mutating func receivedWindowUpdate(channel: UInt32, increment: UInt32) throws(FlowControlError) {
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
    public mutating func received(channel: UInt32, count: Int) throws(FlowControlError) {
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
    public mutating func discard(_ count: Int) throws(FlowControlError) -> [Frame] {
        try connectionReceive.received(count)
        return connectionUpdate(consuming: count)
    }

    /// Accounts for bytes of `channel` the application has consumed.
    /// - Parameters:
    ///   - channel: An open channel.
    ///   - count: At most the channel's buffered bytes.
    /// - Returns: The window updates to send (channel and connection), possibly none.
    public mutating func consumed(channel: UInt32, count: Int) -> [Frame] {
        guard var windows = channels[channel] else { return [] }
        var frames: [Frame] = []
        if let increment = windows.receive.consumed(count) {
            frames.append(.windowUpdate(channel: channel, increment: increment))
        }
        channels[channel] = windows
        return connectionUpdate(consuming: count) + frames
    }

    private mutating func connectionUpdate(consuming count: Int) -> [Frame] {
        guard let increment = connectionReceive.consumed(count) else { return [] }
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
