internal import Logging
internal import MultipeerIO

// Invitations both ways: this side's (``InviterStateMachine`` for the invitation, the mesh for what it makes of the
// peer), and the peer's that the application accepts into this session (``InviteeStateMachine`` in the invitation,
// the mesh for the admission).

extension Session {
    /// Invites a peer at these addresses (the browser's discovered addresses); see
    /// ``PeerBrowser/invite(_:into:context:timeout:)``. Ends early when the calling task is cancelled.
    func invite(
        _ peer: Peer, addresses: [SocketAddress], serviceType: String, context: [UInt8], timeout: Duration
    ) async -> InvitationOutcome {
        let fp = peer.claimedFingerprint
        let (decision, actions) = mesh.inviteRequested(peer, contextLength: context.count, now: now)
        perform(actions)
        guard case .proceed(let expecting) = decision else {
            if case .outcome(let outcome) = decision { return outcome }
            return .refused(reason: "the invitation was not sent")
        }
        logger.debug(
            "inviting '\(peer.displayName)' at \(addresses.map { "\($0)" }.joined(separator: " "))",
            metadata: peer.logMetadata)
        await network.beginOutgoing(from: identity.fingerprint, to: fp)
        let waiter = makeWaiter()
        let outcome = await runInvitation(
            peer, waiter: waiter, addresses: addresses, expecting: expecting, serviceType: serviceType,
            context: context, timeout: timeout)
        // "Already connected" may wait a moment for the link it means: that wait ends on cancellation too.
        let final = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<InvitationOutcome, Never>) in
                outcomeWaiters[waiter] = continuation
                perform(mesh.inviteFinished(fp, outcome, waiter: waiter))
            }
        } onCancel: {
            Task { await self.finishWaiter(waiter, .refused(reason: "the invitation was cancelled")) }
        }
        logger.info("invitation to '\(peer.displayName)': \(final)", metadata: peer.logMetadata)
        await network.endOutgoing(from: identity.fingerprint, to: fp)
        return final
    }

    func makeWaiter() -> Int {
        nextWaiter += 1
        return nextWaiter
    }

    private func finishWaiter(_ waiter: Int, _ outcome: InvitationOutcome) {
        outcomeWaiters.removeValue(forKey: waiter)?.resume(returning: outcome)
    }

    /// An invitation that cannot even be tried (the browser does not know the peer): reported as one that failed.
    func inviteUnreachable(_ peer: Peer, _ error: ConnectionError) -> InvitationOutcome {
        if mesh.isMember(peer.claimedFingerprint) { return .accepted }
        let outcome = InvitationOutcome.unreachable(error)
        perform(mesh.failedAtOnce(peer, outcome, connecting: .inviting))
        return outcome
    }

    /// Runs the invitation itself: dial, checks, hook, invite, answer.
    private func runInvitation(
        _ peer: Peer, waiter: Int, addresses: [SocketAddress], expecting: PeerFingerprint?, serviceType: String,
        context: [UInt8], timeout: Duration
    ) async -> InvitationOutcome {
        let fp = peer.claimedFingerprint
        let machine = InviterStateMachine(timeout: timeout, id: SecureRandom.bytes(SessionWire.idLength), now: now)
        outgoing[waiter] = OutgoingInvitation(machine: machine, peer: peer, serviceType: serviceType, context: context)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<InvitationOutcome, Never>) in
                guard outgoing[waiter] != nil else {
                    return continuation.resume(returning: .refused(reason: "the invitation was cancelled"))
                }
                outgoing[waiter]?.continuation = continuation
                let loop = network.loop
                let connection = connection
                let deadline = machine.deadline
                outgoing[waiter]?.dial = Task {
                    let dial = Task {
                        await Self.dial(addresses, expecting: expecting, configuration: connection, loop: loop)
                    }
                    let timer = SessionTimer(after: deadline - loop.clock.now(), on: loop) { dial.cancel() }
                    let result = await dial.value
                    let timedOut = !timer.cancel()
                    await self.invitationDialed(waiter, fp: fp, result, timedOut: timedOut)
                }
            }
        } onCancel: {
            Task { await self.performInviter(waiter) { $0.stop(.cancelled) } }
        }
    }

    private func invitationDialed(
        _ waiter: Int, fp: PeerFingerprint, _ result: Result<PeerConnection, ConnectionError>, timedOut: Bool
    ) async {
        guard let invitation = outgoing[waiter] else {
            if case .success(let connection) = result {
                _ = await connection.close(code: 0, reason: "the invitation ended")
            }
            return
        }
        switch result {
        case .failure(let error):
            performInviter(waiter) { $0.dialFailed(error, timedOut: timedOut) }
        case .success(let connection):
            outgoing[waiter]?.connection = connection
            let link = Link(connection: connection, isDialer: true, linkID: invitation.machine.id)
            outgoing[waiter]?.link = link
            let facts = facts(link)
            let refusal =
                MeshStateMachine.identityRefusal(facts, expected: fp) ?? mesh.securityRefusal(facts)
                ?? mesh.weakerIdentity(facts)
            performInviter(waiter) { $0.connected(refusal: refusal) }
            guard outgoing[waiter]?.machine.phase == .checking else { return }
            let decision = await verify(connection)
            guard outgoing[waiter] != nil else { return }
            let isMember = mesh.isMember(fp)
            let encryption = configuration.encryption
            let service = invitation.serviceType
            let context = invitation.context
            let id = invitation.machine.id
            let time = now
            performInviter(waiter) { machine in
                machine.verified(
                    decision, alreadyMember: isMember,
                    invite: { milliseconds in
                        .invite(
                            id: id, timeoutMilliseconds: milliseconds, serviceType: service, context: context,
                            encryption: encryption)
                    }, now: time)
            }
            guard outgoing[waiter]?.machine.phase == .awaitingAnswer else { return }
            link.setHandler { [weak self] link, event in
                guard let self else { return link.close("the session is gone") }
                await self.inviterEvent(waiter, link, event)
            }
        }
    }

    private func inviterEvent(_ waiter: Int, _ link: Link, _ event: Link.Event) {
        switch event {
        case .message(let message):
            performInviter(waiter) { $0.received(message) }
        case .closed(let reason):
            let code = link.connection.closeReason?.code ?? .connectionLost
            performInviter(waiter) { $0.connectionEnded(reason, code: code) }
        }
    }

    /// Feeds an event to one of this side's invitations and performs what it says.
    func performInviter(_ waiter: Int, _ event: (inout InviterStateMachine) -> [InviterStateMachine.Action]) {
        guard var invitation = outgoing[waiter] else { return }
        let actions = event(&invitation.machine)
        outgoing[waiter] = invitation
        for action in actions {
            switch action {
            case .send(let message):
                invitation.link?.send(message)
            case .close(let code, let reason):
                if let link = invitation.link {
                    link.close(reason, code: code)
                } else if let connection = invitation.connection {
                    Task { _ = await connection.close(code: code, reason: reason) }
                }
            case .armDeadline(let delay):
                _ = SessionTimer(after: delay, on: network.loop) { [weak self] in
                    Task { await self?.performInviter(waiter) { $0.deadlinePassed() } }
                }
            case .admit(let session):
                guard let link = invitation.link else { continue }
                links[link.token] = link
                let (kept, admitted) = mesh.admit(facts(link), .theyAccepted(session), now: now)
                perform(admitted)
                if mesh.owner(of: link.token) == nil { links[link.token] = nil }
                let fp = link.fingerprint
                let refusal = kept ? nil : mesh.lastTurnAway
                performInviter(waiter) {
                    $0.admitted(
                        kept: kept, isMember: mesh.isMember(fp), disconnected: mesh.isDisconnected, refusal: refusal)
                }
            case .finish(let outcome):
                invitation.dial?.cancel()
                outgoing[waiter] = nil
                invitation.continuation?.resume(returning: outcome)
            }
        }
    }

    // MARK: Being invited

    /// Accepts an invitation into this session (called by ``Invitation/accept(into:)``, after it claimed it).
    func acceptInvitation(_ invitation: Invitation) async throws(SessionError) {
        let link = invitation.link
        let token = link.token
        // From now on the link's events are the acceptance's: a cancel or a leave during the checks and the hook
        // stops it with the inviter's reason.
        link.setHandler { _, event in invitation.handle(event) }
        func refuse(_ code: SessionError.Code, _ reason: String) -> SessionError {
            link.send(.inviteAnswer(id: invitation.id, answer: .refused, reason: reason))
            link.close("invitation refused")
            return SessionError(code, reason)
        }
        // The invitation came through a listener with the advertiser's identity and group secret: admitting it
        // into a session with others would let the advertiser's group feed this session, and members would later
        // find this session's listener presenting another identity than the one they were introduced to.
        if !mesh.isDisconnected, invitation.listener.fingerprint != identity.fingerprint {
            throw refuse(.invalidParameter, "the advertiser's identity differs from the session's")
        }
        if !mesh.isDisconnected, invitation.listener.groupSecret != configuration.groupSecret {
            throw refuse(.refused, "group secret: the advertiser's group secret differs from the session's")
        }
        // However the acceptance ends, a link the mesh did not keep is not kept here either.
        defer { if mesh.owner(of: token) == nil { links[token] = nil } }
        let facts = facts(link)
        let (check, actions) = mesh.acceptRequested(
            facts, inviterRequiresEncryption: invitation.inviterEncryption == .required)
        switch check {
        case .alreadyConnected:
            link.send(.inviteAnswer(id: invitation.id, answer: .alreadyConnected, reason: "already connected"))
            return link.close("already connected")
        case .refused(let code, let reason):
            throw refuse(code, reason)
        case .proceed:
            links[token] = link
            perform(actions)
        }
        let decision = await verify(link.connection)
        func stop(_ reason: SessionReason, _ error: SessionError) -> SessionError {
            perform(mesh.acceptFailed(token, reason: reason))
            return error
        }
        if case .refuse(let reason) = decision {
            throw stop(
                SessionReason(.refusedByVerificationHook, "refused by the verification hook: \(reason)"),
                refuse(.refused, "refused by the invitee's verification hook: \(reason)"))
        }
        if mesh.isDisconnected { throw stop(.thisSideLeft, refuse(.cancelled, "the session was disconnected")) }
        if let withdrawn = invitation.withdrawn {
            // The inviter gave up while this side's hook was thinking: it will never take this side in.
            throw stop(
                SessionReason(.invitationWithdrawn, withdrawn),
                SessionError(.invitationClosed, "the invitation from \(link.peer) ended: \(withdrawn)"))
        }
        if invitation.connectionEnded || link.isClosed {
            throw stop(
                SessionReason(.invitationWithdrawn, "the inviter went away before the answer"),
                SessionError(.invitationClosed, "the invitation from \(link.peer) ended before it was accepted"))
        }
        if mesh.isMember(link.fingerprint) {
            perform(mesh.acceptFailed(token, reason: SessionReason(.acceptedTheirInvitation, Self.alreadyLinked)))
            link.send(.inviteAnswer(id: invitation.id, answer: .alreadyConnected, reason: "already connected"))
            return link.close("already connected")
        }
        perform(mesh.admit(facts, .weAccept(invitationID: invitation.id), now: now).1)
    }

    /// The reason a duplicate join or invitation is turned away.
    static var alreadyLinked: String { MeshStateMachine.alreadyLinked }

    // MARK: Dialing

    /// Dials a peer's addresses; one that answers "busy" (too many handshakes at once, as when a crowd invites
    /// each other) is tried again after a short, growing, jittered pause (on the loop's clock) until the calling
    /// task is cancelled.
    static func dial(
        _ addresses: [SocketAddress], expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        loop: EventLoop
    ) async -> Result<PeerConnection, ConnectionError> {
        var pause = Duration.milliseconds(50)
        while true {
            do {
                return .success(
                    try await PeerConnection.connect(
                        to: addresses, expecting: expecting, configuration: configuration, loop: loop))
            } catch {
                let error = ConnectionError.wrapping(error)
                guard isBusy(error), !Task.isCancelled else { return .failure(error) }
                guard await SessionTimer.sleep(for: pause * Double.random(in: 0.5...1.5), on: loop) else {
                    return .failure(error)
                }
                pause = min(pause * 2, .seconds(1))
            }
        }
    }

    /// Whether every attempt was answered "busy" (a moment later may succeed).
    static func isBusy(_ error: ConnectionError) -> Bool {
        let codes = error.attempts.isEmpty ? [error.code] : error.attempts.map(\.error.code)
        return codes.allSatisfy { $0 == .tooManyPendingHandshakes }
    }
}
