public import Foundation
internal import Logging
internal import MulticastDNS
internal import Multipeer
internal import MultipeerIO

/// What an advertiser tells its application (Apple's `MCNearbyServiceAdvertiserDelegate`), on a private serial
/// queue.
public protocol MCNearbyServiceAdvertiserDelegate: NSObjectProtocol {
    /// A peer invites this one into its session: call `invitationHandler(true, session)` to join with `session`,
    /// or `(false, nil)` to decline. `context` is the inviter's data (untrusted input).
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void)
    /// Advertising could not start. Optional: without it, the reason is written to standard error.
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error)
}

extension MCNearbyServiceAdvertiserDelegate {
    /// Writes the reason to standard error (never silent, unlike Apple's framework).
    public func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        report("MCNearbyServiceAdvertiser did not start advertising: \(error.localizedDescription)")
    }
}

/// What a browser tells its application (Apple's `MCNearbyServiceBrowserDelegate`), on a private serial queue.
public protocol MCNearbyServiceBrowserDelegate: NSObjectProtocol {
    /// A peer was found (once per peer, however many interfaces show it), with its discovery info.
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?)
    /// A peer found before is gone.
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID)
    /// Browsing could not start. Optional: without it, the reason is written to standard error.
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error)
}

extension MCNearbyServiceBrowserDelegate {
    /// Writes the reason to standard error (never silent, unlike Apple's framework).
    public func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        report("MCNearbyServiceBrowser did not start browsing: \(error.localizedDescription)")
    }
}

/// Logs what the module did on the application's behalf or could not do, where Apple's framework says nothing
/// (a warning by default), through ``MCNetwork``'s logger.
func report(_ line: String, level: Logger.Level = .warning, peer: MCPeerID? = nil) {
    MCNetwork.logger.log(
        level: level, "\(line)",
        metadata: peer.map { .peer($0.displayName, fingerprint: $0.fingerprint) })
}

/// Checks a service type by Apple's (RFC 6335) rules, stopping with the rule broken as Apple raises.
func validServiceType(_ serviceType: String, in caller: String) -> String {
    do {
        _ = try ServiceType(serviceType)
    } catch {
        invalidArgument("\(caller): invalid serviceType '\(serviceType)': \(error)")
    }
    return serviceType
}

/// Advertises this peer under a service type and passes invitations to its delegate (Apple's
/// `MCNearbyServiceAdvertiser`), on the native ``PeerAdvertiser``.
open class MCNearbyServiceAdvertiser: NSObject, @unchecked Sendable {
    // Safety of @unchecked Sendable: immutable properties; the running advertiser behind a lock.

    /// The delegate (held weakly).
    public var delegate: (any MCNearbyServiceAdvertiserDelegate)? {
        get { delegateBox.value }
        set { delegateBox.value = newValue }
    }
    /// This side.
    public let myPeerID: MCPeerID
    /// The discovery info advertised (keys and values in the TXT record).
    public let discoveryInfo: [String: String]?
    /// The service type.
    public let serviceType: String

    private let delegateBox = WeakDelegate<any MCNearbyServiceAdvertiserDelegate>()
    let calls: DelegateQueue
    /// The advertiser started last, with a token so a failed start clears only itself.
    private let running = Lock<(token: UUID, task: Task<PeerAdvertiser?, Never>)?>(nil)
    private let groupSecret: GroupSecret?

    /// An advertiser for `myPeerID` (made on this device). Stops with the rule broken for an invalid service
    /// type (1-15 letters of either case, digits and hyphens, at least one letter, no hyphen at either end or
    /// twice in a row), as Apple raises. Case does not matter: `MKSVC` finds and is found by `mksvc`.
    public convenience init(peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String) {
        self.init(peer: myPeerID, discoveryInfo: info, serviceType: serviceType, groupSecret: nil)
    }

    /// An advertiser whose inviters must prove `groupSecret` (an addition, for sessions made with the same secret).
    public init(
        peer myPeerID: MCPeerID, discoveryInfo info: [String: String]?, serviceType: String, groupSecret: Data?
    ) {
        guard myPeerID.identity != nil else {
            invalidArgument("MCNearbyServiceAdvertiser: \(myPeerID) was not made on this device")
        }
        self.myPeerID = myPeerID
        discoveryInfo = info
        self.serviceType = validServiceType(serviceType, in: "MCNearbyServiceAdvertiser")
        self.groupSecret = groupSecret.map { MCSession.groupSecret($0, for: "MCNearbyServiceAdvertiser") }
        calls = DelegateQueue(label: "MCNearbyServiceAdvertiser.delegate")
        super.init()
    }

    deinit {
        if let task = running.withLock({ $0?.task }) { Task { await task.value?.stop() } }
    }

    /// Starts advertising (again after a stop); failures reach `advertiser(_:didNotStartAdvertisingPeer:)`.
    open func startAdvertisingPeer() {
        let identity = myPeerID.identity!
        let info = discoveryInfo ?? [:]
        let serviceType = serviceType
        let groupSecret = groupSecret
        running.withLock { running in
            guard running == nil else { return }
            let token = UUID()
            let task = Task { [weak self] () -> PeerAdvertiser? in
                do {
                    // The listener negotiates what each inviter wants; accepting into a session then checks the
                    // connection against that session's preference (`.required` refuses a plaintext inviter).
                    let advertiser = try await PeerAdvertiser(
                        serviceType: serviceType, identity: identity, discoveryInfo: info, encryption: .optional,
                        groupSecret: groupSecret, network: try MCNetwork.shared())
                    Task { [weak self] in
                        for await invitation in advertiser.invitations {
                            guard let self else { return invitation.decline(reason: "the advertiser is gone") }
                            await self.offer(invitation)
                        }
                    }
                    return advertiser
                } catch {
                    let failure = MCError(.unavailable, reason: "\(error)")
                    self?.calls.post { [weak self] in
                        guard let self else { return }
                        self.delegate?.advertiser(self, didNotStartAdvertisingPeer: failure)
                    }
                    self?.running.withLock { if $0?.token == token { $0 = nil } }
                    return nil
                }
            }
            running = (token, task)
        }
    }

    /// Stops advertising; invitations already delivered can still be answered.
    open func stopAdvertisingPeer() {
        let task = running.withLock { running -> Task<PeerAdvertiser?, Never>? in
            defer { running = nil }
            return running?.task
        }
        guard let task else { return }
        Task { await task.value?.stop() }
    }

    private func offer(_ invitation: Invitation) async {
        let peerID = MCPeerID(peer: invitation.peer)
        let context = invitation.context.isEmpty ? nil : Data(invitation.context)
        let answered = Lock(false)
        let handler: (Bool, MCSession?) -> Void = { accept, session in
            guard
                answered.withLock({ done in
                    defer { done = true }; return !done
                })
            else { return }
            guard accept else { return invitation.decline(reason: "declined") }
            guard let session else { return invitation.decline(reason: "accepted without a session") }
            Task {
                do {
                    try await invitation.accept(into: session.nativeSession())
                } catch {
                    report("accepting \(peerID.displayName)'s invitation failed: \(error)", peer: peerID)
                }
            }
        }
        nonisolated(unsafe) let unsafeHandler = handler
        await calls.deliver { [weak self] in
            guard let self, let delegate = self.delegate else { return invitation.decline(reason: "nobody answers") }
            delegate.advertiser(
                self, didReceiveInvitationFromPeer: peerID, withContext: context, invitationHandler: unsafeHandler)
        }
    }
}

/// Finds peers advertising a service type and invites them (Apple's `MCNearbyServiceBrowser`), on the native
/// ``PeerBrowser``.
open class MCNearbyServiceBrowser: NSObject, @unchecked Sendable {
    // Safety of @unchecked Sendable: immutable properties; the running browser behind a lock.

    /// The delegate (held weakly).
    public var delegate: (any MCNearbyServiceBrowserDelegate)? {
        get { delegateBox.value }
        set { delegateBox.value = newValue }
    }
    /// This side.
    public let myPeerID: MCPeerID
    /// The service type.
    public let serviceType: String

    private let delegateBox = WeakDelegate<any MCNearbyServiceBrowserDelegate>()
    let calls: DelegateQueue
    /// The browser started last (kept after a stop: inviting through it then reports the peer unreachable).
    private let running = Lock<(token: UUID, task: Task<PeerBrowser?, Never>, stopped: Bool)?>(nil)

    /// A browser for `myPeerID` (its own advertisement is never reported). Stops with the rule broken for an
    /// invalid service type, as Apple raises.
    public init(peer myPeerID: MCPeerID, serviceType: String) {
        guard myPeerID.identity != nil else {
            invalidArgument("MCNearbyServiceBrowser: \(myPeerID) was not made on this device")
        }
        self.myPeerID = myPeerID
        self.serviceType = validServiceType(serviceType, in: "MCNearbyServiceBrowser")
        calls = DelegateQueue(label: "MCNearbyServiceBrowser.delegate")
        super.init()
    }

    deinit {
        if let task = running.withLock({ $0?.task }) { Task { await task.value?.stop() } }
    }

    /// Starts browsing (again after a stop: peers still there are found again).
    open func startBrowsingForPeers() {
        let identity = myPeerID.identity!
        let serviceType = serviceType
        running.withLock { running in
            guard running == nil || running?.stopped == true else { return }
            let token = UUID()
            let task = Task { [weak self] () -> PeerBrowser? in
                do {
                    let browser = try await PeerBrowser(
                        serviceType: serviceType, identity: identity, network: try MCNetwork.shared())
                    Task { [weak self] in
                        for await event in browser.events {
                            guard let self else { return }
                            await self.handle(event)
                        }
                    }
                    return browser
                } catch {
                    let failure = MCError(.unavailable, reason: "\(error)")
                    self?.calls.post { [weak self] in
                        guard let self else { return }
                        self.delegate?.browser(self, didNotStartBrowsingForPeers: failure)
                    }
                    self?.running.withLock { if $0?.token == token { $0 = nil } }
                    return nil
                }
            }
            running = (token, task, false)
        }
    }

    /// Stops browsing.
    open func stopBrowsingForPeers() {
        let task = running.withLock { running -> Task<PeerBrowser?, Never>? in
            guard let current = running, !current.stopped else { return nil }
            running = (current.token, current.task, true)
            return current.task
        }
        guard let task else { return }
        Task { await task.value?.stop() }
    }

    private func handle(_ event: PeerBrowser.Event) async {
        switch event {
        case .found(let found):
            let peerID = MCPeerID(peer: found.peer)
            let info = found.discoveryInfo
            await calls.deliver { [weak self] in
                guard let self else { return }
                self.delegate?.browser(self, foundPeer: peerID, withDiscoveryInfo: info)
            }
        case .updated:
            break  // Apple's API has no such call
        case .lost(let peer):
            let peerID = MCPeerID(peer: peer)
            await calls.deliver { [weak self] in
                guard let self else { return }
                self.delegate?.browser(self, lostPeer: peerID)
            }
        }
    }

    /// Invites a found peer into `session`. As in Apple's API the answer shows only as the peer's state in the
    /// session (`.connecting`, then `.connected` or `.notConnected`); ``MCSession/disconnectReason(for:)`` says
    /// why it failed.
    /// - Parameters:
    ///   - peerID: A peer this browser found.
    ///   - session: The session to invite it into.
    ///   - context: Data the invitee's application sees (at most 8 KiB).
    ///   - timeout: Seconds to wait for the answer; zero or less means 30, as in Apple's API.
    open func invitePeer(_ peerID: MCPeerID, to session: MCSession, withContext context: Data?, timeout: TimeInterval) {
        let task = running.withLock { $0?.task }
        let peer = peerID.nativePeer
        let bytes = [UInt8](context ?? Data())
        let wait: Duration =
            timeout <= 0 || !timeout.isFinite ? .seconds(30) : .milliseconds(Int64(min(timeout, 86_400) * 1000))
        Task {
            guard let browser = await task?.value else {
                report("invitePeer(\(peerID.displayName)): the browser never started browsing", peer: peerID)
                return
            }
            guard let native = try? await session.nativeSession() else { return }
            _ = await browser.invite(peer, into: native, context: bytes, timeout: wait)
        }
    }
}

/// What an advertiser assistant tells its application (Apple's `MCAdvertiserAssistantDelegate`).
public protocol MCAdvertiserAssistantDelegate: NSObjectProtocol {
    /// An invitation is about to be answered.
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
    /// An invitation was answered.
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant)
}

extension MCAdvertiserAssistantDelegate {
    /// Does nothing.
    public func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
    /// Does nothing.
    public func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
}

/// Apple's `MCAdvertiserAssistant` without its dialog: it advertises and answers invitations into its session
/// by ``invitationHandler`` (an addition), which by default accepts every invitation and writes a line saying
/// so (with the verification code) to standard error, where Apple would show an alert for a person to accept.
/// The delegate hears `willPresent` before each answer and `didDismiss` after it.
open class MCAdvertiserAssistant: NSObject, @unchecked Sendable, MCNearbyServiceAdvertiserDelegate {
    // Safety of @unchecked Sendable: immutable properties and a thread-safe advertiser.

    /// The delegate (held weakly).
    public var delegate: (any MCAdvertiserAssistantDelegate)? {
        get { delegateBox.value }
        set { delegateBox.value = newValue }
    }
    /// The session invitations are accepted into.
    public let session: MCSession
    /// The discovery info advertised.
    public let discoveryInfo: [String: String]?
    /// The service type.
    public let serviceType: String
    /// Decides each invitation: the inviter and its context; true accepts (an addition; default: accept).
    public var invitationHandler: @Sendable (MCPeerID, Data?) -> Bool {
        get { handler.withLock { $0 }.value }
        set { handler.withLock { $0 = Boxed(newValue) } }
    }

    private let delegateBox = WeakDelegate<any MCAdvertiserAssistantDelegate>()
    private let handler = Lock<Boxed<@Sendable (MCPeerID, Data?) -> Bool>>(
        Boxed({ peerID, _ in
            report(
                "MCAdvertiserAssistant: accepting the invitation from \(peerID.displayName)", level: .info,
                peer: peerID)
            return true
        }))
    private let advertiser: MCNearbyServiceAdvertiser

    /// An assistant for `session`'s peer. Stops with the rule broken for an invalid service type.
    public init(serviceType: String, discoveryInfo info: [String: String]?, session: MCSession) {
        self.session = session
        discoveryInfo = info
        self.serviceType = serviceType
        advertiser = MCNearbyServiceAdvertiser(peer: session.myPeerID, discoveryInfo: info, serviceType: serviceType)
        super.init()
        advertiser.delegate = self
    }

    /// Starts advertising.
    open func start() { advertiser.startAdvertisingPeer() }
    /// Stops advertising.
    open func stop() { advertiser.stopAdvertisingPeer() }

    /// Answers by ``invitationHandler``, telling the delegate before and after.
    public func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        delegate?.advertiserAssistantWillPresentInvitation(self)
        let accept = self.invitationHandler(peerID, context)
        invitationHandler(accept, accept ? session : nil)
        delegate?.advertiserAssistantDidDismissInvitation(self)
    }
}
