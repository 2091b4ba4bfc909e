/// How a peer sets up and runs its connections.
///
/// Every limit has a default chosen for a LAN with tens to thousands of peers; the reasons are next to each.
public struct ConnectionConfiguration: Sendable {
    /// This peer's identity: its key signs the TLS handshake, its display name goes into the hello.
    public var identity: PeerIdentity
    /// Whether connections must, may or must not be encrypted. `.required` by default.
    public var encryption: EncryptionPreference
    /// The group secret both peers must know, or nil for none.
    public var groupSecret: GroupSecret?
    /// The most time from TCP connect to both hellos exchanged.
    ///
    /// 10 s: a handshake on a LAN takes milliseconds; ten seconds covers a loaded Raspberry Pi and a lossy
    /// Wi-Fi link, and bounds how long a silent client can hold a pending-handshake slot.
    public var handshakeTimeout: Duration
    /// How long a connection may receive nothing before it sends a ping.
    ///
    /// 2 s: a third of ``silenceTimeout``, so a live peer answers at least twice before it could be
    /// declared gone.
    public var keepaliveInterval: Duration
    /// How long a connection may receive nothing at all (not even a pong) before the peer is declared gone.
    ///
    /// 6 s: the bound for noticing a crashed peer or a dead link, well above any LAN round trip.
    public var silenceTimeout: Duration
    /// How long a graceful close waits for the peer's goodbye before closing anyway.
    public var closeTimeout: Duration
    /// Flow-control windows.
    public var flowControl: FlowController.Configuration
    /// Frame codec limits.
    public var frameLimits: FrameLimits
    /// The scheduler's queue bounds (64 queued messages or writes per channel).
    ///
    /// A deeper queue (4,096) measured faster for 64-byte messages in one scratch run and slower in the benchmark
    /// (0.52-0.59 against 0.55-0.68 M msgs/s, same hour), so the scheduler's default stays.
    public var scheduler: FrameScheduler.Limits
    /// Unsent bytes a sender may queue per connection before `send` suspends.
    ///
    /// 1 MiB: enough to keep the socket busy between wake-ups; beyond it the sender waits, so a slow reader
    /// keeps the sender's memory within its window plus this constant.
    public var sendBufferLimit: Int
    /// Received messages and stream bytes the application has not taken yet, beyond which credit is held back.
    ///
    /// 4 MiB: the channel window; a reader that stops reading stops the sender within one window.
    public var receiveBufferLimit: Int
    /// The most handshakes a listener runs at once; more connections are answered "busy" and closed.
    ///
    /// 128: a LAN peer rarely has more than a few handshakes at once; 128 bounds what a flood of connection
    /// attempts can cost (each pending handshake holds a few kilobytes of TLS state).
    public var maximumPendingHandshakes: Int

    /// Creates a configuration with the defaults described on each property.
    /// - Parameters:
    ///   - identity: This peer's identity.
    ///   - encryption: The encryption preference; `.required` by default.
    ///   - groupSecret: A group secret, or nil.
    public init(identity: PeerIdentity, encryption: EncryptionPreference = .required, groupSecret: GroupSecret? = nil) {
        self.identity = identity
        self.encryption = encryption
        self.groupSecret = groupSecret
        handshakeTimeout = .seconds(10)
        keepaliveInterval = .seconds(2)
        silenceTimeout = .seconds(6)
        closeTimeout = .seconds(2)
        flowControl = FlowController.Configuration()
        frameLimits = .standard
        scheduler = FrameScheduler.Limits()
        sendBufferLimit = 1 << 20
        receiveBufferLimit = 4 << 20
        maximumPendingHandshakes = 128
    }
}
