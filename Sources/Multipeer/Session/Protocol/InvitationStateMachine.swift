internal import MultipeerIO

/// One invitation as the inviter runs it (`docs/PROTOCOL.md` section 4.2): the dial, the checks of the connection
/// and the verification hook, the invite with the time left of the deadline, then whichever comes first of the
/// answer, the connection's end, the deadline, this session leaving, or the inviting task being cancelled.
///
/// Pure: the ``Session`` actor reports each event with its event loop's time and performs the actions.
struct InviterStateMachine {
    enum Phase: Sendable, Equatable {
        case dialing
        /// Connected; the connection's checks and the hook run.
        case checking
        /// The invite was sent.
        case awaitingAnswer
        /// The peer accepted; the mesh decides whether the link is kept.
        case admitting
        case finished(InvitationOutcome)
    }

    /// What the owner does.
    enum Action: Sendable, Equatable {
        /// Send a control message on the invitation's connection.
        case send(SessionWire.Message)
        /// Close the connection with a code and a reason the peer sees.
        case close(code: UInt32, reason: String)
        /// Offer the connection to the mesh as the peer's member link; the invitee holds `session`.
        case admit(SessionWire.SessionKey)
        /// Arm the answer's deadline.
        case armDeadline(after: Duration)
        /// The invitation's outcome.
        case finish(InvitationOutcome)
    }

    /// Why an invitation stops early.
    enum Stop: Sendable, Equatable {
        /// This session disconnected.
        case disconnected
        /// The inviting task was cancelled.
        case cancelled
    }

    /// The timeout the invitation was given (30 s for zero or less), dialing included.
    let timeout: Duration
    /// When the invitation expires.
    let deadline: IOInstant
    /// The invitation's identifier (also its link's).
    let id: [UInt8]
    private(set) var phase = Phase.dialing

    init(timeout: Duration, id: [UInt8], now: IOInstant) {
        self.timeout = timeout <= .zero ? .seconds(30) : timeout
        self.id = id
        deadline = now + self.timeout
    }

    var outcome: InvitationOutcome? {
        if case .finished(let outcome) = phase { outcome } else { nil }
    }

    private mutating func finish(_ outcome: InvitationOutcome, after actions: [Action] = []) -> [Action] {
        phase = .finished(outcome)
        return actions + [.finish(outcome)]
    }

    /// The dial failed (`timedOut`: because the deadline cancelled it).
    mutating func dialFailed(_ error: ConnectionError, timedOut: Bool) -> [Action] {
        guard phase == .dialing else { return [] }
        if timedOut { return finish(.timedOut) }
        return finish(Self.isSecurityRefusal(error) ? .refused(reason: error.reason) : .unreachable(error))
    }

    /// The dial connected; `refusal` is why the mesh's rules refuse the connection (identity, security), if they do.
    mutating func connected(refusal: String?) -> [Action] {
        guard phase == .dialing else { return [.close(code: 0, reason: "the invitation ended")] }
        if let refusal { return finish(.refused(reason: refusal), after: [.close(code: 3, reason: refusal)]) }
        phase = .checking
        return []
    }

    /// The verification hook decided; the invite goes out with the time left, or the invitation ends here.
    mutating func verified(
        _ decision: VerificationDecision, alreadyMember: Bool, invite: (UInt32) -> SessionWire.Message, now: IOInstant
    ) -> [Action] {
        guard phase == .checking else { return [.close(code: 0, reason: "the invitation ended")] }
        if case .refuse(let reason) = decision {
            return finish(
                .refused(reason: "refused by this side's verification hook: \(reason)"),
                after: [.close(code: 3, reason: "refused by the verification hook: \(reason)")])
        }
        if alreadyMember { return finish(.accepted, after: [.close(code: 0, reason: "already connected")]) }
        let remaining = deadline - now
        guard remaining > .zero else {
            return finish(.timedOut, after: [.close(code: 0, reason: "invitation timed out")])
        }
        phase = .awaitingAnswer
        let capped = min(remaining, .seconds(3_600_000))
        let milliseconds = UInt32(
            clamping: capped.components.seconds * 1000 + capped.components.attoseconds / 1_000_000_000_000_000)
        return [.send(invite(max(1, milliseconds))), .armDeadline(after: remaining)]
    }

    /// A control message on the invitation's connection.
    mutating func received(_ message: SessionWire.Message) -> [Action] {
        guard phase == .awaitingAnswer else { return [] }
        guard case .inviteAnswer(let answerID, let answer, let reason, let session) = message, answerID == id else {
            return brokeTheProtocol()
        }
        // Only an acceptance names the invitee's session, and it always does.
        switch (answer, session) {
        case (.accepted, let session?):
            phase = .admitting
            return [.admit(session)]
        case (.alreadyConnected, nil): return finish(.accepted, after: [.close(code: 0, reason: "already connected")])
        case (.declined, nil): return finish(.declined(reason: reason), after: [.close(code: 0, reason: "declined")])
        case (.timedOut, nil): return finish(.timedOut, after: [.close(code: 0, reason: "invitation timed out")])
        case (.refused, nil): return finish(.refused(reason: reason), after: [.close(code: 0, reason: "refused")])
        case (.accepted, nil), (_, .some): return brokeTheProtocol()
        }
    }

    /// Anything but an answer to this invitation, or an answer whose session does not go with it.
    private mutating func brokeTheProtocol() -> [Action] {
        finish(
            .refused(reason: "the peer broke the protocol (no answer to the invitation)"),
            after: [.close(code: 0, reason: "expected an answer to the invitation")])
    }

    /// The mesh kept the link (or the peer is a member anyway), or turned it away and why.
    mutating func admitted(kept: Bool, isMember: Bool, disconnected: Bool, refusal: String?) -> [Action] {
        guard phase == .admitting else { return [] }
        if kept || isMember { return finish(.accepted) }
        if disconnected { return finish(.refused(reason: "the session was disconnected")) }
        return finish(.refused(reason: refusal ?? "this side's session turned the link away"))
    }

    /// The connection ended before the answer.
    mutating func connectionEnded(_ reason: String, code: ConnectionError.Code) -> [Action] {
        guard phase == .awaitingAnswer else { return [] }
        return finish(
            .unreachable(ConnectionError(code: code, reason: "the connection ended before an answer: \(reason)")))
    }

    /// The deadline passed.
    mutating func deadlinePassed() -> [Action] {
        guard phase == .awaitingAnswer else { return [] }
        return finish(
            .timedOut,
            after: [
                .send(.inviteCancel(id: id, reason: "no answer within \(timeout)")),
                .close(code: 0, reason: "invitation timed out"),
            ])
    }

    /// The invitation stops: this session left (the invitee, which may have adopted the link already, hears
    /// `leave`), or the inviting task was cancelled (the invitee hears the invitation withdrawn).
    mutating func stop(_ stop: Stop) -> [Action] {
        let outcome: InvitationOutcome =
            stop == .disconnected
            ? .refused(reason: "the session was disconnected") : .refused(reason: "the invitation was cancelled")
        switch phase {
        case .finished: return []
        case .dialing, .checking: return finish(outcome, after: [.close(code: 0, reason: "the invitation ended")])
        case .awaitingAnswer, .admitting:
            let word: SessionWire.Message =
                stop == .disconnected
                ? .leave(reason: "left") : .inviteCancel(id: id, reason: "the inviter cancelled the invitation")
            return finish(outcome, after: [.send(word), .close(code: 0, reason: "the invitation ended")])
        }
    }

    static func isSecurityRefusal(_ error: ConnectionError) -> Bool {
        switch error.code {
        case .identityMismatch, .groupSecretMismatch, .encryptionMismatch, .plaintextRefused: true
        default: false
        }
    }
}

/// One invitation as the invitee holds it (``Invitation``): pending until the application answers or it ends
/// (its deadline, the inviter withdrawing it or leaving, the connection ending, a limit), then being accepted into
/// a session, then answered. A withdrawal seen while accepting stops the acceptance with the inviter's reason.
///
/// Pure: ``Invitation`` owns one behind a mutex and performs the actions.
struct InviteeStateMachine {
    enum Phase: Sendable, Equatable {
        case pending
        /// The application accepted; the session checks the connection and asks its hook.
        case accepting
        case answered
        /// Ended unanswered, and why (as in "the invitation from Bob was withdrawn by the inviter: busy").
        case closed(String)
    }

    /// What the owner does.
    enum Action: Sendable, Equatable {
        /// Send the answer.
        case answer(SessionWire.Answer, String)
        /// Close the connection with a reason the inviter sees.
        case closeLink(String)
        /// The invitation no longer counts against the advertiser's limits.
        case release
    }

    private(set) var phase = Phase.pending
    /// Why the inviter withdrew the invitation (an `inviteCancel`, or it left), once it did: the reason an acceptance
    /// stops with, and why a link adopted at that moment is never reconnected.
    private(set) var withdrawn: String?
    /// Whether the connection ended.
    private(set) var connectionEnded = false

    var isOpen: Bool { phase == .pending }

    /// The application answers: accepting (the session takes over) or declining. Fails when the invitation is no
    /// longer pending, with why.
    mutating func claim(accepting: Bool) -> Result<[Action], ClaimRefusal> {
        switch phase {
        case .pending:
            phase = accepting ? .accepting : .answered
            return .success([.release])
        case .accepting, .answered: return .failure(.alreadyAnswered)
        case .closed(let reason): return .failure(.closed(reason))
        }
    }

    /// Why an invitation cannot be answered.
    enum ClaimRefusal: Error, Equatable {
        case alreadyAnswered
        case closed(String)
    }

    /// The application declines.
    mutating func decline(reason: String) -> [Action] {
        guard case .success(let actions) = claim(accepting: false) else { return [] }
        return actions + [.answer(.declined, reason), .closeLink("invitation declined")]
    }

    /// The acceptance ended: answered (accepted, or refused by the session's rules, which sends its own answer).
    mutating func answered() {
        if phase == .accepting { phase = .answered }
    }

    /// Refused without asking the application (a limit, the application not reading, the advertiser stopping).
    mutating func refuse(_ reason: String) -> [Action] {
        guard phase == .pending else { return [] }
        phase = .closed("was refused: \(reason)")
        return [.release, .answer(.refused, reason), .closeLink("invitation refused")]
    }

    /// Answered "already connected" (the two are linked): not shown to the application.
    mutating func alreadyConnected() -> [Action] {
        guard phase == .pending else { return [] }
        phase = .answered
        return [.release, .answer(.alreadyConnected, "already connected"), .closeLink("already connected")]
    }

    /// The deadline passed unanswered.
    mutating func deadlinePassed(timeout: Duration) -> [Action] {
        guard phase == .pending else { return [] }
        phase = .closed("expired: no answer within \(timeout)")
        return [.release, .answer(.timedOut, "no answer within \(timeout)"), .closeLink("invitation expired")]
    }

    /// The inviter sent `inviteCancel`.
    mutating func withdrawnByInviter(_ reason: String) -> [Action] {
        withdraw(
            "the inviter withdrew the invitation: \(reason)", closing: "was withdrawn by the inviter: \(reason)",
            link: "invitation withdrawn")
    }

    /// The inviter left its session before the answer: the same as withdrawing the invitation.
    mutating func inviterLeft() -> [Action] {
        withdraw("left", closing: "was withdrawn: the inviter left", link: "the inviter left")
    }

    private mutating func withdraw(_ why: String, closing: String, link: String) -> [Action] {
        withdrawn = withdrawn ?? why
        var actions: [Action] = [.closeLink(link)]
        if phase == .pending {
            phase = .closed(closing)
            actions.insert(.release, at: 0)
        }
        return actions
    }

    /// Something other than a cancel or a leave before the answer: the inviter is not following the protocol.
    mutating func unexpectedMessage() -> [Action] {
        var actions: [Action] = [.closeLink("unexpected control message before the invitation was answered")]
        if phase == .pending {
            phase = .closed("ended: the inviter broke the protocol")
            actions.insert(.release, at: 0)
        }
        return actions
    }

    /// The connection ended.
    mutating func connectionClosed(_ reason: String) -> [Action] {
        connectionEnded = true
        guard phase == .pending else { return [] }
        phase = .closed("ended: \(reason)")
        return [.release]
    }
}
