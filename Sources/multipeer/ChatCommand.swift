internal import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO
import OrderedCollections

/// `multipeer chat SERVICE --name NAME ...`: on a terminal, a full-screen chat (nearby peers, members, messages,
/// invitation prompts, an input line with history, file sending with progress); otherwise (or with `--line` or
/// `--json`) a session driven line by line, one event per output line.
struct ChatCommand: PeerCommand {
    static let summary = "join a session: invite, accept, send lines; events one per line (--json: as JSON)"

    enum AcceptPolicy: String { case all, none, ask }

    var serviceType: String
    var invite: Set<String>
    var accept: AcceptPolicy
    var context: String
    var timeout: Duration
    var maximumPeers: Int
    var json: Bool
    var line: Bool
    /// Where files members send are saved (a private folder of the user's by default).
    var directory: String?
    var options: PeerOptions

    init(_ parsed: MultipeerTool.Chat) throws(UsageError) {
        options = try PeerOptions(
            discovery: parsed.discovery, connection: parsed.connection, wideArea: parsed.wideArea, relay: parsed.relay)
        invite = Set(parsed.invite)
        let policy = parsed.accept ?? "ask"
        guard let accepted = AcceptPolicy(rawValue: policy) else {
            throw UsageError("--accept wants all, none or ask, not '\(policy)'")
        }
        accept = accepted
        context = parsed.context ?? ""
        timeout =
            try parsed.timeout.map { text throws(UsageError) in
                try DiscoveryOptions.seconds(text, option: "--timeout")
            } ?? .seconds(30)
        let maximum = parsed.maxPeers ?? "64"
        guard let value = Int(maximum), value >= 2 else {
            throw UsageError("--max-peers wants a number of peers (at least 2), not '\(maximum)'")
        }
        maximumPeers = value
        json = parsed.json
        line = parsed.line
        directory = parsed.dir
        serviceType = parsed.service
        _ = try DiscoveryOptions.serviceType(serviceType)
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        let chat: Chat
        let screen = !line && !json && FullScreen.isAvailable ? FullScreen() : nil
        // On the screen, every member's verification code is shown (the invitee's prompt shows it too), so two
        // people can compare them; the hook only reports, it lets everyone in.
        let (codes, codeSink) = AsyncStream<(PeerFingerprint, String)>.makeStream(
            bufferingPolicy: .bufferingNewest(256))
        let verify: (@Sendable (PeerVerificationRequest) async -> VerificationDecision)? =
            screen == nil
            ? nil
            : { @Sendable request in
                codeSink.yield((request.peer.claimedFingerprint, request.verificationCode.map { "\($0)" } ?? "none"))
                return .accept
            }
        do {
            let (network, session, advertiser, browser) = try await options.join(
                serviceType, maximumPeers: maximumPeers, verifyPeer: verify, resourceDirectory: directory)
            chat = Chat(
                network: network, session: session, advertiser: advertiser, browser: browser, json: json,
                invite: invite, accept: accept, context: Array(context.utf8), timeout: timeout, screen: screen,
                serviceType: serviceType)
        } catch {
            screen?.restore()
            Output.error("multipeer: \(error.reason)")
            return 1
        }
        await chat.start()
        await runInput(
            screen: screen, signals: signals, key: { await chat.key($0) }, line: { await chat.handle($0) },
            redraw: { await chat.redraw() },
            alongside: [{ for await (peer, code) in codes { await chat.verified(peer, code: code) } }])
        await chat.leave()
        return 0
    }
}

/// The options every session command (`chat`, `send`, `receive`) takes: discovery (interfaces) and connection
/// (identity, name, encryption, group secret, silence timeout).
struct PeerOptions {
    var discovery: DiscoveryOptions
    var connection: ConnectionConfiguration
    /// Discovery through a DNS server, when asked for.
    var wideArea: WideAreaConfiguration?
    /// A TURN relay, when asked for.
    var relay: RelayConfiguration?

    init(
        discovery: DiscoveryArguments, connection: ConnectionArguments, wideArea: WideAreaArguments,
        relay: RelayArguments
    ) throws(UsageError) {
        self.discovery = try DiscoveryOptions(discovery)
        self.connection = try ConnectionOptions(connection, defaultName: ProcessInfo.processInfo.hostName)
            .configuration
        self.wideArea = try wideArea.configuration()
        self.relay = try relay.configuration()
    }

    /// A network for these options.
    func network() throws(SessionError) -> PeerNetwork {
        var configuration = ChatCommand.networkConfiguration(discovery, connection)
        configuration.wideArea = wideArea
        configuration.relay = relay
        let network = try PeerNetwork(configuration: configuration)
        // What happens beyond the link is said on stderr, as the library's failures are.
        Task {
            for await event in network.events { Output.error("multipeer: \(Self.describe(event))") }
        }
        return network
    }

    /// A network event in words.
    static func describe(_ event: PeerNetwork.Event) -> String {
        switch event {
        case .wideAreaRegistered(let instance): "registered \(Output.escaped(instance))"
        case .wideAreaFailed(let error): "wide-area discovery: \(Output.escaped(error.reason))"
        case .relayAllocated(let address): "relayed at \(address)"
        case .relayFailed(let error, let retry): "relay: \(Output.escaped(error.reason)); trying again in \(retry)"
        }
    }

    /// What the session commands (`chat`, `colors`) run on: a network, a session, an advertiser and a browser of
    /// `serviceType`, with these options' identity and security.
    func join(
        _ serviceType: String, maximumPeers: Int = 64,
        verifyPeer: (@Sendable (PeerVerificationRequest) async -> VerificationDecision)? = nil,
        resourceDirectory: String? = nil
    ) async throws(SessionError) -> (PeerNetwork, Session, PeerAdvertiser, PeerBrowser) {
        let made = try network()
        var configuration = session
        configuration.maximumPeers = maximumPeers
        configuration.verifyPeer = verifyPeer
        if let resourceDirectory { configuration.resourceDirectory = resourceDirectory }
        let joined = try await Session(identity: connection.identity, configuration: configuration, network: made)
        let advertiser = try await PeerAdvertiser(
            serviceType: serviceType, identity: connection.identity, encryption: connection.encryption,
            groupSecret: connection.groupSecret, network: made)
        let browser = try await PeerBrowser(serviceType: serviceType, identity: connection.identity, network: made)
        return (made, joined, advertiser, browser)
    }

    /// Leaves what ``join(_:maximumPeers:verifyPeer:resourceDirectory:)`` made: members see `left` (the session
    /// waits for its links to close gracefully), browsers get goodbyes, then the network stops.
    static func leave(
        _ network: PeerNetwork, _ session: Session, _ advertiser: PeerAdvertiser, _ browser: PeerBrowser,
        tasks: [Task<Void, Never>]
    ) async {
        browser.stop()
        await session.disconnect()
        await advertiser.stop()
        await network.shutdown()
        for task in tasks { task.cancel() }
    }

    /// A session configuration with these options' encryption and group secret.
    var session: SessionConfiguration {
        SessionConfiguration(encryption: connection.encryption, groupSecret: connection.groupSecret)
    }
}

extension ChatCommand {
    /// The network the session commands (`chat`, `send`, `receive`) use: the discovery options' interfaces
    /// (loopback pins the listener to 127.0.0.1 too) and the connection options' timeouts.
    static func networkConfiguration(
        _ discovery: DiscoveryOptions, _ connection: ConnectionConfiguration
    ) -> PeerNetwork.Configuration {
        var networkConfiguration = PeerNetwork.Configuration()
        networkConfiguration.discovery = discovery.configuration
        networkConfiguration.logger = ToolLog.logger
        if discovery.configuration.interfaces == .loopbackOnly {
            networkConfiguration.listenAddresses = [.v4(IPv4Address(127, 0, 0, 1))]
        }
        networkConfiguration.tuneConnections = {
            $0.silenceTimeout = connection.silenceTimeout
            $0.keepaliveInterval = connection.keepaliveInterval
            $0.handshakeTimeout = connection.handshakeTimeout
            $0.dialTimeout = connection.dialTimeout
        }
        return networkConfiguration
    }
}

/// A command that takes ``PeerOptions``.
protocol PeerCommand {
    var options: PeerOptions { get }
}

extension PeerCommand {
    /// This side's identity and connection settings.
    var connection: ConnectionConfiguration { options.connection }
    /// The interfaces to discover on.
    var discovery: DiscoveryOptions { options.discovery }
}

/// Reads stdin line by line on a thread of its own (reading blocks), ending at end of input.
final class InputLines: Sendable {
    let lines: AsyncStream<String>

    init() {
        let (lines, sink) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingOldest(1024))
        self.lines = lines
        Thread.detachNewThread {
            while let line = readLine(strippingNewline: true) { sink.yield(line) }
            sink.finish()
        }
    }
}

/// The chat's state: who was found, who is invited or connected, what is pending; prints every event (line
/// mode) or shows it (full screen).
actor Chat {

    let network: PeerNetwork
    let session: Session
    let advertiser: PeerAdvertiser
    let browser: PeerBrowser
    let json: Bool
    let autoInvite: Set<String>
    let accept: ChatCommand.AcceptPolicy
    let context: [UInt8]
    let timeout: Duration
    private var found: [String: Peer] = [:]
    private var connected: [String: Peer] = [:]
    /// Invitations waiting for an answer, by inviter, oldest first (the prompt asks about the first); a newer one
    /// from the same inviter replaces it and goes last.
    private var pending: OrderedDictionary<String, Invitation> = [:]
    private var tasks: [Task<Void, Never>] = []
    /// Set once leaving: discovery and invitation outcomes no longer matter.
    private var leaving = false
    // Full screen only.
    let screen: FullScreen?
    let serviceType: String
    private var editor = LineEditor()
    /// How far the message pane is scrolled back, in rows.
    private var scroll = 0
    private var pane = MessagePane()
    /// Peers this side is inviting now.
    private var inviting: Set<String> = []
    /// The verification code of each member's link, by name.
    private var codes: [PeerFingerprint: String] = [:]
    /// The invitation a plain input line answers: the prompt showing when that line was begun (a line typed
    /// before an invitation arrived is sent as a message, not taken as an answer).
    private var answerable: String?
    /// The most invitations waiting for an answer at once; more are declined.
    static let pendingLimit = 16
    /// Files on their way, each shown with a progress bar.
    private var transfers: [(id: ObjectIdentifier, printer: ProgressPrinter, completed: @Sendable () -> Int64)] = []

    init(
        network: PeerNetwork, session: Session, advertiser: PeerAdvertiser, browser: PeerBrowser, json: Bool,
        invite: Set<String>, accept: ChatCommand.AcceptPolicy, context: [UInt8], timeout: Duration,
        screen: FullScreen? = nil, serviceType: String = ""
    ) {
        self.screen = screen
        self.serviceType = serviceType
        self.network = network
        self.session = session
        self.advertiser = advertiser
        self.browser = browser
        self.json = json
        autoInvite = invite
        self.accept = accept
        self.context = context
        self.timeout = timeout
    }

    func start() {
        tasks.append(Task { for await event in browser.events { self.browsed(event) } })
        tasks.append(Task { for await invitation in advertiser.invitations { await self.invited(invitation) } })
        tasks.append(Task { for await event in session.events { self.sessionEvent(event) } })
        tasks.append(
            Task {
                for await message in session.messages {
                    self.print("message", message.peer.displayName, String(decoding: message.bytes, as: UTF8.self))
                }
            })
        guard screen != nil else { return }
        // Progress bars move while files travel.
        tasks.append(
            Task {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    if self.hasTransfers { self.redraw() }
                }
            })
        redraw()
    }

    private var hasTransfers: Bool { !transfers.isEmpty }

    /// Prints `event NAME[: TEXT]`, or the same as a JSON object.
    private func print(_ event: String, _ name: String, _ text: String? = nil, extra: [(String, String)] = []) {
        if screen != nil {
            // show() escapes what peers sent.
            let words = ([event, name] + extra.map(\.1)).joined(separator: " ")
            show(
                event == "message"
                    ? "\(name): \(text ?? "")" : "· " + (text.flatMap { $0.isEmpty ? nil : "\(words): \($0)" } ?? words)
            )
            return
        }
        if json {
            var fields = [("event", event), ("name", name)] + extra
            if let text { fields.append(("text", text)) }
            Output.line("{" + fields.map { "\(Output.json($0.0)):\(Output.json($0.1))" }.joined(separator: ",") + "}")
        } else {
            // Names, reasons and messages come from peers: control characters are escaped, so no peer can
            // forge an event line of its own.
            let words = ([event, Output.escaped(name)] + extra.map(\.1)).joined(separator: " ")
            Output.line(
                text.flatMap { $0.isEmpty && event != "message" ? nil : "\(words): \(Output.escaped($0))" } ?? words)
        }
    }

    private func browsed(_ event: PeerBrowser.Event) {
        guard !leaving else { return }
        switch event {
        case .found(let discovered):
            let peer = discovered.peer
            found[peer.displayName] = peer
            print(
                "found", peer.displayName,
                extra: screen == nil ? [("fingerprint", peer.claimedFingerprint.description)] : [])
            if autoInvite.contains(peer.displayName), connected[peer.displayName] == nil {
                invite(peer, context: context)
            }
        case .updated(let discovered):
            found[discovered.peer.displayName] = discovered.peer
        case .lost(let peer):
            if found[peer.displayName] == peer { found[peer.displayName] = nil }
            print("lost", peer.displayName)
        }
    }

    private func invite(_ peer: Peer, context: [UInt8]) {
        print("invited", peer.displayName)
        let browser = browser
        let session = session
        let timeout = timeout
        inviting.insert(peer.displayName)
        Task {
            let outcome = await browser.invite(peer, into: session, context: context, timeout: timeout)
            self.invitationEnded(peer, outcome)
        }
    }

    private func invitationEnded(_ peer: Peer, _ outcome: InvitationOutcome) {
        inviting.remove(peer.displayName)
        guard !leaving else { return }
        switch outcome {
        case .accepted: print("accepted", peer.displayName)
        case .declined(let reason): print("declined", peer.displayName, reason)
        case .timedOut: print("timed out", peer.displayName)
        case .unreachable(let error): print("unreachable", peer.displayName, error.reason)
        case .refused(let reason): print("refused", peer.displayName, reason)
        }
    }

    private func invited(_ invitation: Invitation) async {
        let name = invitation.peer.displayName
        let code = invitation.verificationCode?.description ?? "none"
        let context = String(decoding: invitation.context, as: UTF8.self)
        if json {
            print("invitation", name, context, extra: [("code", code)])
        } else if screen != nil {
            show("· invitation from \(name) code \(code): \(context)")
        } else {
            Output.line("invitation from \(Output.escaped(name)) code \(code): \(Output.escaped(context))")
        }
        switch accept {
        case .all:
            do {
                try await invitation.accept(into: session)
            } catch {
                complain("could not accept \(name): \(error.reason)")
            }
        case .none:
            invitation.decline(reason: "not accepting invitations")
        case .ask:
            dropClosedInvitations()
            guard pending[name] != nil || pending.count < Self.pendingLimit else {
                return invitation.decline(reason: "too many invitations are waiting for an answer here")
            }
            pending.removeValue(forKey: name)?.decline(reason: "a newer invitation replaced this one")
            pending[name] = invitation
            redraw()
        }
    }

    private func sessionEvent(_ event: SessionEvent) {
        switch event {
        case .peerChanged(let peer, .connected, _):
            let again = connected[peer.displayName] == peer
            connected[peer.displayName] = peer
            print(again ? "reconnected" : "connected", peer.displayName)
        case .peerChanged(let peer, .reconnecting, let reason):
            print("reconnecting", peer.displayName, reason.description)
        case .peerChanged(let peer, .notConnected, let reason):
            guard connected[peer.displayName] == peer else { return }
            connected[peer.displayName] = nil
            print("disconnected", peer.displayName, reason.description)
        case .peerChanged:
            break
        case .resourceStarted(let resource):
            let printer = ProgressPrinter(
                verb: "receiving",
                name: "\(Output.escaped(resource.name)) from \(Output.escaped(resource.peer.displayName))",
                total: resource.size)
            transfers.append((ObjectIdentifier(resource), printer, { resource.progress.completedUnitCount }))
            print("receiving", resource.peer.displayName, resource.name, extra: [("size", "\(resource.size) bytes")])
        case .resourceFinished(let resource, let result):
            transfers.removeAll { $0.id == ObjectIdentifier(resource) }
            switch result {
            case .success(let url): print("received", resource.peer.displayName, url.path)
            case .failure(let error): print("failed", resource.peer.displayName, "\(resource.name): \(error.reason)")
            }
        case .undelivered(let peer, let numbers, let reason):
            print("undelivered", peer.displayName, "\(numbers.count) messages: \(reason)")
        case .stream(let stream, let peer):
            print("stream", peer.displayName, stream.name)
            stream.reset()
        }
    }

    /// Runs one input line.
    func handle(_ line: String) async -> InputStep {
        guard line.hasPrefix("/") else {
            let peers = Array(connected.values)
            guard !peers.isEmpty else {
                complain("nobody is connected; the line was not sent")
                return .next
            }
            if screen != nil { show("\(session.localPeer.displayName): \(line)") }
            for (peer, result) in await session.send(Array(line.utf8), to: peers) {
                if case .failed(let error) = result { complain("not sent to \(peer.displayName): \(error.reason)") }
            }
            return .next
        }
        let command = String(line.prefix { $0 != " " })
        let argument = String(line.dropFirst(command.count).drop { $0 == " " })
        // A display name may hold spaces: the longest name this chat knows that starts the argument wins.
        let names = Set(found.keys).union(connected.keys).union(pending.keys)
        let name =
            names.filter { argument == $0 || argument.hasPrefix($0 + " ") }.max { $0.count < $1.count }
            ?? String(argument.prefix { $0 != " " })
        let rest = String(argument.dropFirst(name.count).drop { $0 == " " })
        let words = [command, name] + (rest.isEmpty ? [] : [rest])
        switch words.first {
        case "/quit":
            return .quit
        case "/invite":
            guard let peer = found[name] else {
                complain("no peer named '\(name)' was found")
                return .next
            }
            invite(peer, context: words.count > 2 ? Array(rest.utf8) : context)
        case "/accept":
            await acceptPending(name)
        case "/decline":
            declinePending(name, reason: rest)
        case "/send":
            guard let peer = connected[name] else {
                complain("'\(name)' is not a member: invite it first")
                return .next
            }
            send(file: rest, to: peer)
        case "/to":
            guard let peer = connected[name] else {
                complain("'\(name)' is not connected")
                return .next
            }
            if screen != nil {
                show("\(session.localPeer.displayName) → \(name): \(rest)")
            }
            if case .failed(let error)? = await session.send(Array(rest.utf8), to: [peer])[peer] {
                complain("not sent to \(name): \(error.reason)")
            }
        default:
            complain("unknown command \(words.first ?? line); try /invite, /accept, /decline, /to, /send, /quit")
        }
        return .next
    }

    private func acceptPending(_ name: String) async {
        guard let invitation = pending.removeValue(forKey: name) else {
            return complain("no invitation from '\(name)' is pending")
        }
        do {
            try await invitation.accept(into: session)
        } catch {
            complain("could not accept \(name): \(error.reason)")
        }
    }

    private func declinePending(_ name: String, reason: String) {
        guard let invitation = pending.removeValue(forKey: name) else {
            return complain("no invitation from '\(name)' is pending")
        }
        invitation.decline(reason: reason)
        if screen != nil {
            show("· declined \(name)" + (reason.isEmpty ? "" : ": \(reason)"))
        }
    }

    /// `/send NAME FILE`: the file (or an http(s) URL) goes to the member, with a progress bar on the screen and
    /// a final `sent NAME: FILE SIZE bytes sha256 HEX` (or `failed NAME: FILE: REASON`).
    private func send(file: String, to peer: Peer) {
        guard !file.isEmpty else { return complain("which file? /send NAME FILE") }
        let url: URL
        if file.hasPrefix("http://") || file.hasPrefix("https://"), let remote = URL(string: file) {
            url = remote
        } else {
            let path = NSString(string: file).expandingTildeInPath
            guard FileManager.default.isReadableFile(atPath: path) else { return complain("cannot read \(file)") }
            url = URL(fileURLWithPath: path)
        }
        let name = url.lastPathComponent.isEmpty ? "resource" : url.lastPathComponent
        let session = session
        Task {
            let transfer: ResourceTransfer
            do throws(SessionError) {
                transfer = try await session.sendResource(at: url, named: name, to: peer)
            } catch {
                return self.print("failed", peer.displayName, "\(name): \(error.reason)")
            }
            self.started(transfer)
            let result: Result<ResourceReceipt, SessionError>
            do throws(SessionError) { result = .success(try await transfer.finished()) } catch {
                result = .failure(error)
            }
            self.ended(transfer, result)
        }
    }

    private func started(_ transfer: ResourceTransfer) {
        let printer = ProgressPrinter(
            verb: "sending", name: Output.escaped("\(transfer.name) to \(transfer.peer.displayName)"),
            total: transfer.progress.totalUnitCount)
        transfers.append((ObjectIdentifier(transfer), printer, { transfer.progress.completedUnitCount }))
        redraw()
    }

    private func ended(_ transfer: ResourceTransfer, _ result: Result<ResourceReceipt, SessionError>) {
        transfers.removeAll { $0.id == ObjectIdentifier(transfer) }
        switch result {
        case .success(let receipt):
            print("sent", transfer.peer.displayName, "\(transfer.name) \(receipt.size) bytes sha256 \(receipt.sha256)")
        case .failure(let error):
            print("failed", transfer.peer.displayName, "\(transfer.name): \(error.reason)")
        }
    }

    // MARK: Full screen

    /// A member's link passed its security checks with this verification code.
    func verified(_ peer: PeerFingerprint, code: String) {
        if codes.count >= 256 {
            let members = Set(connected.values.map(\.claimedFingerprint))
            codes = codes.filter { members.contains($0.key) }
        }
        codes[peer] = code
        redraw()
    }

    /// A line for the message pane (escaped and bounded there), and a redraw.
    private func show(_ text: String) {
        pane.append(text)
        redraw()
    }

    /// A mistake of the user's: on the screen's pane, or on stderr in line mode.
    private func complain(_ text: String) {
        if screen != nil { show("! " + text) } else { Output.error(text) }
    }

    /// A key typed on the full screen: editing, history, Enter runs the line (or answers the invitation
    /// prompt), Ctrl-D on an empty line quits.
    func key(_ key: Key) async -> InputStep {
        if key == .control(4), editor.text.isEmpty { return .quit }
        if editor.text.isEmpty { answerable = pending.keys.first }
        if key == .pageUp || key == .pageDown {
            let step = max(1, (screen?.size.rows ?? 24) / 2)
            scroll = key == .pageUp ? min(scroll + step, MessagePane.lineLimit * 8) : max(0, scroll - step)
            redraw()
            return .next
        }
        guard case .submitted(let line) = editor.apply(key) else {
            redraw()
            return .next
        }
        scroll = 0
        let step: InputStep
        if let name = pending.keys.first, name == answerable, !line.hasPrefix("/") {
            step = await answer(name, line)
        } else {
            step = await handle(line)
        }
        redraw()
        return step
    }

    /// An answer to the invitation prompt: `y` accepts; `n` and an optional reason declines.
    private func answer(_ name: String, _ line: String) async -> InputStep {
        let word = line.prefix { $0 != " " }.lowercased()
        let reason = String(line.drop { $0 != " " }.drop { $0 == " " })
        if ["y", "yes"].contains(line.trimmingCharacters(in: .whitespaces).lowercased()) {
            await acceptPending(name)
        } else if ["n", "no"].contains(word) {
            declinePending(name, reason: reason.isEmpty ? "declined" : reason)
        } else {
            complain("answer y to accept \(name), or n and a reason to decline")
        }
        return .next
    }

    /// Forgets invitations that ended without an answer (withdrawn, timed out).
    private func dropClosedInvitations() {
        pending = pending.filter { $0.value.isOpen }
    }

    func redraw() {
        guard let screen, !leaving else { return }
        dropClosedInvitations()
        let names = Set(found.keys).union(connected.keys).union(pending.keys).sorted()
        let nearby = names.map { name -> (name: String, state: String) in
            let state: String
            if let peer = connected[name] {
                state =
                    peer.isAuthenticated
                    ? "member, code \(codes[peer.claimedFingerprint] ?? "none")" : "member, not proven (plaintext)"
            } else if let invitation = pending[name] {
                state = "invites you, code \(invitation.verificationCode?.description ?? "none")"
            } else if inviting.contains(name) {
                state = "invited, waiting"
            } else {
                state = "found " + String((found[name]?.claimedFingerprint.description ?? "").prefix(14))
            }
            return (Output.escaped(name), state)
        }
        let members = connected.keys.sorted().map { name in
            Output.escaped(name) + (connected[name]?.isAuthenticated == true ? " ✓" : "")
        }
        var prompt: String?
        var inputPrompt = "> "
        if let (name, invitation) = pending.elements.first {
            // The code first, and the inviter's message on one line after it: a message cannot push the real code
            // off the screen or show a code of its own in its place.
            let context = Output.escaped(String(decoding: invitation.context, as: UTF8.self))
            let shown = CellWidth.prefix(Substring(context), fitting: 60)
            prompt =
                "\(Output.escaped(name)) invites you (verification code "
                + "\(invitation.verificationCode?.description ?? "none"))"
                + (context.isEmpty ? "" : ": \"\(shown)\(shown.count < context.count ? "…" : "")\"")
                + ". Type y to accept, or n and a reason to decline."
            inputPrompt = "answer \(Output.escaped(name))> "
        }
        let bars = transfers.map { transfer -> String in
            let done = transfer.completed()
            let percent = transfer.printer.total > 0 ? Int(100 * done / transfer.printer.total) : 100
            return "\(ProgressPrinter.bar(done, of: transfer.printer.total, width: 20)) \(percent)% "
                + transfer.printer.line(done)
        }
        let me = session.localPeer
        let view = ChatView(
            title: "multipeer chat · \(Output.escaped(me.displayName)) · \(serviceType) · \(members.count) "
                + (members.count == 1 ? "member" : "members"),
            nearby: nearby, members: members, pane: pane.lines, transfers: bars, prompt: prompt,
            inputPrompt: inputPrompt,
            input: editor.text, scroll: scroll)
        let (rows, columns) = screen.size
        let (lines, cursor) = view.render(rows: rows, columns: columns)
        screen.draw(lines, cursor: cursor)
    }

    /// Leaves the session cleanly: members see `left`.
    func leave() async {
        leaving = true
        browser.stop()
        for invitation in pending.values { invitation.decline(reason: "the peer left") }
        pending = [:]
        await PeerOptions.leave(network, session, advertiser, browser, tasks: tasks)
    }
}
