internal import MultipeerIO

/// The membership rules of one session (`docs/PROTOCOL.md` sections 4.2-4.5): who is a member on which link, who
/// is being invited, accepted, introduced or reconnected, which of two links to a peer stays, what each member is
/// told about the others, how long a lost member is waited for, and what the application is told, with a reason.
///
/// One ``Entry`` per peer holds everything about it: its ``Phase`` (absent, a member on a link, reconnecting since
/// an instant), the attempts under way to link with it, its introduction, the state last reported. Pure: the
/// ``Session`` actor feeds it events with the time of its event loop's clock and performs the ``Action``s it
/// returns (sends, closes, dials, reports, timers), so every rule runs on a manual clock in the tests.
struct MeshStateMachine {
    typealias LinkToken = Int

    /// The rules' parameters, each with the reason for its default.
    struct Configuration: Sendable {
        /// The most peers in the session, this one included.
        var maximumPeers: Int
        /// The session's encryption preference.
        var encryption: EncryptionPreference
        /// Whether members must prove the group secret.
        var requiresGroupProof: Bool
        /// How long a member whose link dropped is waited for.
        var reconnectGrace: Duration
        /// How long a link that lost the duplicate-link rule stays open, so the other end has switched to the kept
        /// link (and reports nothing) and what was already sent on it still arrives.
        var duplicateGrace: Duration = .seconds(2)
        /// The pause before redialing a reconnecting member after a failed attempt.
        var retryInterval: Duration = .milliseconds(250)
        /// How long an introduction that neither joined nor was dialed is kept: longer than a dial with busy
        /// retries (10 s) and a verification hook take, short enough that peers that never come do not stay.
        var introductionLifetime: Duration = .seconds(30)
        /// How long an introduction that was dialed (and did not join) is kept, so that repeating it does not make
        /// this side dial again: a member can make this side dial an address of its choice at most this often.
        var introductionCooldown: Duration = .seconds(300)
        /// How long an incoming join waits for the introduction that names its dialer (the two race).
        var introductionWait: Duration = .seconds(5)
        /// How long an invitation answered "already connected" waits for the link it means to be adopted here.
        var alreadyConnectedWait: Duration = .seconds(2)
        /// How long an introduced member has to answer a join.
        var joinAnswerTimeout: Duration = .seconds(10)

        /// Introductions one introducer can have waiting here: as many as a session holds (an honest member never
        /// introduces more), so a hostile member cannot crowd out the others' introductions.
        var introductionsPerIntroducer: Int { maximumPeers }
        /// Introductions waiting in all.
        var introductionLimit: Int { maximumPeers * 4 }
        /// Failed invitations remembered for ``Session/invitationOutcome(for:)``: an application inviting every
        /// peer a flood of advertisements shows keeps 1,024.
        static let failureLimit = 1_024

        init(
            maximumPeers: Int, encryption: EncryptionPreference, requiresGroupProof: Bool, reconnectGrace: Duration
        ) {
            self.maximumPeers = maximumPeers
            self.encryption = encryption
            self.requiresGroupProof = requiresGroupProof
            self.reconnectGrace = reconnectGrace
        }
    }

    /// A connection as the rules see it.
    struct LinkFacts: Sendable, Hashable {
        /// The driver's handle for the link.
        let token: LinkToken
        /// The peer as the connection shows it (proven by TLS, or a plaintext claim).
        let peer: Peer
        /// Whether this side dialed.
        let isDialer: Bool
        /// The identifier the dialer chose (its invitation or join id), for the duplicate-link rule.
        let linkID: [UInt8]
        /// The peer's TCP address.
        let remoteAddress: SocketAddress
        /// Whether the connection proved the session's group secret.
        let isGroupMember: Bool
        /// Whether the link runs through a TURN relay: `remoteAddress` is then the peer's relayed address, where
        /// it is redialed and where others are told to reach it.
        var isRelayed = false

        var fingerprint: PeerFingerprint { peer.claimedFingerprint }
        var isAuthenticated: Bool { peer.isAuthenticated }
        /// The fingerprint of the side that dialed.
        func dialer(local: PeerFingerprint) -> PeerFingerprint { isDialer ? local : fingerprint }
    }

    /// A member's link and what the peer said on it.
    struct MemberLink: Sendable {
        var facts: LinkFacts
        /// Where the peer listens, once its `sessions` arrived.
        var listenPort: UInt16?
        /// A session the peer is known to hold, with its secret: what a redial's `join` proves. From the answer
        /// that admitted it (an invitation of this side's), the join this side made, the outage it came back from,
        /// or its `sessions` (its current one, which replaces the others); nil until one of those.
        var session: SessionWire.SessionKey?

        /// The address to tell others for this member: the address it is connected from, with its listening port;
        /// for a relayed link, its relayed address (the relay's, not a port the peer listens on).
        var announcedAddress: SocketAddress? {
            if facts.isRelayed { return facts.remoteAddress }
            guard let port = listenPort, port != 0 else { return nil }
            return SocketAddress(facts.remoteAddress.address, port: port, scopeID: facts.remoteAddress.scopeID)
        }
    }

    /// A member whose link dropped, waited for.
    struct Reconnection: Sendable {
        let since: IOInstant
        /// Where to redial (empty: wait to be redialed).
        let addresses: [SocketAddress]
        /// The session the redial's `join` proves (nil: this side knows none the peer holds, and waits to be
        /// redialed).
        let session: SessionWire.SessionKey?
        /// Why the link ended.
        let reason: String
        let timer: Int
    }

    /// Where a peer stands.
    enum Phase: Sendable {
        /// No link: invited, introduced, failed, or about to be forgotten.
        case absent
        /// A member on a link.
        case member(MemberLink)
        /// A member whose link dropped, waited for until the grace ends.
        case reconnecting(Reconnection)
    }

    /// This side's dial of a join (an introduction or a reconnection).
    enum JoinDial: Sendable, Equatable {
        /// Dialing; the dial's result is known by its id (an older dial's is not taken for it).
        case dialing(id: Int)
        /// Connected, checking the connection (and asking the hook).
        case checking(LinkToken)
        /// The join was sent on this link; the answer is awaited.
        case awaitingAnswer(LinkToken)
    }

    /// What is under way to link with a peer.
    struct Attempts: Sendable {
        /// This side's invitations to the peer.
        var invitations = 0
        /// The peer's invitations and joins this side is admitting (the verification hook runs).
        var admitting: Set<LinkToken> = []
        var joinDial: JoinDial?
        /// Waiting for the peer to dial with this session's connection data.
        var waitingForDial = false

        var isEmpty: Bool { invitations == 0 && admitting.isEmpty && joinDial == nil && !waitingForDial }
    }

    /// A peer a member told us about, so we can dial it (the lower fingerprint does) or admit its join.
    struct Introduction: Sendable {
        var member: SessionWire.Member
        /// The members that introduced it; when every one of them has left, so does the introduction.
        var introducers: Set<PeerFingerprint>
        /// Dialed once (or being dialed): repeats of the introduction do not dial again.
        var dialed = false
        /// Its lifetime passed after it was dialed: it stays for the cooldown, then goes.
        var cooling = false
        var timer: Int
    }

    /// An incoming join waiting for the introduction that names its dialer.
    struct PendingJoin: Sendable {
        let facts: LinkFacts
    }

    /// Everything about one peer.
    struct Entry: Sendable {
        var peer: Peer
        var phase: Phase = .absent
        var attempts = Attempts()
        /// The state last reported to the application (nil: nothing, or notConnected).
        var reported: PeerState?
        var introduction: Introduction?
        /// The last address the member was reached at, for a reconnection whose link dropped before it said.
        var lastAddress: SocketAddress?
        /// The last failed invitation, until the peer becomes a member.
        var failure: InvitationOutcome?
        /// The member proved its key on a link of this conversation: every later link must prove it too.
        var proven = false
        var pendingJoins: [LinkToken: PendingJoin] = [:]
        /// Invitations answered "already connected" waiting for the link to be adopted, by waiter id.
        var alreadyConnected: Set<Int> = []
        /// The pending retry timer of a reconnection.
        var retryTimer: Int?
        /// Why the member departed, while an invitation of ours to it that was under way then still runs: when
        /// that invitation fails, the peer is reported `notConnected` for this reason (it left; a refusal from
        /// its disconnecting session only echoes that).
        var departure: SessionReason?

        init(peer: Peer) { self.peer = peer }

        var member: MemberLink? {
            if case .member(let link) = phase { link } else { nil }
        }
        var reconnection: Reconnection? {
            if case .reconnecting(let reconnection) = phase { reconnection } else { nil }
        }
        var isMember: Bool { member != nil }
        var isReconnecting: Bool { reconnection != nil }

        /// The state the application should see now.
        var state: PeerState? {
            switch phase {
            case .member: .connected
            case .reconnecting: .reconnecting
            case .absent: attempts.isEmpty ? nil : .connecting
            }
        }

        /// Nothing left to remember.
        var isForgettable: Bool {
            if case .absent = phase {
                return attempts.isEmpty && reported == nil && introduction == nil && failure == nil
                    && pendingJoins.isEmpty && alreadyConnected.isEmpty
            }
            return false
        }
    }

    /// How a link is offered as the member link.
    enum Admission: Sendable, Equatable {
        /// The peer accepted this side's invitation; its answer named `session`, which it holds.
        case theyAccepted(SessionWire.SessionKey)
        /// This side accepts the peer's invitation `id`: the answer `accepted` goes first.
        case weAccept(invitationID: [UInt8])
        /// This side's join was answered yes.
        case joinAnswered
        /// This side admits the peer's join: the answer goes first.
        case weAdmitJoin(reconnection: Bool)
    }

    /// A dial of a join.
    struct Dial: Sendable, Equatable {
        let member: SessionWire.Member
        /// The identity the connection must prove (TLS), or nil to accept a plaintext claim.
        let expecting: PeerFingerprint?
        let isReconnection: Bool
        /// Which dial this is, for ``joinDialConnected(_:expected:)`` and ``joinDialFailed(_:reason:)``.
        let id: Int
    }

    /// Time-driven events.
    enum Timer: Sendable, Hashable {
        /// The reconnection grace of a member ends.
        case grace(PeerFingerprint, id: Int)
        /// Redial a reconnecting member.
        case retry(PeerFingerprint, id: Int)
        /// An introduction expires.
        case introduction(PeerFingerprint, id: Int)
        /// A join this side sent has had no answer.
        case joinAnswer(LinkToken)
        /// An incoming join's introduction has not come.
        case introductionWait(LinkToken)
        /// An invitation answered "already connected" has waited long enough.
        case alreadyConnected(PeerFingerprint, waiter: Int)
        /// A link that lost the duplicate-link rule is closed now unless it became the member link again.
        case closeReplaced(LinkToken)
    }

    /// What the driver does.
    enum Action: Sendable {
        /// Tell the application.
        case report(Peer, PeerState, SessionReason)
        /// Send a control message on a link.
        case send(LinkToken, SessionWire.Message)
        /// Close a link gracefully with a reason the peer sees.
        case close(LinkToken, String)
        /// Make the link the peer's member link: switch its conversation to it, take its events and streams, then
        /// send `sessions` and `resume` (after `first`, the answer that admits the peer).
        case adopt(LinkToken, first: SessionWire.Message?)
        /// The conversation with the peer ends: what it never confirmed is undelivered, transfers end.
        case endConversation(Peer, SessionReason)
        /// Dial a member to join it.
        case dial(Dial)
        /// Send a `join` proving `session` on the link (the driver computes the proof with the link's binding).
        case sendJoin(LinkToken, session: SessionWire.SessionKey)
        /// Ask the verification hook about the link (a join this side dialed, or the peer's join when `incoming`),
        /// then report the decision (``joinChecked(_:decision:)``, ``joinVerified(_:decision:now:)``).
        case verify(LinkToken, incoming: Bool)
        /// Arm a timer.
        case schedule(Timer, after: Duration)
        /// An invitation's outcome is final.
        case finishInvitation(waiter: Int, InvitationOutcome)
        /// The peer connected: tickets issued for it are withdrawn, a wait for its dial ends.
        case connected(PeerFingerprint)
        /// A link that lost the duplicate-link rule stays open a moment: what comes on it (a `leave`, its end) is
        /// the mesh's until then.
        case watch(LinkToken)
    }

    let local: PeerFingerprint
    let configuration: Configuration
    private(set) var entries: [PeerFingerprint: Entry] = [:]
    /// Which peer each link in play belongs to.
    private var linkOwners: [LinkToken: PeerFingerprint] = [:]
    /// The session's current identifier (the lowest of those merged into it) and every secret known.
    private(set) var sessionID: [UInt8]
    private(set) var secrets: [[UInt8]: [UInt8]]
    private(set) var isDisconnected = false
    /// Why the last link ``admit(_:_:now:)`` turned away was turned away.
    private(set) var lastTurnAway: String?
    private var nextID = 0

    init(local: PeerFingerprint, configuration: Configuration, sessionID: [UInt8], secret: [UInt8]) {
        self.local = local
        self.configuration = configuration
        self.sessionID = sessionID
        secrets = [sessionID: secret]
    }

    // MARK: Questions

    /// The members and their links.
    var members: [(Peer, LinkToken)] {
        entries.values.compactMap { entry in entry.member.map { (entry.peer, $0.facts.token) } }
    }

    /// The member link of a peer.
    func memberLink(of fingerprint: PeerFingerprint) -> LinkToken? { entries[fingerprint]?.member?.facts.token }

    func isMember(_ fingerprint: PeerFingerprint) -> Bool { entries[fingerprint]?.isMember ?? false }

    func isReconnecting(_ fingerprint: PeerFingerprint) -> Bool { entries[fingerprint]?.isReconnecting ?? false }

    /// Whether the peer is a member or reconnecting: it has a conversation.
    func hasConversation(_ fingerprint: PeerFingerprint) -> Bool {
        guard let entry = entries[fingerprint] else { return false }
        return entry.isMember || entry.isReconnecting
    }

    /// The last failed invitation to the peer.
    func failure(of fingerprint: PeerFingerprint) -> InvitationOutcome? { entries[fingerprint]?.failure }

    /// Whether the link is the peer's member link.
    func isMemberLink(_ token: LinkToken) -> Bool {
        guard let fp = linkOwners[token] else { return false }
        return entries[fp]?.member?.facts.token == token
    }

    private var memberCount: Int { entries.values.reduce(0) { $0 + ($1.isMember ? 1 : 0) } }

    /// What an invitation to the peer must prove: its advertised identity with `.required`, and with any
    /// preference once the member proved it (identity never weakens).
    func expectedIdentity(for fingerprint: PeerFingerprint) -> PeerFingerprint? {
        configuration.encryption == .required || entries[fingerprint]?.proven == true ? fingerprint : nil
    }

    /// Why the session's rules refuse a connection, or nil.
    func securityRefusal(_ facts: LinkFacts) -> String? {
        if !configuration.encryption.allowsPlaintext, !facts.isAuthenticated {
            return "encryption: this session requires TLS and the peer's connection is plaintext"
        }
        if configuration.requiresGroupProof, !facts.isGroupMember {
            return "group secret: the peer's connection did not prove this session's group secret"
        }
        return nil
    }

    /// Why a link cannot carry a peer that proved its key before, or nil: a proven member is proven again on every
    /// link, whichever side dials.
    func weakerIdentity(_ facts: LinkFacts) -> String? {
        guard entries[facts.fingerprint]?.proven == true, !facts.isAuthenticated else { return nil }
        return "a proven member cannot come back as a plaintext claim"
    }

    // MARK: Inviting

    /// What to do with an invitation this side is asked to send.
    enum InviteDecision: Sendable, Equatable {
        /// Dial, expecting this identity (or a claim, when nil).
        case proceed(expecting: PeerFingerprint?)
        /// No dial: the outcome now.
        case outcome(InvitationOutcome)
    }

    /// The application invites `peer`.
    mutating func inviteRequested(_ peer: Peer, contextLength: Int, now: IOInstant) -> (InviteDecision, [Action]) {
        let fp = peer.claimedFingerprint
        if isDisconnected { return (.outcome(.refused(reason: "the session was disconnected")), []) }
        if isMember(fp) { return (.outcome(.accepted), []) }
        if fp == local { return (.outcome(.refused(reason: "that is this peer")), []) }
        if contextLength > Invitation.maximumContextLength {
            return refusedAtOnce(
                peer,
                "the context is \(contextLength) bytes; an invitation carries at most "
                    + "\(Invitation.maximumContextLength) (send more once connected)")
        }
        guard memberCount + 1 < configuration.maximumPeers else {
            return refusedAtOnce(peer, "this session is full (\(configuration.maximumPeers) peers)")
        }
        var actions: [Action] = []
        update(fp, peer: peer, reason: .inviting, into: &actions) { $0.attempts.invitations += 1 }
        return (.proceed(expecting: expectedIdentity(for: fp)), actions)
    }

    /// An invitation refused before it is sent: reported like one that failed (`connecting`, then `notConnected`
    /// with the reason), so an application that only watches states learns of it too.
    private mutating func refusedAtOnce(_ peer: Peer, _ reason: String) -> (InviteDecision, [Action]) {
        let outcome = InvitationOutcome.refused(reason: reason)
        return (.outcome(outcome), failedAtOnce(peer, outcome, connecting: .inviting))
    }

    /// An attempt that failed before it started, reported as one that failed, unless something else is under way.
    mutating func failedAtOnce(_ peer: Peer, _ outcome: InvitationOutcome, connecting: SessionReason) -> [Action] {
        let fp = peer.claimedFingerprint
        guard !isDisconnected, entries[fp]?.state == nil else { return [] }
        var entry = entries[fp] ?? Entry(peer: peer)
        entry.failure = outcome
        entries[fp] = entry
        rememberFailure(fp)
        return [
            .report(peer, .connecting, connecting),
            .report(peer, .notConnected, .invitationFailed(outcome)),
        ]
    }

    /// An invitation of this side ended with `outcome`. The outcome is final (``Action/finishInvitation(waiter:_:)``)
    /// at once, or, for "accepted" while this side has no link to the peer (the link the peer means is being
    /// adopted here right now), once it is adopted or after a short wait.
    mutating func inviteFinished(_ fp: PeerFingerprint, _ outcome: InvitationOutcome, waiter: Int) -> [Action] {
        guard var entry = entries[fp] else { return [.finishInvitation(waiter: waiter, outcome)] }
        if outcome == .accepted, !entry.isMember, !entry.isReconnecting, !isDisconnected {
            entry.alreadyConnected.insert(waiter)
            entries[fp] = entry
            return [.schedule(.alreadyConnected(fp, waiter: waiter), after: configuration.alreadyConnectedWait)]
        }
        return endInvitation(fp, outcome, waiter: waiter)
    }

    private mutating func endInvitation(_ fp: PeerFingerprint, _ outcome: InvitationOutcome, waiter: Int) -> [Action] {
        var actions: [Action] = [.finishInvitation(waiter: waiter, outcome)]
        guard entries[fp] != nil else { return actions }
        let succeeded = entries[fp]!.isMember || entries[fp]!.isReconnecting
        update(fp, reason: .invitationFailed(outcome), into: &actions) { entry in
            entry.attempts.invitations = max(0, entry.attempts.invitations - 1)
            if !succeeded, outcome != .accepted, entry.attempts.isEmpty { entry.failure = outcome }
        }
        if !succeeded, outcome != .accepted { rememberFailure(fp) }
        // The link dropped while the invitation ran: redialing waited for it to end.
        if let entry = entries[fp], entry.attempts.invitations == 0, entry.isReconnecting,
            entry.attempts.joinDial == nil
        {
            actions += redial(fp)
        }
        return actions
    }

    /// Keeps at most ``Configuration/failureLimit`` failed invitations (the oldest entries of idle peers go first).
    private mutating func rememberFailure(_ fp: PeerFingerprint) {
        var count = entries.values.reduce(0) { $0 + ($1.failure == nil ? 0 : 1) }
        guard count > Configuration.failureLimit else { return }
        for (other, entry) in entries where other != fp && entry.failure != nil && entry.state == nil {
            entries[other]?.failure = nil
            forgetIfIdle(other)
            count -= 1
            if count <= Configuration.failureLimit { break }
        }
    }

    // MARK: Being invited

    /// The application accepts the peer's invitation on `facts`' link: the checks that do not need the hook.
    /// Returns nil to go on (the hook is asked next, the peer is `connecting`), or the refusal: `.alreadyConnected`
    /// when the two are linked already (answered so, and nothing reported), otherwise the reason.
    enum AcceptCheck: Sendable, Equatable {
        case proceed
        case alreadyConnected
        case refused(SessionError.Code, String)
    }

    mutating func acceptRequested(_ facts: LinkFacts, inviterRequiresEncryption: Bool) -> (AcceptCheck, [Action]) {
        let fp = facts.fingerprint
        if isDisconnected { return (.refused(.cancelled, "the session was disconnected"), []) }
        if let refusal = securityRefusal(facts) { return (.refused(.refused, refusal), []) }
        if configuration.encryption == .none, inviterRequiresEncryption {
            // The link may well be TLS (the inviter dialed a known identity), but the two sessions' rules exclude
            // each other: a `.required` peer must never be a member of a session that admits plaintext links.
            return (
                .refused(
                    .refused, "encryption: the inviter requires encryption and this session never encrypts (.none)"),
                []
            )
        }
        if isMember(fp) { return (.alreadyConnected, []) }
        if let weaker = weakerIdentity(facts) { return (.refused(.refused, weaker), []) }
        guard memberCount + 1 < configuration.maximumPeers else {
            return (.refused(.sessionFull, "the session is full (\(configuration.maximumPeers) peers)"), [])
        }
        var actions: [Action] = []
        linkOwners[facts.token] = fp
        update(fp, peer: facts.peer, reason: .acceptingInvitation, into: &actions) {
            $0.attempts.admitting.insert(facts.token)
        }
        return (.proceed, actions)
    }

    /// The acceptance of the peer's invitation on the link did not make it a member: `reason` is reported unless
    /// something else links the two.
    mutating func acceptFailed(_ token: LinkToken, reason: SessionReason) -> [Action] {
        guard let fp = linkOwners.removeValue(forKey: token) else { return [] }
        var actions: [Action] = []
        update(fp, reason: reason, into: &actions) { $0.attempts.admitting.remove(token) }
        return actions
    }

    // MARK: Admission and the duplicate-link rule

    /// The duplicate-link rule both ends apply alike: an authenticated link beats a plaintext one (a claim never
    /// replaces a proof); then the link dialed by the lower identity; then, between two links one side dialed, the
    /// lower link identifier; when everything is equal, the existing link (`a`) stays.
    static func prefers(_ a: LinkFacts, over b: LinkFacts, local: PeerFingerprint) -> Bool {
        if a.isAuthenticated != b.isAuthenticated { return a.isAuthenticated }
        let dialerA = a.dialer(local: local)
        let dialerB = b.dialer(local: local)
        if dialerA != dialerB { return dialerA.bytes.lexicographicallyPrecedes(dialerB.bytes) }
        return !b.linkID.lexicographicallyPrecedes(a.linkID)
    }

    /// The reason a duplicate join or invitation is turned away: the two are linked already, so the other end
    /// reports nothing.
    static let alreadyLinked = "already connected through another link"

    /// Offers a link as the peer's member link. Returns whether it was kept (it is then adopted, after the answer
    /// that admits the peer when this side gives one) or turned away (answered so, and closed).
    mutating func admit(_ facts: LinkFacts, _ admission: Admission, now: IOInstant) -> (Bool, [Action]) {
        let fp = facts.fingerprint
        var actions: [Action] = []
        linkOwners[facts.token] = fp
        func turnAway(_ why: String, closeAfterGrace: Bool) {
            lastTurnAway = why
            switch admission {
            case .weAccept(let id):
                actions.append(
                    .send(
                        facts.token,
                        .inviteAnswer(
                            id: id, answer: why == Self.alreadyLinked ? .alreadyConnected : .refused, reason: why)
                    ))
            case .weAdmitJoin:
                actions.append(.send(facts.token, .joinAnswer(accepted: false, reason: why)))
            case .theyAccepted, .joinAnswered:
                break
            }
            if closeAfterGrace {
                replacedLinks[facts.token] = facts
                actions.append(.watch(facts.token))
                actions.append(.schedule(.closeReplaced(facts.token), after: configuration.duplicateGrace))
            } else {
                actions.append(.close(facts.token, why))
                linkOwners[facts.token] = nil
            }
        }
        var entry = entries[fp] ?? Entry(peer: facts.peer)
        // A session the peer holds, for redialing it should this link end before its `sessions` comes.
        let named: SessionWire.SessionKey? =
            switch admission {
            case .theyAccepted(let session): session
            case .joinAnswered: joinSession(fp)
            case .weAccept, .weAdmitJoin: nil
            }
        let held = named ?? entry.member?.session ?? entry.reconnection?.session
        entry.attempts.admitting.remove(facts.token)
        if entry.attempts.joinDial == .awaitingAnswer(facts.token) || entry.attempts.joinDial == .checking(facts.token)
        {
            entry.attempts.joinDial = nil
        }
        pendingDialFacts[facts.token] = nil
        entries[fp] = entry
        if isDisconnected {
            turnAway("the member left the session", closeAfterGrace: false)
            if case .joinAnswered = admission { actions.insert(.send(facts.token, .leave(reason: "left")), at: 0) }
            if case .theyAccepted = admission { actions.insert(.send(facts.token, .leave(reason: "left")), at: 0) }
            return (false, actions)
        }
        if let weaker = weakerIdentity(facts) {
            turnAway(weaker, closeAfterGrace: false)
            update(fp, reason: SessionReason(.joinFailed, weaker), into: &actions) { _ in }
            return (false, actions)
        }
        let first: SessionWire.Message? =
            switch admission {
            case .weAccept(let id): .inviteAnswer(id: id, answer: .accepted, reason: "", session: currentSession)
            case .weAdmitJoin: .joinAnswer(accepted: true, reason: "")
            case .theyAccepted, .joinAnswered: nil
            }
        let reason: SessionReason =
            switch admission {
            case .theyAccepted: .acceptedInvitation
            case .weAccept: .acceptedTheirInvitation
            case .joinAnswered, .weAdmitJoin: .joinedThroughIntroduction
            }
        if let existing = entry.member, existing.facts.token != facts.token {
            if Self.prefers(existing.facts, over: facts, local: local) {
                turnAway(Self.alreadyLinked, closeAfterGrace: true)
                actions += settle(fp, reason: reason)
                return (false, actions)
            }
            entry.phase = .member(MemberLink(facts: facts, listenPort: nil, session: held))
            if facts.isAuthenticated { entry.proven = true }
            entries[fp] = entry
            replacedLinks[existing.facts.token] = existing.facts
            actions.append(.schedule(.closeReplaced(existing.facts.token), after: configuration.duplicateGrace))
            actions.append(.adopt(facts.token, first: first))
            actions += settle(fp, reason: reason)
            return (true, actions)
        }
        if !entry.isReconnecting, memberCount + 1 >= configuration.maximumPeers {
            turnAway("the session is full (\(configuration.maximumPeers) peers)", closeAfterGrace: false)
            update(fp, reason: SessionReason(.sessionFull, "this session is full"), into: &actions) { _ in }
            return (false, actions)
        }
        var finalReason = reason
        if let reconnection = entry.reconnection {
            finalReason = SessionReason(.reconnected, "reconnected after \(now - reconnection.since)")
        }
        entry.phase = .member(MemberLink(facts: facts, session: held))
        entry.failure = nil
        entry.introduction = nil
        entry.retryTimer = nil
        if facts.isAuthenticated { entry.proven = true }
        entries[fp] = entry
        actions.append(.adopt(facts.token, first: first))
        actions += settle(fp, reason: finalReason)
        actions += resolveAlreadyConnected(fp)
        return (true, actions)
    }

    private mutating func resolveAlreadyConnected(_ fp: PeerFingerprint) -> [Action] {
        guard let waiters = entries[fp]?.alreadyConnected, !waiters.isEmpty else { return [] }
        entries[fp]?.alreadyConnected = []
        var actions: [Action] = []
        for waiter in waiters.sorted() { actions += endInvitation(fp, .accepted, waiter: waiter) }
        return actions
    }

    // MARK: What members say

    /// A member's `sessions`: where it listens, its current session, its secrets. Passes new secrets on, and on
    /// the first one tells the member about the others and the others about it.
    mutating func sessionsReceived(
        _ token: LinkToken, listenPort: UInt16, current: [UInt8], secrets received: [[UInt8]: [UInt8]],
        ownListenPort: UInt16
    ) -> [Action] {
        guard let fp = linkOwners[token], var link = entries[fp]?.member, link.facts.token == token else { return [] }
        let first = link.listenPort == nil
        link.listenPort = listenPort
        if let secret = received[current] ?? secrets[current] {
            link.session = SessionWire.SessionKey(id: current, secret: secret)
        }
        entries[fp]?.phase = .member(link)
        if let address = link.announcedAddress { entries[fp]?.lastAddress = address }
        var added = false
        for (id, secret) in received where secrets[id] == nil && secrets.count < SessionWire.Limits.sessions {
            secrets[id] = secret
            added = true
        }
        if current.lexicographicallyPrecedes(sessionID), secrets[current] != nil { sessionID = current }
        var actions: [Action] = []
        let others = entries.values.compactMap(\.member).filter { $0.facts.token != token }
        if added {
            for other in others {
                actions.append(
                    .send(other.facts.token, .sessions(listenPort: ownListenPort, current: sessionID, secrets: secrets))
                )
            }
        }
        guard first, let info = memberInfo(fp) else { return actions }
        // Introductions go both ways, whichever side invited: the new member hears of every other member, and
        // every other member of it.
        let known = others.compactMap { memberInfo($0.facts.fingerprint) }
        for start in stride(from: 0, to: known.count, by: SessionWire.Limits.membersPerMessage) {
            let chunk = Array(known[start..<min(start + SessionWire.Limits.membersPerMessage, known.count)])
            actions.append(.send(token, .members(chunk)))
        }
        for other in others where memberInfo(other.facts.fingerprint) != nil {
            actions.append(.send(other.facts.token, .members([info])))
        }
        return actions
    }

    /// The session others are told a member holds: its own (current) one once this side knows that session's
    /// secret, which the others then learn too (`sessions`); else this side's current one, which they know. (An
    /// accepted answer's session is known here only to redial that member: naming it would leave the others,
    /// who cannot prove it, unable to join.)
    private func introducedSession(_ link: MemberLink) -> [UInt8] {
        guard let id = link.session?.id, secrets[id] != nil else { return sessionID }
        return id
    }

    /// A member as this side tells others about it.
    private func memberInfo(_ fp: PeerFingerprint) -> SessionWire.Member? {
        guard let entry = entries[fp], let link = entry.member, let address = link.announcedAddress else { return nil }
        return SessionWire.Member(
            fingerprint: fp, displayName: entry.peer.displayName, sessionID: introducedSession(link),
            addresses: [address])
    }

    /// A member's `members`: peers it introduces. Each introducer has a bounded share of the introductions kept;
    /// a peer is dialed (by the lower fingerprint) once per introduction, not on every repeat; new ones are passed
    /// on to the other members once.
    mutating func membersReceived(_ token: LinkToken, _ list: [SessionWire.Member], now: IOInstant) -> [Action] {
        guard let introducer = linkOwners[token], let link = entries[introducer]?.member, link.facts.token == token
        else { return [] }
        var actions: [Action] = []
        var fresh: [SessionWire.Member] = []
        for member in list {
            let fp = member.fingerprint
            guard fp != local, fp != introducer, !hasConversation(fp) else { continue }
            if var introduction = entries[fp]?.introduction {
                // A repeat: one more introducer vouches for it, within its share; nothing is dialed again.
                if !introduction.introducers.contains(introducer),
                    share(of: introducer) < configuration.introductionsPerIntroducer
                {
                    introduction.introducers.insert(introducer)
                    entries[fp]?.introduction = introduction
                }
                continue
            }
            guard share(of: introducer) < configuration.introductionsPerIntroducer,
                introductionCount < configuration.introductionLimit
            else { continue }
            let id = makeID()
            var entry = entries[fp] ?? Entry(peer: Peer(identity: .advertised(fp), displayName: member.displayName))
            entry.introduction = Introduction(member: member, introducers: [introducer], timer: id)
            entries[fp] = entry
            fresh.append(member)
            actions.append(.schedule(.introduction(fp, id: id), after: configuration.introductionLifetime))
            // A join that came before its introduction goes on now.
            for (pending, _) in entry.pendingJoins {
                entries[fp]?.pendingJoins[pending] = nil
                actions += joinIntroduced(pending, fp)
            }
            if local.bytes.lexicographicallyPrecedes(fp.bytes) {
                actions += dialIntroduced(fp, by: entries[introducer]?.peer.displayName ?? "a member")
            }
        }
        if !fresh.isEmpty {
            for other in entries.values.compactMap(\.member) where other.facts.token != token {
                for start in stride(from: 0, to: fresh.count, by: SessionWire.Limits.membersPerMessage) {
                    let chunk = Array(fresh[start..<min(start + SessionWire.Limits.membersPerMessage, fresh.count)])
                    actions.append(.send(other.facts.token, .members(chunk)))
                }
            }
        }
        return actions
    }

    private func share(of introducer: PeerFingerprint) -> Int {
        entries.values.reduce(0) { $0 + (($1.introduction?.introducers.contains(introducer) ?? false) ? 1 : 0) }
    }

    private var introductionCount: Int { entries.values.reduce(0) { $0 + ($1.introduction == nil ? 0 : 1) } }

    /// Dials an introduced peer (this side has the lower fingerprint), once.
    private mutating func dialIntroduced(_ fp: PeerFingerprint, by introducer: String) -> [Action] {
        guard var entry = entries[fp], var introduction = entry.introduction, !introduction.dialed,
            !entry.isMember, !entry.isReconnecting, entry.attempts.joinDial == nil, entry.attempts.invitations == 0,
            secrets[introduction.member.sessionID] != nil, !introduction.member.addresses.isEmpty,
            memberCount + joinsUnderWay + 1 < configuration.maximumPeers
        else { return [] }
        introduction.dialed = true
        entry.introduction = introduction
        entries[fp] = entry
        var actions: [Action] = []
        let id = makeID()
        update(fp, reason: SessionReason(.introduced, "introduced by \(introducer)"), into: &actions) {
            $0.attempts.joinDial = .dialing(id: id)
        }
        actions.append(
            .dial(
                Dial(
                    member: introduction.member, expecting: configuration.encryption == .required ? fp : nil,
                    isReconnection: false, id: id)))
        return actions
    }

    private var joinsUnderWay: Int {
        entries.values.reduce(0) { $0 + ($1.attempts.joinDial == nil || $1.isReconnecting || $1.isMember ? 0 : 1) }
    }

    /// A member's `leave` (or the inviter's cancel on the link this side just adopted): it is gone for good.
    mutating func left(_ token: LinkToken, reason: SessionReason) -> [Action] {
        guard let fp = linkOwners[token], let entry = entries[fp] else { return [] }
        var actions: [Action] = [.close(token, "left")]
        if let member = entry.member, member.facts.token == token {
            actions += depart(fp, reason: reason)
        } else if let member = entry.member {
            // Through another link than the member link (two links crossed): gone all the same, unless a claim
            // tries to end a proven member's stay.
            let speaker = linkFacts(token)
            if speaker?.isAuthenticated ?? false || !member.facts.isAuthenticated {
                actions.append(.close(member.facts.token, "left"))
                actions += depart(fp, reason: reason)
            }
        } else if entry.isReconnecting {
            let speaker = linkFacts(token)
            if speaker?.isAuthenticated ?? false || !entry.proven { actions += depart(fp, reason: reason) }
        }
        linkOwners[token] = nil
        return actions
    }

    /// The facts of a link still in play (a replaced member link is forgotten once closed).
    private func linkFacts(_ token: LinkToken) -> LinkFacts? {
        guard let fp = linkOwners[token] else { return nil }
        if let member = entries[fp]?.member, member.facts.token == token { return member.facts }
        return replacedLinks[token]
    }

    /// Links replaced by a duplicate, kept until closed: their receipts, acknowledgements and `leave` still count.
    private var replacedLinks: [LinkToken: LinkFacts] = [:]

    /// A member departs for good: its conversation ends and the others stop counting its introductions.
    private mutating func depart(_ fp: PeerFingerprint, reason: SessionReason) -> [Action] {
        guard let entry = entries[fp] else { return [] }
        var actions: [Action] = [.endConversation(entry.peer, reason)]
        // A join under way to it is moot (a redial, an introduction's): its link, if it has one, closes.
        switch entry.attempts.joinDial {
        case .checking(let token), .awaitingAnswer(let token):
            actions.append(.close(token, "the member left"))
            linkOwners[token] = nil
        case .dialing, nil:
            break
        }
        clearJoinDial(fp)
        update(fp, reason: reason, into: &actions) { entry in
            entry.phase = .absent
            entry.proven = false
            entry.lastAddress = nil
            entry.introduction = nil
            entry.retryTimer = nil
            entry.departure = entry.attempts.isEmpty ? nil : reason
        }
        actions += introducerGone(fp)
        return actions
    }

    /// Introductions leave with their introducer: those it alone vouched for and that are not being linked go.
    private mutating func introducerGone(_ introducer: PeerFingerprint) -> [Action] {
        var actions: [Action] = []
        for (fp, entry) in entries {
            guard var introduction = entry.introduction, introduction.introducers.contains(introducer) else { continue }
            introduction.introducers.remove(introducer)
            if introduction.introducers.isEmpty, entry.attempts.joinDial == nil {
                entries[fp]?.introduction = nil
                for (token, _) in entry.pendingJoins {
                    actions += refuseJoin(token, fp, "no member of this session introduced you")
                }
                forgetIfIdle(fp)
            } else {
                entries[fp]?.introduction = introduction
            }
        }
        return actions
    }

    /// A member link ended without `leave`: the member is `reconnecting` for the grace while both sides redial it
    /// (or, with no grace or after this side disconnected, gone). A link the inviter withdrew as it was being
    /// accepted is never waited for.
    mutating func linkClosed(_ token: LinkToken, reason: String, withdrawn: String?, now: IOInstant) -> [Action] {
        replacedLinks[token] = nil
        guard let fp = linkOwners.removeValue(forKey: token), var entry = entries[fp] else { return [] }
        var actions: [Action] = []
        // A link of a join this side dialed, or a join waiting for its introduction. (A link being admitted is the
        // admitting flow's: it ends that flow with its own reason.)
        if entry.attempts.joinDial == .awaitingAnswer(token) || entry.attempts.joinDial == .checking(token) {
            actions += joinAttemptFailed(fp, SessionReason(.joinFailed, reason))
        }
        // An incoming join whose link ended while the hook was asked: nothing is left to admit.
        if entry.attempts.admitting.contains(token) {
            update(fp, reason: SessionReason(.joinFailed, reason), into: &actions) {
                $0.attempts.admitting.remove(token)
            }
        }
        entries[fp]?.pendingJoins[token] = nil
        entry = entries[fp] ?? entry
        guard let member = entry.member, member.facts.token == token else {
            forgetIfIdle(fp)
            return actions
        }
        if let withdrawn { return actions + depart(fp, reason: SessionReason(.invitationWithdrawn, withdrawn)) }
        guard !isDisconnected, configuration.reconnectGrace > .zero else {
            return actions + depart(fp, reason: SessionReason(.connectionLost, reason))
        }
        // Where to redial: where the peer said it listens, or the address this side dialed. A link that ended
        // before either was known (the peer's `sessions` never came) is still waited for: the peer may know where
        // this side listens and redial it, and ending the conversation here alone would make the peer's messages of
        // the outage look like a restart's (reported lost) instead of being delivered.
        let address =
            member.announcedAddress ?? entry.lastAddress ?? (member.facts.isDialer ? member.facts.remoteAddress : nil)
        let id = makeID()
        entry.phase = .reconnecting(
            Reconnection(
                since: now, addresses: address.map { [$0] } ?? [], session: member.session,
                reason: reason, timer: id))
        entries[fp] = entry
        let grace = configuration.reconnectGrace
        actions.append(.schedule(.grace(fp, id: id), after: grace))
        actions += settle(fp, reason: SessionReason(.linkLost, "\(reason); reconnecting for up to \(grace)"))
        actions += redial(fp)
        return actions
    }

    /// Redials a reconnecting member, with the proof it gave before when it was proven.
    private mutating func redial(_ fp: PeerFingerprint) -> [Action] {
        guard var entry = entries[fp], let reconnection = entry.reconnection, entry.attempts.joinDial == nil,
            entry.attempts.invitations == 0, !reconnection.addresses.isEmpty, let session = reconnection.session,
            !isDisconnected
        else { return [] }
        let id = makeID()
        entry.attempts.joinDial = .dialing(id: id)
        entry.retryTimer = nil
        entries[fp] = entry
        let member = SessionWire.Member(
            fingerprint: fp, displayName: entry.peer.displayName, sessionID: session.id,
            addresses: reconnection.addresses)
        return [
            .dial(
                Dial(
                    member: member, expecting: configuration.encryption == .required || entry.proven ? fp : nil,
                    isReconnection: true, id: id))
        ]
    }

    // MARK: Joins this side dials

    /// The dial of a join ended without a connection.
    mutating func joinDialFailed(_ dial: Dial, reason: String) -> [Action] {
        let fp = dial.member.fingerprint
        guard entries[fp]?.attempts.joinDial == .dialing(id: dial.id) else { return [] }
        return joinAttemptFailed(fp, SessionReason(.joinFailed, "could not reach the introduced member: \(reason)"))
    }

    /// The dial of a join connected: checks the connection against what was expected, then the hook (not for a
    /// reconnection: the member was admitted before) or the join itself.
    mutating func joinDialConnected(_ facts: LinkFacts, expected: Dial) -> [Action] {
        let fp = expected.member.fingerprint
        linkOwners[facts.token] = fp
        guard entries[fp]?.attempts.joinDial == .dialing(id: expected.id) else {
            linkOwners[facts.token] = nil
            return [.close(facts.token, Self.alreadyLinked)]
        }
        if let refusal = Self.identityRefusal(facts, expected: fp) ?? securityRefusal(facts) ?? weakerIdentity(facts) {
            linkOwners[facts.token] = nil
            return [.close(facts.token, refusal)] + joinAttemptFailed(fp, SessionReason(.joinFailed, refusal))
        }
        entries[fp]?.attempts.joinDial = .checking(facts.token)
        pendingDialFacts[facts.token] = facts
        if expected.isReconnection { return joinChecked(facts.token, decision: .accept) }
        return [.verify(facts.token, incoming: false)]
    }

    /// The hook's decision about a dialed join's link.
    mutating func joinChecked(_ token: LinkToken, decision: VerificationDecision) -> [Action] {
        guard let fp = linkOwners[token], entries[fp]?.attempts.joinDial == .checking(token) else { return [] }
        if case .refuse(let reason) = decision {
            linkOwners[token] = nil
            return [.close(token, "refused by the verification hook: \(reason)")]
                + joinAttemptFailed(
                    fp, SessionReason(.refusedByVerificationHook, "refused by this side's verification hook: \(reason)")
                )
        }
        if isDisconnected || isMember(fp) {
            linkOwners[token] = nil
            var actions: [Action] = [.close(token, Self.alreadyLinked)]
            clearJoinDial(fp)
            update(fp, reason: SessionReason(.joinFailed, Self.alreadyLinked), into: &actions) { _ in }
            return actions
        }
        guard let session = joinSession(fp) else {
            // Not reached: a join is dialed only with a session whose secret this side knows.
            linkOwners[token] = nil
            let why = "this side knows the secret of no session the peer holds"
            return [.close(token, why)] + joinAttemptFailed(fp, SessionReason(.joinFailed, why))
        }
        entries[fp]?.attempts.joinDial = .awaitingAnswer(token)
        return [
            .sendJoin(token, session: session), .schedule(.joinAnswer(token), after: configuration.joinAnswerTimeout),
        ]
    }

    /// The session this side's join to the peer proves: the outage's (a session the peer holds), or the one its
    /// introduction names (the introducer's word), when this side knows its secret.
    private func joinSession(_ fp: PeerFingerprint) -> SessionWire.SessionKey? {
        guard let entry = entries[fp] else { return nil }
        if let reconnection = entry.reconnection { return reconnection.session }
        guard let id = entry.introduction?.member.sessionID, let secret = secrets[id] else { return nil }
        return SessionWire.SessionKey(id: id, secret: secret)
    }

    /// This side's current session, as an accepted invitation's answer names it. (Its secret is always known: the
    /// current session only ever becomes one whose secret is.)
    private var currentSession: SessionWire.SessionKey {
        SessionWire.SessionKey(id: sessionID, secret: secrets[sessionID] ?? [])
    }

    /// The answer to a join this side sent (or something else in its place).
    mutating func joinAnswered(_ token: LinkToken, accepted: Bool?, reason: String, now: IOInstant) -> [Action] {
        guard let fp = linkOwners[token], let entry = entries[fp] else { return [.close(token, "not expected")] }
        // An answer before this side asked (its check of the link still running) means nothing. (A link this side
        // gave up on has no owner any more: it was closed above.)
        guard entry.attempts.joinDial == .awaitingAnswer(token) else { return [] }
        guard let facts = pendingDialFacts.removeValue(forKey: token) else { return [] }
        if accepted == true {
            if isDisconnected {
                linkOwners[token] = nil
                var actions: [Action] = [.send(token, .leave(reason: "left")), .close(token, "left the session")]
                clearJoinDial(fp)
                update(fp, reason: .thisSideLeft, into: &actions) { _ in }
                return actions
            }
            return admit(facts, .joinAnswered, now: now).1
        }
        linkOwners[token] = nil
        let why: SessionReason =
            accepted == false
            ? SessionReason(.joinFailed, "join refused: \(reason)")
            : SessionReason(.joinFailed, "the peer broke the protocol")
        var actions: [Action] = [.close(token, accepted == false ? "join refused" : "expected an answer to the join")]
        // "Already linked" ends an introduction's join (the two are linked through another link); a reconnection
        // goes on: the peer still holds the link that dropped, which it will find dead (then it waits to be
        // redialed, if it cannot dial itself).
        if accepted == false, reason == Self.alreadyLinked, !entry.isReconnecting {
            clearJoinDial(fp)
            update(fp, reason: why, into: &actions) { _ in }
            return actions
        }
        return actions + joinAttemptFailed(fp, why)
    }

    /// The links of dialed joins, until answered.
    private var pendingDialFacts: [LinkToken: LinkFacts] = [:]

    /// Ends this side's join dial to the peer, forgetting its link's facts.
    private mutating func clearJoinDial(_ fp: PeerFingerprint) {
        switch entries[fp]?.attempts.joinDial {
        case .checking(let token), .awaitingAnswer(let token): pendingDialFacts[token] = nil
        case .dialing, nil: break
        }
        entries[fp]?.attempts.joinDial = nil
    }

    private mutating func joinAttemptFailed(_ fp: PeerFingerprint, _ reason: SessionReason) -> [Action] {
        guard let entry = entries[fp] else { return [] }
        var actions: [Action] = []
        clearJoinDial(fp)
        if entry.isReconnecting {
            let id = makeID()
            entries[fp]?.retryTimer = id
            return [.schedule(.retry(fp, id: id), after: configuration.retryInterval)]
        }
        update(fp, reason: reason, into: &actions) { _ in }
        return actions
    }

    // MARK: Joins the peer dials

    /// An incoming join whose proof is right for a secret this session knows (the driver checked it). Admitted
    /// once a current member has introduced the peer (knowing a secret alone is not enough: a former member, an
    /// eavesdropper on a plaintext link), or at once for a reconnecting member; it waits a moment for an
    /// introduction that is on its way.
    mutating func joinRequested(_ facts: LinkFacts, now: IOInstant) -> [Action] {
        let fp = facts.fingerprint
        linkOwners[facts.token] = fp
        if let refusal = securityRefusal(facts) { return refuseJoin(facts.token, fp, refusal) }
        if isDisconnected { return refuseJoin(facts.token, fp, "the member left the session") }
        if let weaker = weakerIdentity(facts) { return refuseJoin(facts.token, fp, weaker) }
        // A member coming back, or a member's second link (it redials a link this side has not yet seen end, or two
        // redials crossed): admitted before, so neither an introduction nor the hook is asked again; the
        // duplicate-link rule keeps one link.
        if isReconnecting(fp) || isMember(fp) {
            return admit(facts, .weAdmitJoin(reconnection: isReconnecting(fp)), now: now).1
        }
        var entry = entries[fp] ?? Entry(peer: facts.peer)
        if entry.introduction == nil {
            // Bounded: a former member that knows a secret cannot make this side hold joins without end.
            guard pendingJoinCount < configuration.introductionLimit else {
                return refuseJoin(facts.token, fp, "too many joins are waiting here for their introduction")
            }
            entry.pendingJoins[facts.token] = PendingJoin(facts: facts)
            entries[fp] = entry
            return [.schedule(.introductionWait(facts.token), after: configuration.introductionWait)]
        }
        entries[fp] = entry
        return joinIntroduced(facts.token, fp)
    }

    private var pendingJoinCount: Int { entries.values.reduce(0) { $0 + $1.pendingJoins.count } }

    private mutating func joinIntroduced(_ token: LinkToken, _ fp: PeerFingerprint) -> [Action] {
        guard let entry = entries[fp] else { return [] }
        if !entry.isMember, memberCount + 1 >= configuration.maximumPeers {
            return refuseJoin(token, fp, "the session is full (\(configuration.maximumPeers) peers)")
        }
        var actions: [Action] = []
        update(
            fp, peer: entry.peer, reason: SessionReason(.introduced, "joining through an introduction"), into: &actions
        ) {
            $0.attempts.admitting.insert(token)
        }
        return actions + [.verify(token, incoming: true)]
    }

    /// The hook's decision about an incoming join.
    mutating func joinVerified(_ facts: LinkFacts, decision: VerificationDecision, now: IOInstant) -> [Action] {
        let fp = facts.fingerprint
        guard entries[fp]?.attempts.admitting.contains(facts.token) == true else { return [] }
        if case .refuse(let reason) = decision {
            var actions = refuseJoin(facts.token, fp, "refused by the verification hook: \(reason)")
            update(
                fp, reason: SessionReason(.refusedByVerificationHook, "refused by the verification hook: \(reason)"),
                into: &actions
            ) {
                $0.attempts.admitting.remove(facts.token)
            }
            return actions
        }
        if isDisconnected {
            var actions = refuseJoin(facts.token, fp, "the member left the session")
            update(fp, reason: .thisSideLeft, into: &actions) { $0.attempts.admitting.remove(facts.token) }
            return actions
        }
        return admit(facts, .weAdmitJoin(reconnection: false), now: now).1
    }

    private mutating func refuseJoin(_ token: LinkToken, _ fp: PeerFingerprint, _ reason: String) -> [Action] {
        linkOwners[token] = nil
        entries[fp]?.pendingJoins[token] = nil
        forgetIfIdle(fp)
        return [.send(token, .joinAnswer(accepted: false, reason: reason)), .close(token, "join refused")]
    }

    // MARK: Connection data

    /// This side waits for the peer to dial with its connection data.
    mutating func waitForDial(_ peer: Peer) -> [Action] {
        var actions: [Action] = []
        update(
            peer.claimedFingerprint, peer: peer,
            reason: SessionReason(.waitingForConnection, "waiting for \(peer.displayName) to connect"), into: &actions
        ) { $0.attempts.waitingForDial = true }
        return actions
    }

    /// The wait for the peer's dial ended with `outcome`.
    mutating func waitForDialEnded(_ fp: PeerFingerprint, _ outcome: InvitationOutcome) -> [Action] {
        guard entries[fp]?.attempts.waitingForDial == true else { return [] }
        var actions: [Action] = []
        let member = isMember(fp)
        update(fp, reason: .invitationFailed(outcome), into: &actions) { entry in
            entry.attempts.waitingForDial = false
            if !member, outcome != .accepted, entry.attempts.isEmpty { entry.failure = outcome }
        }
        return actions
    }

    // MARK: Time

    /// A timer fired.
    mutating func timerFired(_ timer: Timer, now: IOInstant) -> [Action] {
        switch timer {
        case .grace(let fp, let id):
            guard let reconnection = entries[fp]?.reconnection, reconnection.timer == id else { return [] }
            return depart(
                fp,
                reason: SessionReason(
                    .notBackInTime, "\(reconnection.reason); not back within \(configuration.reconnectGrace)"))
        case .retry(let fp, let id):
            guard entries[fp]?.retryTimer == id else { return [] }
            entries[fp]?.retryTimer = nil
            return redial(fp)
        case .introduction(let fp, let id):
            guard var introduction = entries[fp]?.introduction, introduction.timer == id else { return [] }
            // Still being dialed: looked at again later. Dialed and not joined: kept for the cooldown first.
            if entries[fp]?.attempts.joinDial != nil || (introduction.dialed && !introduction.cooling) {
                let next = makeID()
                introduction.timer = next
                if entries[fp]?.attempts.joinDial == nil { introduction.cooling = true }
                entries[fp]?.introduction = introduction
                let delay =
                    introduction.cooling ? configuration.introductionCooldown : configuration.introductionLifetime
                return [.schedule(.introduction(fp, id: next), after: delay)]
            }
            entries[fp]?.introduction = nil
            var actions: [Action] = []
            for (token, _) in entries[fp]?.pendingJoins ?? [:] {
                actions += refuseJoin(token, fp, "no member of this session introduced you")
            }
            forgetIfIdle(fp)
            return actions
        case .joinAnswer(let token):
            guard let fp = linkOwners[token], entries[fp]?.attempts.joinDial == .awaitingAnswer(token) else {
                return []
            }
            linkOwners[token] = nil
            return [.close(token, "no answer to the join")]
                + joinAttemptFailed(
                    fp,
                    SessionReason(
                        .joinFailed, "the introduced member did not answer within \(configuration.joinAnswerTimeout)"))
        case .introductionWait(let token):
            guard let fp = linkOwners[token], entries[fp]?.pendingJoins[token] != nil else { return [] }
            return refuseJoin(token, fp, "no member of this session introduced you")
        case .alreadyConnected(let fp, let waiter):
            guard entries[fp]?.alreadyConnected.remove(waiter) != nil else { return [] }
            return endInvitation(
                fp, .refused(reason: "the peer says it is already connected, but this session has no link to it"),
                waiter: waiter)
        case .closeReplaced(let token):
            guard !isMemberLink(token) else { return [] }
            linkOwners[token] = nil
            replacedLinks[token] = nil
            return [.close(token, "replaced by a duplicate link")]
        }
    }

    // MARK: Leaving

    /// This side leaves: every member and every link in play hears `leave`; every peer reported is told
    /// `notConnected`; conversations end.
    mutating func disconnect() -> [Action] {
        guard !isDisconnected else { return [] }
        isDisconnected = true
        var actions: [Action] = []
        for token in linkOwners.keys.sorted() where !isMemberLink(token) {
            actions.append(.send(token, .leave(reason: "left")))
        }
        for (fp, entry) in entries.sorted(by: { $0.key.bytes.lexicographicallyPrecedes($1.key.bytes) }) {
            if let member = entry.member {
                actions.append(.send(member.facts.token, .leave(reason: "left")))
                actions.append(.close(member.facts.token, "left the session"))
            }
            if entry.isMember || entry.isReconnecting { actions.append(.endConversation(entry.peer, .thisSideLeft)) }
            if let reported = entry.reported, reported != .notConnected {
                actions.append(.report(entry.peer, .notConnected, .thisSideLeft))
            }
            for waiter in entry.alreadyConnected.sorted() {
                actions.append(.finishInvitation(waiter: waiter, .refused(reason: "the session was disconnected")))
            }
            for (token, _) in entry.pendingJoins { actions.append(.close(token, "left the session")) }
            _ = fp
        }
        for token in linkOwners.keys.sorted() where !isMemberLink(token) {
            actions.append(.close(token, "left the session"))
        }
        entries = [:]
        linkOwners = [:]
        replacedLinks = [:]
        pendingDialFacts = [:]
        return actions
    }

    // MARK: Reports

    /// Changes a peer's entry and reports the state that results, if it changed.
    private mutating func update(
        _ fp: PeerFingerprint, peer: Peer? = nil, reason: SessionReason, into actions: inout [Action],
        _ change: (inout Entry) -> Void
    ) {
        var entry = entries[fp] ?? Entry(peer: peer ?? Peer(identity: .advertised(fp), displayName: "?"))
        if let peer, !entry.isMember, !entry.isReconnecting { entry.peer = peer }
        change(&entry)
        entries[fp] = entry
        actions += settle(fp, reason: reason)
    }

    /// Reports the peer's state if it differs from what was last reported (never `notConnected` for a peer never
    /// reported), then forgets the peer if nothing is left of it.
    private mutating func settle(_ fp: PeerFingerprint, reason: SessionReason) -> [Action] {
        guard var entry = entries[fp] else { return [] }
        var actions: [Action] = []
        if let member = entry.member { entry.peer = member.facts.peer }
        let now = entry.state
        if now != entry.reported, !(now == nil && entry.reported == nil) {
            var reason = reason
            if now == nil, let departure = entry.departure, case .invitationFailed = reason.code { reason = departure }
            actions.append(.report(entry.peer, now ?? .notConnected, reason))
            if now == .connected {
                entry.failure = nil
                actions.append(.connected(fp))
            }
            entry.reported = now
        }
        // Kept only while the invitation that outlived the membership runs (the peer shows `connecting`).
        if now != .connecting { entry.departure = nil }
        entries[fp] = entry
        forgetIfIdle(fp)
        return actions
    }

    private mutating func forgetIfIdle(_ fp: PeerFingerprint) {
        if entries[fp]?.isForgettable == true { entries[fp] = nil }
    }

    private mutating func makeID() -> Int {
        nextID += 1
        return nextID
    }

    // MARK: Links replaced by a duplicate

    /// Remembers a link that is no longer the member link, so its late messages still count.
    mutating func noteReplaced(_ facts: LinkFacts) {
        replacedLinks[facts.token] = facts
        linkOwners[facts.token] = facts.fingerprint
    }

    /// The peer a link in play belongs to.
    func owner(of token: LinkToken) -> PeerFingerprint? { linkOwners[token] }

    // MARK: Rules shared with the dialers

    /// Why a dialed connection is not the peer meant, or nil.
    static func identityRefusal(_ facts: LinkFacts, expected: PeerFingerprint) -> String? {
        if let proven = facts.peer.fingerprint, proven != expected {
            return "identity mismatch: expected \(expected), the peer proved \(proven)"
        }
        if facts.peer.fingerprint == nil, facts.fingerprint != expected {
            return "identity mismatch: expected \(expected), the plaintext peer claims \(facts.fingerprint)"
        }
        return nil
    }
}
