/// The channels of one connection: which are open, in which direction, what they carry, and which numbers
/// each side may still use.
///
/// The dialer opens odd channels and the acceptor even ones, each in increasing order, so a number tells who
/// opened it and whether it was ever used: a frame for a number below the opener's next one whose entry is
/// gone belongs to a channel that was closed or reset (and may still be in flight), anything else is a
/// protocol violation.
struct ChannelTable {
    /// One open channel.
    struct Entry {
        var kind: Frame.ChannelKind
        /// Whether this side opened it.
        var isLocal: Bool
        /// Whether this side may still send on it.
        var localOpen = true
        /// Whether the peer may still send on it.
        var remoteOpen = true
        /// Where the peer's bytes on a stream or resource channel wait for the reader, who reports what it
        /// took with ``ConnectionCore/streamConsumed(channel:count:)``; nil for message channels.
        var inbound: StreamInbound?
        /// Finished both ways, but the reader has not taken every byte yet: the channel (its credit, its slot)
        /// stays until it has, or until the application drops the stream.
        var lingering = false
        /// The application dropped its stream object: once finished both ways, nothing waits for a reader.
        var dropped = false
    }

    private let localParity: UInt32
    private(set) var entries: [UInt32: Entry] = [:]
    /// The next number this side opens.
    private(set) var nextLocal: UInt32
    /// The lowest number the peer has not opened yet (its channels have the other parity).
    private(set) var nextRemoteFloor: UInt64 = 0

    init(isDialer: Bool) {
        localParity = isDialer ? 1 : 0
        nextLocal = isDialer ? 1 : 2
    }

    subscript(channel: UInt32) -> Entry? {
        get { entries[channel] }
        set { entries[channel] = newValue }
    }

    /// Whether `channel` was open once and has been forgotten, so late frames for it are not errors.
    func isForgotten(_ channel: UInt32) -> Bool {
        entries[channel] == nil
            && (channel % 2 == localParity ? channel < nextLocal : UInt64(channel) < nextRemoteFloor)
    }

    /// Whether the peer may open `channel` now: its parity, and above everything it opened before.
    func peerMayOpen(_ channel: UInt32) -> Bool {
        channel % 2 != localParity && UInt64(channel) >= nextRemoteFloor
    }

    /// The number for a new local channel, or nil when the numbers are used up.
    var availableLocal: UInt32? { nextLocal <= UInt32.max - 2 ? nextLocal : nil }

    /// Records a channel this side opened with ``availableLocal``.
    mutating func openedLocal(_ entry: Entry) {
        entries[nextLocal] = entry
        nextLocal += 2
    }

    /// Records a channel the peer opened (``peerMayOpen(_:)`` was checked).
    mutating func openedRemote(_ channel: UInt32, _ entry: Entry) {
        entries[channel] = entry
        nextRemoteFloor = UInt64(channel) + 1
    }

    /// Forgets a channel; returns its entry if it was open.
    mutating func remove(_ channel: UInt32) -> Entry? {
        entries.removeValue(forKey: channel)
    }
}
