public import MulticastDNS
public import MultipeerIO

extension PeerConnection {
    /// Connects to a peer that has several addresses, as discovery finds them, trying them in the manner of
    /// RFC 8305 (Happy Eyeballs version 2).
    ///
    /// The addresses are ordered IPv6, IPv4, IPv6, IPv4, ... (each family in the given order, duplicates
    /// dropped). The first attempt starts at once; each further one starts when the previous has been
    /// pending for ``DialConfiguration/connectionAttemptDelay``, or at once when an attempt fails. An attempt
    /// is the whole setup of ``connect(to:expecting:configuration:loop:)``, so an address where someone else
    /// answers fails like one that refuses, and the next is tried. The first connection established wins;
    /// the other attempts are cancelled, and one that completes anyway is closed.
    ///
    /// When no attempt succeeds, the error's ``ConnectionError/attempts`` lists every attempt's address and
    /// failure. Its code is ``ConnectionError/Code/unreachable``, unless an attempt reached a peer and was
    /// refused for security (``ConnectionError/Code/identityMismatch(expected:actual:)``,
    /// ``ConnectionError/Code/groupSecretMismatch``, ``ConnectionError/Code/encryptionMismatch(local:remote:)``,
    /// ``ConnectionError/Code/plaintextRefused``): then the code is that refusal's (the first, in the order the attempts started), so a security problem
    /// is never hidden among addresses that did not answer. Cancelling the calling task cancels every attempt.
    ///
    /// - Parameters:
    ///   - addresses: The peer's addresses; a link-local IPv6 address needs its interface index as scope ID.
    ///     At most 32.
    ///   - expecting: The identity discovery advertised for the peer; nil accepts whoever answers.
    ///   - configuration: This side's identity and settings.
    ///   - dial: The attempt delay and the bound on the whole dial.
    ///   - loop: The event loop that will own the connection.
    /// - Returns: The first connection established.
    /// - Throws: ``ConnectionError`` as described above; ``ConnectionError/Code/handshakeTimedOut(limit:)`` for
    ///   attempts still pending when ``DialConfiguration/timeout`` passed; ``ConnectionError/Code/closedLocally``
    ///   when the task was cancelled; ``ConnectionError/Code/invalidConfiguration`` for more than 32 addresses
    ///   or a dial configuration that breaks its rules.
    public static func connect(
        to addresses: [SocketAddress], expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        dial: DialConfiguration = DialConfiguration(), loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try await PeerDialer.dial(
            addresses, expecting: expecting, configuration: configuration, dial: dial, loop: loop)
    }

    /// Connects to a peer a `ServiceBrowser` found: every address it was seen at (link-local IPv6 ones on the
    /// interface they were learnt on), the port from its SRV record, and the identity from its
    /// ``PeerAdvertisement``, which the peer must prove. The addresses are tried as the
    /// `connect(to:expecting:configuration:dial:loop:)` that takes addresses tries them.
    ///
    /// - Parameters:
    ///   - service: The discovered service.
    ///   - configuration: This side's identity and settings.
    ///   - dial: The attempt delay and the bound on the whole dial.
    ///   - loop: The event loop that will own the connection.
    /// - Returns: The first connection established.
    /// - Throws: ``ConnectionError``: ``ConnectionError/Code/notAPeer`` when the TXT record is not a valid
    ///   advertisement (the reason says which key is missing or malformed),
    ///   ``ConnectionError/Code/unsupportedVersion(major:)`` when it advertises another major protocol
    ///   version, otherwise as the dial to several addresses.
    public static func connect(
        to service: DiscoveredService, configuration: ConnectionConfiguration,
        dial: DialConfiguration = DialConfiguration(), loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try await connect(
            name: service.name, txt: service.txt, port: service.port, addresses: service.addresses,
            configuration: configuration, dial: dial, loop: loop)
    }

    /// Connects to a peer a browser's state machine resolved, as the `connect(to:configuration:dial:loop:)` that
    /// takes a `DiscoveredService` does.
    ///
    /// - Parameters:
    ///   - instance: The resolved instance.
    ///   - configuration: This side's identity and settings.
    ///   - dial: The attempt delay and the bound on the whole dial.
    ///   - loop: The event loop that will own the connection.
    /// - Returns: The first connection established.
    /// - Throws: ``ConnectionError`` as for a `DiscoveredService`.
    public static func connect(
        to instance: DiscoveredInstance, configuration: ConnectionConfiguration,
        dial: DialConfiguration = DialConfiguration(), loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try await connect(
            name: instance.name, txt: TXTRecord(decoding: instance.txt), port: instance.port,
            addresses: instance.addresses, configuration: configuration, dial: dial, loop: loop)
    }

    /// The socket addresses to dial for discovered addresses: link-local IPv6 ones scoped to the interface
    /// they were learnt on (without it the kernel cannot tell which link is meant).
    /// - Parameters:
    ///   - addresses: What discovery found.
    ///   - port: The port from the SRV record.
    /// - Returns: The addresses in the same order.
    static func socketAddresses(_ addresses: [DiscoveredAddress], port: UInt16) -> [SocketAddress] {
        addresses.map { discovered in
            guard case .v6(let v6) = discovered.address, v6.isLinkLocal else {
                return SocketAddress(discovered.address, port: port)
            }
            return SocketAddress(discovered.address, port: port, scopeID: discovered.interfaceIndex)
        }
    }

    private static func connect(
        name: String, txt: TXTRecord, port: UInt16, addresses: [DiscoveredAddress],
        configuration: ConnectionConfiguration, dial: DialConfiguration, loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        let advertisement: PeerAdvertisement
        do {
            advertisement = try PeerAdvertisement(parsing: txt)
        } catch {
            throw ConnectionError(
                code: .notAPeer, reason: "the advertisement of '\(name)' cannot be dialled: \(error.reason)")
        }
        let ours = PeerAdvertisement.ProtocolVersion.current
        guard advertisement.protocolVersion.major == ours.major else {
            throw ConnectionError(
                code: .unsupportedVersion(major: advertisement.protocolVersion.major),
                reason: "'\(name)' advertises protocol version \(advertisement.protocolVersion); this side speaks "
                    + "\(ours)")
        }
        return try await PeerDialer.dial(
            socketAddresses(addresses, port: port), expecting: advertisement.fingerprint,
            configuration: configuration, dial: dial, loop: loop)
    }
}
