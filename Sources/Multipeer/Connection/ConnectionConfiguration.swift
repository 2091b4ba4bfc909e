public import Logging
internal import MultipeerIO

/// How a peer sets up and runs its connections: identity, security, and every limit and timing, in one place.
///
/// Every limit has a default chosen for a LAN with tens to thousands of peers; the reasons are next to each.
/// ``validate()`` checks the rules between them (``PeerConnection`` and ``PeerListener`` call it).
public struct ConnectionConfiguration: Sendable {
    /// This peer's identity: its key signs the TLS handshake, its display name goes into the hello.
    public var identity: PeerIdentity
    /// Whether connections must, may or must not be encrypted. `.required` by default.
    ///
    /// A connection that expects a particular peer, or has a ``groupSecret``, uses TLS whatever this allows:
    /// only TLS proves an identity or keeps a group proof from being relayed.
    public var encryption: EncryptionPreference
    /// The group secret both peers must know, or nil for none. Requires TLS (`.none` with a secret is invalid).
    public var groupSecret: GroupSecret?

    // MARK: Timing

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
    /// When a peer has several addresses, how long an attempt may stay pending before the next address is tried
    /// alongside it (RFC 8305, Happy Eyeballs version 2); at least 10 ms, as the RFC requires.
    ///
    /// 250 ms: RFC 8305 section 8's recommended value. A LAN peer answers (or refuses) within a few milliseconds,
    /// so a quarter second only passes when an address is dead; waiting longer delays the connection, waiting
    /// less starts attempts that a working address would have made unnecessary.
    public var connectionAttemptDelay: Duration
    /// The most time a dial to a peer's addresses may take in all, from the first attempt to the established
    /// connection.
    ///
    /// 15 s: room for the peer's 10 s handshake timeout after a few addresses were tried in turn, and the bound
    /// on how long a caller waits for a peer whose every address is dead (a TCP connect to a silent address
    /// would otherwise last the kernel's two minutes of retries).
    public var dialTimeout: Duration

    // MARK: Memory: what a peer can make this side hold

    /// The connection's receive window in bytes: the most a peer can make this side hold for it in stream
    /// data and messages (unfinished, or delivered and not yet taken by the application), all channels
    /// together.
    ///
    /// 16 MiB: covers the bandwidth-delay product of a gigabit LAN at 100 ms or loopback at any speed.
    public var connectionWindow: Int
    /// The receive window of each stream in bytes: the most one stream buffers for a slow reader.
    ///
    /// 4 MiB: one stream alone can still fill a gigabit link at 30 ms round trip, and a quarter of the
    /// connection window stays for the others.
    public var streamWindow: Int
    /// The longest message this side accepts, in bytes; announced in the hello, so a peer's larger `send` fails
    /// at once with ``ConnectionError/Code/messageTooLarge(length:limit:)``. Larger data goes in a stream.
    ///
    /// 4 MiB: a photo or a document fits; a message is held whole in memory (Apple's `send` takes a `Data`),
    /// and the connection window must hold twice the largest message (so one always fits while another is
    /// being read), which 16 MiB does with room for streams.
    public var maximumMessageLength: Int
    /// The most channels (streams and message channels, both ways) open at once.
    ///
    /// 1024: Apple's sessions use a handful of streams and resources per peer, so more means a misbehaving
    /// peer.
    public var maximumChannels: Int
    /// Unsent bytes a sender may queue per connection before `send` suspends (and `trySend` fails).
    ///
    /// 1 MiB: enough to keep the socket busy between wake-ups; beyond it the sender waits, so a slow reader
    /// keeps the sender's memory within its window plus this constant.
    public var sendBufferLimit: Int
    /// Unreliable messages (datagrams) delivered but not yet read, in bytes plus a fixed charge per message,
    /// beyond which further datagrams are dropped (and counted) instead of queued.
    ///
    /// 1 MiB: datagrams are for fresh state; an application that falls this far behind wants the newest.
    public var unreliableBufferLimit: Int

    // MARK: Listener

    /// The most handshakes a listener runs at once; more connections are answered "busy" and closed.
    ///
    /// 128: a LAN peer rarely has more than a few handshakes at once; 128 bounds what a flood of connection
    /// attempts can cost (each pending handshake holds a few kilobytes of TLS state).
    public var maximumPendingHandshakes: Int
    /// The most handshakes a listener runs at once for one host address (an IPv4 peer of a dual-stack listener
    /// counts as its IPv4 address).
    ///
    /// 8: one honest host connects once per session it joins; eight keeps a single host from taking every
    /// slot of ``maximumPendingHandshakes`` for the length of a handshake timeout.
    public var maximumPendingHandshakesPerHost: Int
    /// The most established connections a listener keeps at once; further peers are refused with
    /// ``ConnectionError/Code/tooManyConnections`` until some end.
    ///
    /// 256: far beyond a session's members (Apple allows 8), and with the windows above it bounds what peers
    /// can make one listener hold.
    public var maximumConnections: Int
    /// How many verification-code exchanges may be abandoned at a listener within a minute (the dialer went away
    /// after seeing this side's nonce, ``ConnectionError/Code/verificationAbandoned``) before it answers new
    /// connections "busy" for the rest of that minute.
    ///
    /// 16: an honest dialer abandons one only when it crashes mid-handshake. A man in the middle learns this
    /// side's code before he reveals his nonce and can abandon every attempt that would not match the code his
    /// other victim shows; each attempt wins with probability 10^-6, so this limit holds him to 16 a minute
    /// (about 10^-5 over the ten minutes a pairing might wait) instead of a thousand a second. The price: while an
    /// attack goes on, honest peers wait up to a minute.
    public var maximumAbandonedVerificationsPerMinute: Int
    /// Established connections a listener queues for the application to take from `connections`; when the
    /// application falls this far behind, a new connection is closed with a goodbye saying so.
    ///
    /// 64: an application takes connections as they come; a longer queue only hides a stuck one.
    public var maximumQueuedConnections: Int

    /// Where connections log (metadata `area` = `connection`, `peer` and `fingerprint` once known).
    /// `MultipeerLogging.fallback` by default: nothing unless `MULTIPEER_LOG` names a level. A
    /// ``PeerNetwork`` sets it to its own configuration's logger.
    public var logger: Logger = MultipeerLogging.fallback
    /// The network's relayed addresses and allocations, when it has a relay: dials reach relayed addresses
    /// through it.
    var relayRoutes: RelayRoutes?

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
        connectionAttemptDelay = .milliseconds(250)
        dialTimeout = .seconds(15)
        connectionWindow = 16 << 20
        streamWindow = 4 << 20
        maximumMessageLength = 4 << 20
        maximumChannels = 1024
        sendBufferLimit = 1 << 20
        unreliableBufferLimit = 1 << 20
        maximumPendingHandshakes = 128
        maximumPendingHandshakesPerHost = 8
        maximumConnections = 256
        maximumQueuedConnections = 64
        maximumAbandonedVerificationsPerMinute = 16
    }

    /// Checks the rules between the settings.
    /// - Throws: ``ConnectionError`` with code `.invalidConfiguration`, naming the rule.
    public func validate() throws(ConnectionError) {
        let minimumWindow = Int(FlowController.Configuration.initialCredit)
        let maximumWindow = Int(SendWindow.maximumCredit)
        if groupSecret != nil && encryption == .none {
            throw .invalidConfiguration("a group secret requires TLS; encryption .none cannot use one")
        }
        for (name, value) in [("connectionWindow", connectionWindow), ("streamWindow", streamWindow)]
        where !(minimumWindow...maximumWindow).contains(value) {
            throw .invalidConfiguration("\(name) is \(value); it must be between \(minimumWindow) and \(maximumWindow)")
        }
        // The range first: the window of a limit near Int.max cannot even be computed.
        guard (0...Int(UInt32.max)).contains(maximumMessageLength),
            Int(FlowController.messageWindow(maximumMessageLength: maximumMessageLength)) <= connectionWindow
        else {
            let largest = FlowController.maximumMessageLength(messageWindow: UInt32(connectionWindow))
            throw .invalidConfiguration(
                "maximumMessageLength is \(maximumMessageLength); with a connectionWindow of \(connectionWindow) it "
                    + "can be at most \(largest) (the window must hold two of the largest messages)")
        }
        for (name, value) in [
            ("maximumChannels", maximumChannels), ("sendBufferLimit", sendBufferLimit),
            ("maximumPendingHandshakes", maximumPendingHandshakes),
            ("maximumPendingHandshakesPerHost", maximumPendingHandshakesPerHost),
            ("maximumConnections", maximumConnections), ("maximumQueuedConnections", maximumQueuedConnections),
            ("maximumAbandonedVerificationsPerMinute", maximumAbandonedVerificationsPerMinute),
        ] where value < 1 {
            throw .invalidConfiguration("\(name) is \(value); it must be at least 1")
        }
        if keepaliveInterval <= .zero || silenceTimeout <= keepaliveInterval {
            throw .invalidConfiguration("keepaliveInterval must be positive and shorter than silenceTimeout")
        }
        try dial.validate()
    }

    // MARK: Derived settings of the wire layer

    /// The frame codec's limits.
    var frameLimits: FrameLimits { .standard }
    /// The flow controller's windows.
    var flowControl: FlowController.Configuration {
        FlowController.Configuration(
            connectionWindow: UInt32(connectionWindow), channelWindow: UInt32(streamWindow),
            messageWindow: FlowController.messageWindow(maximumMessageLength: maximumMessageLength),
            maximumChannels: maximumChannels)
    }
    /// The dial's pacing.
    var dial: DialConfiguration {
        DialConfiguration(connectionAttemptDelay: connectionAttemptDelay, timeout: dialTimeout)
    }
    /// The scheduler's bounds.
    var schedulerLimits: FrameScheduler.Limits { FrameScheduler.Limits() }
}
