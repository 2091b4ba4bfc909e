internal import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer chat SERVICE --name NAME ...`: a session driven line by line (when stdin is not a terminal),
/// one event per output line; see ``usage``.
struct ChatCommand: PeerCommand {
    static let usage =
        "multipeer chat SERVICE [--invite NAME]... [--accept all|none|ask] [--context TEXT] [--timeout SECONDS] "
        + "[--max-peers N] [--json] \(ConnectionOptions.usage) \(DiscoveryOptions.usage)"
    static let summary = "join a session: invite, accept, send lines; events one per line (--json: as JSON)"

    enum AcceptPolicy: String { case all, none, ask }

    var serviceType: String
    var invite: Set<String>
    var accept: AcceptPolicy
    var context: String
    var timeout: Duration
    var maximumPeers: Int
    var json: Bool
    var options: PeerOptions

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        options = try PeerOptions(parsing: &arguments)
        invite = Set(try arguments.values(of: "--invite"))
        let policy = try arguments.value(of: "--accept") ?? "ask"
        guard let parsed = AcceptPolicy(rawValue: policy) else {
            throw UsageError("--accept wants all, none or ask, not '\(policy)'")
        }
        accept = parsed
        context = try arguments.value(of: "--context") ?? ""
        timeout =
            try arguments.value(of: "--timeout").map { text throws(UsageError) in
                try DiscoveryOptions.seconds(text, option: "--timeout")
            } ?? .seconds(30)
        let maximum = try arguments.value(of: "--max-peers") ?? "64"
        guard let value = Int(maximum), value >= 2 else {
            throw UsageError("--max-peers wants a number of peers (at least 2), not '\(maximum)'")
        }
        maximumPeers = value
        json = arguments.flag("--json")
        serviceType = try arguments.positional("SERVICE")
        _ = try DiscoveryOptions.serviceType(serviceType)
        try arguments.finish()
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        let chat: Chat
        do {
            let (network, session, advertiser, browser) = try await options.join(
                serviceType, maximumPeers: maximumPeers)
            chat = Chat(
                network: network, session: session, advertiser: advertiser, browser: browser, json: json,
                invite: invite, accept: accept, context: Array(context.utf8), timeout: timeout)
        } catch {
            Output.error("multipeer: \(error.reason)")
            return 1
        }
        let input = InputLines()
        await chat.start()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await line in input.lines {
                    if await chat.handle(line) == .quit { break }
                }
            }
            group.addTask { _ = await signals.wait() }
            await group.next()
            group.cancelAll()
        }
        await chat.leave()
        return 0
    }
}

/// The options every session command (`chat`, `send`, `receive`) takes: discovery (interfaces) and connection
/// (identity, name, encryption, group secret, silence timeout).
struct PeerOptions {
    var discovery: DiscoveryOptions
    var connection: ConnectionConfiguration

    init(parsing arguments: inout CommandLineArguments) throws(UsageError) {
        discovery = try DiscoveryOptions(parsing: &arguments)
        connection = try ConnectionOptions(parsing: &arguments, defaultName: ProcessInfo.processInfo.hostName)
            .configuration
    }

    /// A network for these options.
    func network() throws(SessionError) -> PeerNetwork {
        try PeerNetwork(configuration: ChatCommand.networkConfiguration(discovery, connection))
    }

    /// What the session commands (`chat`, `colors`) run on: a network, a session, an advertiser and a browser of
    /// `serviceType`, with these options' identity and security.
    func join(_ serviceType: String, maximumPeers: Int = 64) async throws(SessionError) -> (
        PeerNetwork, Session, PeerAdvertiser, PeerBrowser
    ) {
        let made = try network()
        var configuration = session
        configuration.maximumPeers = maximumPeers
        let joined = try await Session(identity: connection.identity, configuration: configuration, network: made)
        let advertiser = try await PeerAdvertiser(
            serviceType: serviceType, identity: connection.identity, encryption: connection.encryption,
            groupSecret: connection.groupSecret, network: made)
        let browser = try await PeerBrowser(serviceType: serviceType, identity: connection.identity, network: made)
        return (made, joined, advertiser, browser)
    }

    /// Leaves what ``join(_:maximumPeers:)`` made: members see `left`, browsers get goodbyes, and the leave
    /// messages get 200 ms to reach the peers before the network stops.
    static func leave(
        _ network: PeerNetwork, _ session: Session, _ advertiser: PeerAdvertiser, _ browser: PeerBrowser,
        tasks: [Task<Void, Never>]
    ) async {
        browser.stop()
        await session.disconnect()
        await advertiser.stop()
        try? await Task.sleep(for: .milliseconds(200))
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
        if discovery.configuration.interfaces == .loopbackOnly {
            networkConfiguration.listenAddresses = [.v4(IPv4Address(127, 0, 0, 1))]
        }
        networkConfiguration.tuneConnections = {
            $0.silenceTimeout = connection.silenceTimeout
            $0.keepaliveInterval = connection.keepaliveInterval
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

/// The chat's state: who was found, who is invited or connected, what is pending; prints every event.
actor Chat {
    enum Step { case next, quit }

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
    private var pending: [String: Invitation] = [:]
    private var tasks: [Task<Void, Never>] = []
    /// Set once leaving: discovery and invitation outcomes no longer matter.
    private var leaving = false

    init(
        network: PeerNetwork, session: Session, advertiser: PeerAdvertiser, browser: PeerBrowser, json: Bool,
        invite: Set<String>, accept: ChatCommand.AcceptPolicy, context: [UInt8], timeout: Duration
    ) {
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
                    self.print("message", message.peer.displayName, String(decoding: message.data, as: UTF8.self))
                }
            })
    }

    /// Prints `event NAME[: TEXT]`, or the same as a JSON object.
    private func print(_ event: String, _ name: String, _ text: String? = nil, extra: [(String, String)] = []) {
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
            print("found", peer.displayName, extra: [("fingerprint", peer.claimedFingerprint.description)])
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
        Task {
            let outcome = await browser.invite(peer, into: session, context: context, timeout: timeout)
            self.invitationEnded(peer, outcome)
        }
    }

    private func invitationEnded(_ peer: Peer, _ outcome: InvitationOutcome) {
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
        } else {
            Output.line("invitation from \(Output.escaped(name)) code \(code): \(Output.escaped(context))")
        }
        switch accept {
        case .all:
            do {
                try await invitation.accept(into: session)
            } catch {
                Output.error("could not accept \(name): \(error.reason)")
            }
        case .none:
            invitation.decline(reason: "not accepting invitations")
        case .ask:
            pending[name]?.decline(reason: "a newer invitation replaced this one")
            pending[name] = invitation
        }
    }

    private func sessionEvent(_ event: SessionEvent) {
        switch event {
        case .peerChanged(let peer, .connected, _):
            let again = connected[peer.displayName] == peer
            connected[peer.displayName] = peer
            print(again ? "reconnected" : "connected", peer.displayName)
        case .peerChanged(let peer, .reconnecting, let reason):
            print("reconnecting", peer.displayName, reason)
        case .peerChanged(let peer, .notConnected, let reason):
            guard connected[peer.displayName] == peer else { return }
            connected[peer.displayName] = nil
            print("disconnected", peer.displayName, reason)
        case .peerChanged:
            break
        case .resourceStarted(let resource):
            print("receiving", resource.peer.displayName, resource.name, extra: [("size", "\(resource.size) bytes")])
        case .resourceFinished(let resource, let result):
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
    func handle(_ line: String) async -> Step {
        guard line.hasPrefix("/") else {
            let peers = Array(connected.values)
            guard !peers.isEmpty else {
                Output.error("nobody is connected; the line was not sent")
                return .next
            }
            for (peer, result) in await session.send(Array(line.utf8), to: peers) {
                if case .failed(let error) = result { Output.error("not sent to \(peer.displayName): \(error.reason)") }
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
                Output.error("no peer named '\(name)' was found")
                return .next
            }
            invite(peer, context: words.count > 2 ? Array(rest.utf8) : context)
        case "/accept":
            guard let invitation = pending.removeValue(forKey: name) else {
                Output.error("no invitation from '\(name)' is pending")
                return .next
            }
            do {
                try await invitation.accept(into: session)
            } catch {
                Output.error("could not accept \(name): \(error.reason)")
            }
        case "/decline":
            guard let invitation = pending.removeValue(forKey: name) else {
                Output.error("no invitation from '\(name)' is pending")
                return .next
            }
            invitation.decline(reason: rest)
        case "/to":
            guard let peer = connected[name] else {
                Output.error("'\(name)' is not connected")
                return .next
            }
            if case .failed(let error)? = await session.send(Array(rest.utf8), to: [peer])[peer] {
                Output.error("not sent to \(name): \(error.reason)")
            }
        default:
            Output.error("unknown command \(words.first ?? line); try /invite, /accept, /decline, /to, /quit")
        }
        return .next
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
