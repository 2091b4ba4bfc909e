internal import Foundation
internal import Logging
internal import MultipeerIO

// Joins both ways (an introduction's, a reconnection's), and connections with connection data (Apple's
// `nearbyConnectionData` and `connectPeer`). The mesh decides; these functions do the dialing and the checks that
// need the link's secrets.

extension Session {
    // MARK: Joins this side dials

    /// Dials a member to join it, as the mesh asked.
    func startJoinDial(_ dial: MeshStateMachine.Dial) {
        let member = dial.member
        logger.debug(
            """
            dialing '\(member.displayName)' at \(member.addresses.map { "\($0)" }.joined(separator: " ")) to join \
            \(dial.isReconnection ? "(reconnection)" : "(introduced)")
            """, metadata: ["peer": "\(member.displayName)"])
        let connection = connection
        let loop = network.loop
        Task { [weak self] in
            let attempt = Task {
                await Self.dial(member.addresses, expecting: dial.expecting, configuration: connection, loop: loop)
            }
            let timer = SessionTimer(after: connection.dialTimeout, on: loop) { attempt.cancel() }
            let result = await attempt.value
            timer.cancel()
            guard let self else {
                if case .success(let made) = result { made.abort() }
                return
            }
            await self.joinDialed(result, dial)
        }
    }

    private func joinDialed(_ result: Result<PeerConnection, ConnectionError>, _ dial: MeshStateMachine.Dial) {
        switch result {
        case .failure(let error):
            perform(mesh.joinDialFailed(dial, reason: error.reason))
        case .success(let made):
            let link = Link(connection: made, isDialer: true, linkID: SecureRandom.bytes(SessionWire.idLength))
            links[link.token] = link
            link.setHandler { [weak self] link, event in
                guard let self else { return link.close("the session is gone") }
                await self.joinerEvent(link, event)
            }
            perform(mesh.joinDialConnected(facts(link), expected: dial))
        }
    }

    /// What comes on a link of a join this side dialed, before it is a member link.
    private func joinerEvent(_ link: Link, _ event: Link.Event) {
        let token = link.token
        switch event {
        case .message(.joinAnswer(let accepted, let reason)):
            perform(mesh.joinAnswered(token, accepted: accepted, reason: reason, now: now))
        case .message:
            perform(mesh.joinAnswered(token, accepted: nil, reason: "", now: now))
        case .closed(let reason):
            links[token] = nil
            perform(mesh.linkClosed(token, reason: reason, withdrawn: nil, now: now))
        }
    }

    // MARK: Joins the peer dials

    /// A peer dialed and sends `join` (the network's router hands it here): the proof must be right for a secret
    /// this session knows, bound to this very connection; then the mesh decides (an introduction must name the
    /// peer, or it must be a member coming back).
    func acceptJoin(_ link: Link, sessionID: [UInt8], proof: [UInt8]) {
        guard let secret = mesh.secrets[sessionID],
            HMACSHA256.constantTimeEqual(
                proof,
                SessionWire.joinProof(secret: secret, binding: link.connection.sessionBinding, linkID: link.linkID))
        else {
            link.send(
                .joinAnswer(
                    accepted: false,
                    reason: "the membership proof is wrong: only members of this session can join it this way"))
            return link.close("join refused")
        }
        links[link.token] = link
        link.setHandler { [weak self] link, event in
            guard let self else { return link.close("the session is gone") }
            await self.joinerWaitingEvent(link, event)
        }
        perform(mesh.joinRequested(facts(link), now: now))
    }

    /// What comes on the link of a join this side has not answered yet: nothing is expected but its end.
    private func joinerWaitingEvent(_ link: Link, _ event: Link.Event) {
        switch event {
        case .message(.leave(let reason)):
            perform(mesh.left(link.token, reason: .left(reason)))
        case .message:
            link.close("unexpected control message before the join was answered")
        case .closed(let reason):
            links[link.token] = nil
            perform(mesh.linkClosed(link.token, reason: reason, withdrawn: nil, now: now))
        }
    }

    // MARK: Connecting without discovery (Apple's nearbyConnectionData and connectPeer)

    /// Data for `peer` to connect to this session without discovery (Apple's `nearbyConnectionData`): this
    /// peer's fingerprint and name, where the session listens, and a ticket for `peer` only, good once. Carry it
    /// to `peer` any way you like (it holds no secret beyond the ticket, which only `peer` can use); both sides
    /// then call ``connect(_:connectionData:timeout:)`` with what the other gave them.
    /// - Throws: ``SessionError`` `cancelled` once the session is disconnected.
    public func connectionData(for peer: Peer) throws(SessionError) -> [UInt8] {
        guard !mesh.isDisconnected else { throw SessionError(.cancelled, "the session was disconnected") }
        let ticket = SecureRandom.bytes(ConnectionData.ticketLength)
        tickets.issue(ticket, for: peer.claimedFingerprint)
        return ConnectionData(
            fingerprint: identity.fingerprint, displayName: identity.displayName, ticket: ticket,
            addresses: ownAddresses()
        ).encoded
    }

    /// Connects to `peer` with the connection data it gave this side (Apple's `connectPeer(_:withNearbyConnectionData:)`).
    /// Both sides call it; the one with the lower fingerprint dials the other's addresses and presents the
    /// other's ticket, the other waits for it. Security is as for invitations: identities are proven with TLS,
    /// the verification hook is asked, and encryption preferences must agree.
    /// - Returns: The outcome: accepted, unreachable, refused (a bad ticket, data that names another peer or does
    ///   not decode, security, the calling task cancelled), or timed out (the other side did not connect within
    ///   `timeout`; zero or less means 30 s).
    public func connect(_ peer: Peer, connectionData: [UInt8], timeout: Duration = .seconds(30)) async
        -> InvitationOutcome
    {
        // A refusal before anything is tried is reported like any failed attempt (connecting, then notConnected
        // with the reason), so an application that only watches states learns of it.
        func refuse(_ reason: String) -> InvitationOutcome {
            let outcome = InvitationOutcome.refused(reason: reason)
            perform(
                mesh.failedAtOnce(
                    peer, outcome,
                    connecting: SessionReason(.waitingForConnection, "connecting with connection data")))
            return outcome
        }
        let data: ConnectionData
        do {
            data = try ConnectionData(decoding: connectionData)
        } catch {
            return refuse(error.description)
        }
        guard data.fingerprint == peer.claimedFingerprint else {
            return refuse("the connection data is \(data.displayName)'s, not \(peer.displayName)'s")
        }
        let fp = data.fingerprint
        if mesh.isMember(fp) { return .accepted }
        guard !mesh.isDisconnected else { return .refused(reason: "the session was disconnected") }
        let timeout = timeout <= .zero ? Duration.seconds(30) : timeout
        let named = Peer(identity: .advertised(fp), displayName: data.displayName)
        if identity.fingerprint.bytes.lexicographicallyPrecedes(fp.bytes) {
            return await invite(
                named, addresses: data.addresses, serviceType: SessionWire.directServiceType, context: data.ticket,
                timeout: timeout)
        }
        guard directWaiters[fp] == nil else { return .refused(reason: "already waiting for \(data.displayName)") }
        perform(mesh.waitForDial(named))
        let id = makeWaiter()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<InvitationOutcome, Never>) in
                let timer = SessionTimer(after: timeout, on: network.loop) { [weak self] in
                    Task { await self?.stopWaiting(for: fp, .timedOut, id: id) }
                }
                directWaiters[fp] = (id, continuation, timer)
            }
        } onCancel: {
            Task { await self.stopWaiting(for: fp, .refused(reason: "cancelled by this side"), id: id) }
        }
    }

    /// Withdraws this session's tickets for `peer` and stops waiting for it (Apple's `cancelConnectPeer`); a
    /// dial already under way ends as it ends.
    public func cancelConnect(_ peer: Peer) {
        let fp = peer.claimedFingerprint
        tickets.withdraw(for: fp)
        stopWaiting(for: fp, .refused(reason: "cancelled by this side"))
    }

    /// Ends the wait for `fp`'s dial (only the wait `id`, when given).
    func stopWaiting(for fp: PeerFingerprint, _ outcome: InvitationOutcome, id: Int? = nil) {
        guard let waiter = directWaiters[fp], id == nil || waiter.id == id else { return }
        directWaiters[fp] = nil
        waiter.timer.cancel()
        perform(mesh.waitForDialEnded(fp, outcome))
        waiter.continuation.resume(returning: outcome)
    }

    /// Whether this session issued `ticket` and has not seen it used.
    func holdsTicket(_ ticket: [UInt8]) -> Bool { !mesh.isDisconnected && tickets.owner(of: ticket) != nil }

    /// A peer presents a ticket this session issued: admitted as by an accepted invitation, if it is the peer the
    /// ticket was issued for (the ticket is used up either way).
    func acceptDirect(
        _ link: Link, id: [UInt8], context ticket: [UInt8], timeoutMilliseconds: UInt32,
        encryption: EncryptionPreference, listener: PeerNetwork.ListenerKey
    ) async {
        guard let intended = tickets.owner(of: ticket) else {
            link.send(
                .inviteAnswer(id: id, answer: .refused, reason: "this connection ticket is not (or no longer) valid"))
            return link.close("unknown connection ticket")
        }
        guard link.fingerprint == intended else {
            link.send(
                .inviteAnswer(id: id, answer: .refused, reason: "this connection ticket was issued to another peer"))
            return link.close("connection ticket of another peer")
        }
        // Used up only now: someone else who saw the data cannot spend it.
        tickets.spend(ticket)
        let invitation = Invitation(
            link: link, id: id, context: [],
            timeout: .milliseconds(Int64(timeoutMilliseconds)), serviceType: SessionWire.directServiceType,
            listener: listener, inviterEncryption: encryption, onRelease: {})
        do {
            try await invitation.accept(into: self)
        } catch {
            stopWaiting(for: intended, .refused(reason: error.reason))
        }
    }

    /// Where this session can be reached: its listener's specific addresses, or for a wildcard listener the
    /// addresses of the interfaces discovery uses (loopback last; IPv6 link-local left out, as it needs a scope).
    private func ownAddresses() -> [SocketAddress] {
        let configuration = network.configuration
        var addresses: [IPAddress] = configuration.listenAddresses.filter {
            $0 != .v4(IPv4Address(0, 0, 0, 0)) && $0 != .v6(IPv6Address("::")!)
        }
        let wildcardV4 = configuration.listenAddresses.contains(.v4(IPv4Address(0, 0, 0, 0)))
        let wildcardV6 = configuration.listenAddresses.contains(.v6(IPv6Address("::")!))
        if wildcardV4 || wildcardV6, let interfaces = try? NetworkInterfaces.current() {
            var loopback: [IPAddress] = []
            for interface in interfaces where interface.isUp {
                if case .named(let names) = configuration.discovery.interfaces, !names.contains(interface.name) {
                    continue
                }
                for entry in interface.addresses {
                    let address = entry.address
                    if case .v4 = address, !wildcardV4 { continue }
                    if case .v6 = address, !wildcardV6 || address.isLinkLocal { continue }
                    if address.isLoopback { loopback.append(address) } else { addresses.append(address) }
                }
            }
            addresses += loopback
        }
        return addresses.prefix(ConnectionData.maximumAddresses).map { SocketAddress($0, port: listenPort) }
    }
}
