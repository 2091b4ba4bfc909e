internal import Foundation
import Multipeer

/// `multipeer colors SERVICE --name NAME`: the "connected colors" app. Every instance advertises, browses,
/// invites every peer it finds and accepts every invitation, so all instances form one session; a color picked on
/// one shows on all. A color travels as its name in UTF-8, as in the tutorial app (so `Examples/ConnectedColors`
/// and this talk to each other with the same service type and `--encryption none`).
///
/// On a terminal: the whole screen takes the shared color and lists the connected peers; keys 1-8 (or a color's
/// initial) pick a color, q quits. Otherwise, line mode: `color NAME` (or just `NAME`) in; out `color NAME from
/// PEER`, `connected NAME`, `disconnected NAME: REASON`.
struct ColorsCommand: PeerCommand {
    static let summary = "the connected-colors app: everyone joins one session; a color picked shows everywhere"

    var serviceType: String
    var line: Bool
    var options: PeerOptions

    init(_ parsed: MultipeerTool.Colors) throws(UsageError) {
        options = try PeerOptions(
            discovery: parsed.discovery, connection: parsed.connection, wideArea: parsed.wideArea, relay: parsed.relay)
        line = parsed.line
        serviceType = parsed.service
        _ = try DiscoveryOptions.serviceType(serviceType)
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        let colors: Colors
        let screen = !line && FullScreen.isAvailable ? FullScreen() : nil
        do {
            let (network, session, advertiser, browser) = try await options.join(serviceType)
            colors = Colors(
                network: network, session: session, advertiser: advertiser, browser: browser, screen: screen)
        } catch {
            screen?.restore()
            Output.error("multipeer: \(error.reason)")
            return 1
        }
        await colors.start()
        await runInput(
            screen: screen, signals: signals, key: { await colors.key($0) }, line: { await colors.line($0) },
            redraw: { await colors.redraw() })
        await colors.leave()
        return 0
    }
}

/// The colors, with their terminal background (256-color palette).
enum SharedColor: String, CaseIterable, Sendable {
    case red, orange, yellow, green, teal, blue, purple, pink

    var ansi: Int {
        switch self {
        case .red: 160
        case .orange: 208
        case .yellow: 220
        case .green: 34
        case .teal: 30
        case .blue: 25
        case .purple: 91
        case .pink: 205
        }
    }

    /// Black text on the light colors, white on the dark ones.
    var foreground: Int { [.yellow, .orange, .pink].contains(self) ? 16 : 231 }
}

/// The colors app's state.
actor Colors {

    let network: PeerNetwork
    let session: Session
    let advertiser: PeerAdvertiser
    let browser: PeerBrowser
    let screen: FullScreen?
    private var color: SharedColor?
    private var pickedBy = ""
    private var connected: [String: Peer] = [:]
    private var tasks: [Task<Void, Never>] = []
    private var leaving = false

    init(network: PeerNetwork, session: Session, advertiser: PeerAdvertiser, browser: PeerBrowser, screen: FullScreen?)
    {
        self.network = network
        self.session = session
        self.advertiser = advertiser
        self.browser = browser
        self.screen = screen
    }

    func start() {
        let session = session
        let browser = browser
        tasks.append(
            Task {
                for await event in browser.events {
                    // Everyone invites everyone: crossing invitations resolve into one link per pair.
                    if case .found(let found) = event {
                        Task { _ = await browser.invite(found.peer, into: session, timeout: .seconds(10)) }
                    }
                }
            })
        tasks.append(
            Task { for await invitation in advertiser.invitations { try? await invitation.accept(into: session) } })
        tasks.append(Task { for await event in session.events { self.sessionEvent(event) } })
        tasks.append(
            Task {
                for await message in session.messages {
                    self.received(String(decoding: message.bytes, as: UTF8.self), from: message.peer)
                }
            })
        redraw()
    }

    private func sessionEvent(_ event: SessionEvent) {
        guard !leaving else { return }
        switch event {
        case .peerChanged(let peer, .connected, _):
            let again = connected[peer.displayName] == peer
            connected[peer.displayName] = peer
            if !again { say("connected \(Output.escaped(peer.displayName))") }
        case .peerChanged(let peer, .notConnected, let reason):
            guard connected[peer.displayName] == peer else { return }
            connected[peer.displayName] = nil
            say("disconnected \(Output.escaped(peer.displayName)): \(Output.escaped(reason.description))")
        case .stream(let stream, _):
            stream.reset()
        default:
            break
        }
    }

    /// A color from a peer: only the known names count (a peer's text never reaches the terminal raw).
    private func received(_ text: String, from peer: Peer) {
        guard let picked = SharedColor(rawValue: text.trimmingCharacters(in: .whitespaces).lowercased()) else {
            return say("ignored from \(Output.escaped(peer.displayName)): not a color")
        }
        color = picked
        pickedBy = peer.displayName
        say("color \(picked.rawValue) from \(Output.escaped(peer.displayName))")
    }

    private func pick(_ picked: SharedColor) async {
        color = picked
        pickedBy = session.localPeer.displayName
        say("color \(picked.rawValue) picked")
        let peers = Array(connected.values)
        guard !peers.isEmpty else { return }
        _ = await session.send(Array(picked.rawValue.utf8), to: peers)
    }

    /// Line mode: `color NAME`, `NAME`, or `quit`.
    func line(_ text: String) async -> InputStep {
        let words = text.split(separator: " ").map { $0.lowercased() }
        if words == ["quit"] { return .quit }
        let name = words.first == "color" ? words.dropFirst().first : words.first
        guard let name, let picked = SharedColor(rawValue: name) else {
            Output.error("colors: \(SharedColor.allCases.map(\.rawValue).joined(separator: ", ")), or quit")
            return .next
        }
        await pick(picked)
        return .next
    }

    /// Full screen: 1-8 or a color's initial picks it (p is purple, k pink), q quits.
    func key(_ key: Key) async -> InputStep {
        let all = SharedColor.allCases
        guard case .text(let text) = key else {
            return key == .control(3) || key == .control(4) ? .quit : .next  // Ctrl-C, Ctrl-D
        }
        switch text {
        case "q": return .quit
        case "1", "2", "3", "4", "5", "6", "7", "8": await pick(all[Int(text)! - 1])
        case "k": await pick(.pink)
        default:
            if let picked = all.first(where: { $0 != .pink && $0.rawValue.hasPrefix(text) }) { await pick(picked) }
        }
        return .next
    }

    /// In line mode prints `text`; on a terminal, redraws.
    private func say(_ text: String) {
        if screen == nil { Output.line(text) } else { redraw() }
    }

    func redraw() {
        guard let screen else { return }
        let names = connected.keys.sorted().map(Output.escaped)
        var lines = [
            "multipeer colors — \(Output.escaped(session.localPeer.displayName))",
            "",
            color.map { "color: \($0.rawValue)" + (pickedBy.isEmpty ? "" : " (picked by \(Output.escaped(pickedBy)))") }
                ?? "color: none yet",
            "",
            "connected (\(names.count)): " + (names.isEmpty ? "nobody yet" : names.joined(separator: ", ")),
            "",
        ]
        lines.append(
            SharedColor.allCases.enumerated().map { "\($0.offset + 1) \($0.element.rawValue)" }.joined(separator: "  "))
        lines.append("q quit")
        screen.fill(lines, background: color?.ansi, foreground: color?.foreground)
    }

    func leave() async {
        leaving = true
        await PeerOptions.leave(network, session, advertiser, browser, tasks: tasks)
    }
}
