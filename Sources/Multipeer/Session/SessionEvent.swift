/// A peer's state in a session, as Apple's `MCSessionState` numbers it.
public enum PeerState: Int, Sendable, Hashable, CustomStringConvertible {
    /// Not (or no longer) connected.
    case notConnected = 0
    /// An invitation or an introduction is under way.
    case connecting = 1
    /// Connected: messages and streams can be sent.
    case connected = 2

    /// `notConnected`, `connecting` or `connected`.
    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected: "connected"
        }
    }
}

/// What a session reports, in order.
public enum SessionEvent: Sendable {
    /// A peer's state changed; the reason says why (`invited`, `introduced by Bob`, `accepted`, `left`,
    /// `connection lost: ...`, `declined: busy`...).
    case peerChanged(Peer, PeerState, reason: String)
    /// A peer opened a byte stream to us.
    case stream(PeerStream, from: Peer)
}

/// A message a member sent.
public struct ReceivedMessage: Sendable {
    /// Who sent it.
    public let peer: Peer
    /// The message.
    public let data: [UInt8]
}

/// How a message is sent.
public enum SendMode: Int, Sendable, Hashable {
    /// In order, exactly once, or the link's failure is reported (Apple's `.reliable`).
    case reliable = 0
    /// At most once, possibly out of order, never corrupted; dropped rather than queued (Apple's `.unreliable`).
    case unreliable = 1
}

/// What happened to a message for one peer.
public enum SendResult: Sendable, Hashable {
    /// Queued on the peer's link.
    case enqueued
    /// Not sent, and why.
    case failed(SessionError)
}
