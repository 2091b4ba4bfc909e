public import MulticastDNS
internal import MultipeerIO

/// Makes this peer visible to browsers of a service type and receives their invitations.
///
/// Publishes a DNS-SD service whose TXT record holds the identity, display name and protocol version
/// (``PeerAdvertisement``) next to the application's discovery info, on the port of the network's listener
/// for this identity. Invitations arrive in ``invitations``; they are limited per inviting peer and in total
/// (``Limits``): one beyond a limit is refused at once with a reason, so a flood costs the honest inviters
/// nothing but the slots the flood already holds.
public final class PeerAdvertiser: Sendable {
    /// Bounds on the invitations an advertiser holds.
    public struct Limits: Sendable, Hashable {
        /// Unanswered invitations from one peer (identity); more are refused.
        public var perPeer = 4
        /// Unanswered invitations in all; more are refused.
        public var total = 32
        /// The longest deadline an inviter may set; longer ones are cut to it.
        public var maximumTimeout: Duration = .seconds(600)

        /// The defaults: 4 per peer, 32 in all, 10 minutes at most.
        public init() {}
    }

    /// What the advertiser has done.
    public struct Statistics: Sendable, Hashable {
        /// Invitations handed to the application.
        public var delivered = 0
        /// Refused because the inviting peer had ``Limits/perPeer`` pending.
        public var refusedPerPeer = 0
        /// Refused because ``Limits/total`` were pending.
        public var refusedTotal = 0
        /// Expired unanswered.
        public var expired = 0
        /// Answered `alreadyConnected` (a crossing invitation or an existing link).
        public var alreadyConnected = 0
    }

    /// The service type advertised.
    public let serviceType: ServiceType
    /// This side's identity.
    public let identity: PeerIdentity
    /// The network the advertiser uses.
    public let network: PeerNetwork
    /// Invitations not yet refused by a limit, in arrival order; at most ``Limits/total`` wait unread.
    public let invitations: AsyncStream<Invitation>
    /// The limits.
    public let limits: Limits
    /// The port browsers are told to dial.
    public let port: UInt16

    let connection: ConnectionConfiguration
    let key: PeerNetwork.AdvertiserKey
    private let sink: AsyncStream<Invitation>.Continuation
    private let advertisement: ServiceAdvertisement?
    /// The registration in the network's wide-area domain, when it has one.
    private let wideAreaRegistration: Int?
    private let state = Lock(State())

    private struct State {
        /// What the TXT record is made of now: the application's info and the relayed address.
        var discoveryInfo: [String: String] = [:]
        var relayed: SocketAddress?
        var pending: [PeerFingerprint: Int] = [:]
        var total = 0
        var stopped = false
        var statistics = Statistics()
    }

    /// Starts advertising.
    /// - Parameters:
    ///   - serviceType: The service type, such as `chat` (1-15 letters of either case, digits and hyphens).
    ///   - identity: This side's identity; its display name is the instance name.
    ///   - discoveryInfo: The application's keys and values (not starting with `mp.`).
    ///   - encryption: What the listener negotiates with inviters; accept only into sessions whose preference
    ///     matches (a `.required` session refuses a plaintext inviter).
    ///   - groupSecret: A group secret inviters must prove.
    ///   - limits: Bounds on pending invitations.
    ///   - network: The process's network.
    /// - Throws: ``SessionError`` with `invalidParameter` for a bad service type or discovery info, or
    ///   `unavailable` when discovery or the listener cannot start.
    public convenience init(
        serviceType: String, identity: PeerIdentity, discoveryInfo: [String: String] = [:],
        encryption: EncryptionPreference = .required, groupSecret: GroupSecret? = nil, limits: Limits = Limits(),
        network: PeerNetwork
    ) async throws(SessionError) {
        try await self.init(
            serviceType: serviceType, identity: identity, discoveryInfo: discoveryInfo, encryption: encryption,
            groupSecret: groupSecret, limits: limits, network: network, publish: true)
    }

    /// Starts an advertiser; `publish: false` receives invitations without a DNS-SD advertisement (tests that
    /// dial the listener directly).
    init(
        serviceType: String, identity: PeerIdentity, discoveryInfo: [String: String] = [:],
        encryption: EncryptionPreference = .required, groupSecret: GroupSecret? = nil, limits: Limits = Limits(),
        network: PeerNetwork, publish: Bool
    ) async throws(SessionError) {
        let type: ServiceType
        do {
            type = try ServiceType(serviceType)
        } catch {
            throw SessionError(.invalidParameter, "service type '\(serviceType)': \(error)")
        }
        do {
            _ = try PeerAdvertisement(
                fingerprint: identity.fingerprint, displayName: identity.displayName, discoveryInfo: discoveryInfo)
        } catch {
            throw SessionError(.invalidParameter, error.reason)
        }
        if encryption == .none, groupSecret != nil {
            throw SessionError(.invalidParameter, "a group secret needs TLS; encryption .none refuses it")
        }
        self.serviceType = type
        self.identity = identity
        self.network = network
        self.limits = limits
        connection = network.connectionConfiguration(
            identity: identity, encryption: encryption, groupSecret: groupSecret)
        key = PeerNetwork.AdvertiserKey(listener: PeerNetwork.ListenerKey(connection), serviceType: type)
        (invitations, sink) = AsyncStream<Invitation>.makeStream(bufferingPolicy: .bufferingOldest(limits.total))
        port = try await network.listenPort(for: connection)
        let relayed = await network.relayedAddress(for: key.listener)
        state.withLock {
            $0.discoveryInfo = discoveryInfo
            $0.relayed = relayed
        }
        let txt: TXTRecord
        do {
            txt = try PeerAdvertisement(
                fingerprint: identity.fingerprint, displayName: identity.displayName, discoveryInfo: discoveryInfo,
                relayedAddress: relayed
            ).txtRecord
        } catch {
            throw SessionError(.invalidParameter, error.reason)
        }
        if publish {
            let stack = try await network.discovery()
            do {
                advertisement = try await stack.advertise(type, name: identity.displayName, port: port, txt: txt)
            } catch {
                throw SessionError(.unavailable, "cannot advertise: \(error.reason)")
            }
        } else {
            advertisement = nil
        }
        if publish, let wideArea = network.wideArea, wideArea.configuration.key != nil {
            // Registered in the background's terms: a DNS server that is away is reported on the network's
            // events and retried at each refresh, and multicast DNS on the link works meanwhile.
            wideAreaRegistration = await wideArea.register(
                serviceType: type,
                instance: WideAreaRecords.instanceLabel(
                    displayName: identity.displayName, fingerprint: identity.fingerprint),
                host: WideAreaRecords.hostLabel(fingerprint: identity.fingerprint), port: port, txt: txt.strings)
        } else {
            wideAreaRegistration = nil
        }
        do {
            try await network.register(self, key: key)
        } catch {
            await advertisement?.stop()
            if let wideAreaRegistration { await network.wideArea?.unregister(wideAreaRegistration) }
            throw error
        }
    }

    /// The counters so far.
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Replaces the application's discovery info; browsers report the peer updated.
    /// - Throws: ``SessionError`` with `invalidParameter` for a reserved key or an oversized record.
    public func updateDiscoveryInfo(_ discoveryInfo: [String: String]) throws(SessionError) {
        let relayed = state.withLock { $0.relayed }
        do throws(PeerAdvertisementError) {
            publish(
                try PeerAdvertisement(
                    fingerprint: identity.fingerprint, displayName: identity.displayName, discoveryInfo: discoveryInfo,
                    relayedAddress: relayed
                ).txtRecord)
        } catch {
            throw SessionError(.invalidParameter, error.reason)
        }
        state.withLock { $0.discoveryInfo = discoveryInfo }
    }

    /// The listener's relayed address changed (allocated, lost, allocated again): advertised from now on.
    func relayChanged(_ relayed: SocketAddress?) {
        let (info, stopped) = state.withLock { state -> ([String: String], Bool) in
            state.relayed = relayed
            return (state.discoveryInfo, state.stopped)
        }
        guard !stopped,
            let txt = try? PeerAdvertisement(
                fingerprint: identity.fingerprint, displayName: identity.displayName, discoveryInfo: info,
                relayedAddress: relayed
            ).txtRecord
        else { return }
        publish(txt)
    }

    /// Publishes a new TXT record on the link and in the wide-area domain.
    private func publish(_ txt: TXTRecord) {
        advertisement?.updateTXT(txt)
        if let wideAreaRegistration, let wideArea = network.wideArea {
            Task { await wideArea.update(wideAreaRegistration, txt: txt.strings) }
        }
    }

    /// Stops advertising (goodbye packets) and refuses further invitations; pending ones stay answerable.
    public func stop() async {
        let first = state.withLock { state -> Bool in
            defer { state.stopped = true }
            return !state.stopped
        }
        guard first else { return }
        sink.finish()
        await network.unregister(advertiserKey: key, self)
        await advertisement?.stop()
        if let wideAreaRegistration { await network.wideArea?.unregister(wideAreaRegistration) }
    }

    /// An invitation arrived on a new connection (called by the network's router).
    func receive(
        _ link: Link, id: [UInt8], timeoutMilliseconds: UInt32, context: [UInt8],
        inviterEncryption: EncryptionPreference
    ) async {
        let peer = link.fingerprint
        let refusal = state.withLock { state -> String? in
            if state.stopped { return "the peer stopped advertising" }
            if state.pending[peer, default: 0] >= limits.perPeer {
                state.statistics.refusedPerPeer += 1
                return "too many invitations from you are pending here (\(limits.perPeer))"
            }
            if state.total >= limits.total {
                state.statistics.refusedTotal += 1
                return "too many invitations are pending here (\(limits.total)); try again later"
            }
            state.pending[peer, default: 0] += 1
            state.total += 1
            return nil
        }
        if let refusal {
            link.send(.inviteAnswer(id: id, answer: .refused, reason: refusal))
            return link.close("invitation refused")
        }
        let timeout = min(
            timeoutMilliseconds == 0 ? Duration.seconds(30) : .milliseconds(Int64(timeoutMilliseconds)),
            limits.maximumTimeout)
        let invitation = Invitation(
            link: link, id: id, context: context, timeout: timeout, serviceType: serviceType.description,
            listener: key.listener, inviterEncryption: inviterEncryption
        ) { [weak self] in self?.release(peer) }
        let loop = network.loop
        invitation.attach(
            SessionTimer(after: timeout, on: loop) { [weak self] in
                guard invitation.isOpen else { return }
                self?.state.withLock { $0.statistics.expired += 1 }
                invitation.handle { $0.deadlinePassed(timeout: timeout) }
            })
        link.setHandler { _, event in invitation.handle(event) }
        // A crossing invitation: the lower identity's proceeds, so hold this one while ours to the peer is
        // under way, and answer it from what ours became.
        let network = network
        let me = identity.fingerprint
        if me.bytes.lexicographicallyPrecedes(peer.bytes), await network.isInviting(peer, from: me) {
            await network.waitForOutgoing(from: me, to: peer)
        }
        if await network.isMember(peer, of: me) {
            guard invitation.isOpen else { return }
            state.withLock { $0.statistics.alreadyConnected += 1 }
            return invitation.handle { $0.alreadyConnected() }
        }
        guard invitation.isOpen else { return }
        let unread: String
        switch sink.yield(invitation) {
        case .enqueued:
            state.withLock { $0.statistics.delivered += 1 }
            return
        case .terminated: unread = "the peer stopped advertising"
        default: unread = "busy: too many unread invitations"
        }
        invitation.handle { $0.refuse(unread) }
    }

    private func release(_ peer: PeerFingerprint) {
        state.withLock { state in
            let left = state.pending[peer, default: 1] - 1
            state.pending[peer] = left > 0 ? left : nil
            state.total -= 1
        }
    }
}
