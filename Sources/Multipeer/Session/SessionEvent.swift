public import Foundation

/// A peer's state in a session, as Apple's `MCSessionState` numbers it.
public enum PeerState: Int, Sendable, Hashable, CustomStringConvertible {
    /// Not (or no longer) connected.
    case notConnected = 0
    /// An invitation or an introduction is under way.
    case connecting = 1
    /// Connected: messages and streams can be sent.
    case connected = 2
    /// The link dropped and is being re-established (within ``SessionConfiguration/reconnectGrace``): reliable
    /// messages sent meanwhile are kept and delivered after the reconnection; streams have ended.
    case reconnecting = 3

    /// `notConnected`, `connecting` or `connected`.
    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected: "connected"
        case .reconnecting: "reconnecting"
        }
    }
}

/// What a session reports, in order.
public enum SessionEvent: Sendable {
    /// A peer's state changed; the reason says why: a code to switch on and a sentence (`inviting`,
    /// `introduced by Bob`, `accepted the invitation`, `left`, `connection lost: ...`, `declined: busy`...).
    case peerChanged(Peer, PeerState, reason: SessionReason)
    /// A peer opened a byte stream to us.
    case stream(PeerStream, from: Peer)
    /// Reliable messages to a peer that will never arrive (the peer left, or was not back within the
    /// reconnection grace, or restarted), by the sequence numbers their `send` returned.
    case undelivered(Peer, [UInt64], reason: SessionReason)
    /// A member started sending us a resource (Apple's `didStartReceivingResourceWithName`).
    case resourceStarted(IncomingResource)
    /// A resource arrived, verified, at the file URL in the session's resource folder, or failed with the
    /// reason (Apple's `didFinishReceivingResourceWithName`); a failed one leaves no file behind.
    case resourceFinished(IncomingResource, Result<URL, SessionError>)
}

/// A message a member sent.
public struct ReceivedMessage: Sendable {
    /// Who sent it.
    public let peer: Peer
    /// The message, as a slice of what the link received (the session's header is sliced off, not copied off).
    /// Read it in place: `String(decoding: message.bytes, as: UTF8.self)`, `Data(message.bytes)`, `for byte in`.
    ///
    /// Like every `ArraySlice`, its indices are those of the array it is a slice of: they start at
    /// `bytes.startIndex` (after the header: 9 for a reliable message, 1 for an unreliable one), not at 0. Index
    /// from `startIndex` (`bytes.first`, `bytes.dropFirst(2)`), or take ``data``, which starts at 0.
    public let bytes: ArraySlice<UInt8>

    /// The message as an array of its own, indexed from 0: a copy of ``bytes``, made anew on each access (keep it
    /// in a local rather than reading `data` repeatedly).
    public var data: [UInt8] { Array(bytes) }

    init(peer: Peer, bytes: ArraySlice<UInt8>) {
        self.peer = peer
        self.bytes = bytes
    }
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
    /// Queued for the peer; a reliable message carries its sequence number in the peer's conversation (0 for an
    /// unreliable one), which ``SessionEvent/undelivered(_:_:reason:)`` names if it is ever lost.
    case enqueued(UInt64)
    /// Not sent, and why.
    case failed(SessionError)

    /// Whether the message was queued.
    public var isEnqueued: Bool {
        if case .enqueued = self { return true }
        return false
    }
}

/// A reliable message queued with ``Session/sendExpectingReceipt(_:to:)``: wait for its receipt with
/// ``delivered()``.
public struct PendingDelivery: Sendable {
    /// The peer it goes to.
    public let peer: Peer
    /// The message's number (as `send` returns it).
    public let sequence: UInt64
    let conversation: Conversation
    /// The peer's incarnation the message was numbered in.
    let incarnation: Int

    /// Returns once the peer's application has taken the message from its session's `messages` (it is handed the
    /// messages in order, after everything sent before). Call it once.
    /// - Throws: ``SessionError`` `notConnected` when the peer left first (or was not back within the reconnection
    ///   grace, or restarted), `cancelled` when this session disconnected or the calling task was cancelled,
    ///   `invalidParameter` when already waiting.
    public func delivered() async throws(SessionError) {
        try await conversation.awaitReceipt(sequence, incarnation: incarnation)
    }
}
