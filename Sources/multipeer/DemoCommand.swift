internal import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer demo`: discovery, invitations and a session of three on this machine's loopback interface, in a
/// couple of seconds.
///
/// Alice, Bob and Dave advertise their identity, display name and protocol version in their TXT records (next
/// to a `status` of their own), each with a network of its own (event loop, mDNS stack, listener). Carol
/// browses, finds them and invites each into her session: Alice and Bob accept (and are then introduced to
/// each other, so all three are linked), Dave declines with a reason; both sides of each link show the same
/// verification code. Carol sends to everyone, Alice sends Bob a message he acknowledges, Alice picks a color the
/// others see, Carol sends Bob an 8 MiB file with a progress bar and its checked SHA-256, Alice changes her
/// status, Bob leaves and stops advertising. Every step is printed with its timing, then a summary. Nothing
/// leaves the host.
struct DemoCommand {
    static let summary =
        "the whole model on loopback: discovery, invitations, codes, a mesh, messages, a color, a file, a departure"

    var serviceType: ServiceType

    init(_ parsed: MultipeerTool.Demo) throws(UsageError) {
        // A service type of its own per run by default, so two demos on one machine never meet.
        let service = parsed.service ?? "mp-demo-\(String(UInt16.random(in: 0...UInt16.max), radix: 16))"
        serviceType = try DiscoveryOptions.serviceType(service)
    }

    /// One demo peer: its network, session and advertiser.
    struct Person {
        let identity: PeerIdentity
        let network: PeerNetwork
        let session: Session
        let advertiser: PeerAdvertiser
    }

    func run() async throws -> Int32 {
        let clock = ContinuousClock()
        let start = clock.now
        let stamp: @Sendable () -> String = {
            let elapsed = clock.now - start
            let ms = elapsed.components.attoseconds / 1_000_000_000_000_000 + elapsed.components.seconds * 1000
            let text = String(ms)
            return String(repeating: " ", count: max(0, 6 - text.count)) + text + " ms  "
        }
        let type = serviceType.name
        Output.line("multipeer demo: DNS-SD over multicast DNS on the loopback interface (nothing leaves this host)")
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(
            at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: folder) }
        func person(_ name: String) async throws -> Person {
            let identity = try PeerIdentity.generate(displayName: name)
            var loopback = PeerNetwork.Configuration.loopback
            loopback.logger = ToolLog.logger
            let network = try PeerNetwork(configuration: loopback)
            var configuration = SessionConfiguration()
            let inbox = folder.appendingPathComponent(name, isDirectory: true)
            try FileManager.default.createDirectory(
                at: inbox, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            configuration.resourceDirectory = inbox.path
            // Each side of a connection sees the same verification code: people compare it to rule out a man in
            // the middle. The inviter's side shows it here (the invitee's shows it with the invitation).
            if name == "Carol" {
                configuration.verifyPeer = { request in
                    Output.line(
                        stamp() + "Carol's side of the link to \(request.peer.displayName): code "
                            + "\(request.verificationCode.map { "\($0)" } ?? "none")")
                    return .accept
                }
            }
            let session = try await Session(identity: identity, configuration: configuration, network: network)
            let advertiser = try await PeerAdvertiser(
                serviceType: type, identity: identity, discoveryInfo: ["status": "online"], network: network)
            return Person(identity: identity, network: network, session: session, advertiser: advertiser)
        }
        let carol = try await person("Carol")
        let browser = try await PeerBrowser(serviceType: type, identity: carol.identity, network: carol.network)
        Output.line(stamp() + "Carol browses for \(serviceType)")
        let alice = try await person("Alice")
        let bob = try await person("Bob")
        let dave = try await person("Dave")
        Output.line(
            stamp() + "Alice, Bob and Dave advertise (RFC 6762: probe 3 times 250 ms apart, then announce)")
        var tasks: [Task<Void, Never>] = []
        let colorSeen = DemoCounter()
        let fileReceived = DemoCounter()
        for member in [alice, bob, dave] {
            let name = member.identity.displayName
            tasks.append(
                Task {
                    for await invitation in member.advertiser.invitations {
                        let context = String(decoding: invitation.context, as: UTF8.self)
                        let code = invitation.verificationCode.map { "\($0)" } ?? "none"
                        if name == "Dave" {
                            Output.line(
                                stamp()
                                    + "Dave: invitation from \(invitation.peer) (code \(code)): \(context); declines")
                            invitation.decline(reason: "in a meeting")
                        } else {
                            Output.line(
                                stamp()
                                    + "\(name): invitation from \(invitation.peer) (code \(code)): \(context); accepts")
                            try? await invitation.accept(into: member.session)
                        }
                    }
                })
        }
        for member in [carol, alice, bob] {
            let name = member.identity.displayName
            tasks.append(
                Task {
                    for await event in member.session.events {
                        switch event {
                        case .peerChanged(let peer, let state, let reason) where state != .connecting:
                            Output.line(stamp() + "\(name)'s session: \(peer.displayName) \(state) (\(reason))")
                        case .resourceStarted(let incoming):
                            Output.line(stamp() + "\(name): receiving \(incoming.name) (\(incoming.size) bytes)")
                        case .resourceFinished(let incoming, .success(let url)):
                            Output.line(
                                stamp() + "\(name): received \(url.lastPathComponent) \(incoming.size) bytes sha256 "
                                    + "\(incoming.sha256) from \(incoming.peer.displayName), checked")
                            fileReceived.add()
                        case .resourceFinished(let incoming, .failure(let error)):
                            Output.line(stamp() + "\(name): \(incoming.name) failed: \(error.reason)")
                        default:
                            break
                        }
                    }
                })
            tasks.append(
                Task {
                    for await message in member.session.messages {
                        let text = String(decoding: message.bytes, as: UTF8.self)
                        if text == "teal" {
                            Output.line(stamp() + "\(name): color teal from \(message.peer.displayName)")
                            colorSeen.add()
                        } else {
                            Output.line(stamp() + "\(name) received from \(message.peer.displayName): " + text)
                        }
                    }
                })
        }
        var timings: [(String, Duration)] = []
        var mark = clock.now
        func lap(_ what: String) {
            timings.append((what, clock.now - mark))
            mark = clock.now
        }
        var found: [String: DiscoveredPeer] = [:]
        var events = browser.events.makeAsyncIterator()
        while found.count < 3, let event = await events.next() {
            if case .found(let peer) = event {
                found[peer.peer.displayName] = peer
                Output.line(
                    stamp() + "found \(peer.peer) status=\(peer.discoveryInfo["status"] ?? "") port \(peer.port)")
            }
        }
        lap("discovery of 3 peers")
        for name in ["Alice", "Bob", "Dave"] {
            guard let peer = found[name]?.peer else { continue }
            Output.line(stamp() + "Carol invites \(name), expecting the identity \(name) advertised")
            let outcome = await browser.invite(peer, into: carol.session, context: Array("lunch?".utf8))
            Output.line(stamp() + "invitation to \(name): \(outcome)")
        }
        let meshed = await Self.waitUntil {
            let aliceCount = await alice.session.connectedPeers.count
            let bobCount = await bob.session.connectedPeers.count
            return aliceCount == 2 && bobCount == 2
        }
        lap("3 invitations and the mesh")
        Output.line(stamp() + "all three linked: \(meshed ? "yes" : "NO") (Alice and Bob were introduced by Carol)")
        let members = await carol.session.connectedPeers
        _ = await carol.session.send(Array("hello everyone".utf8), to: members)
        if let bobPeer = await alice.session.connectedPeers.first(where: { $0.displayName == "Bob" }) {
            try await alice.session.sendAcknowledged(Array("see you at noon".utf8), to: bobPeer)
            Output.line(stamp() + "Alice: Bob's application has her message (acknowledged send returned)")
        }
        lap("messages, one acknowledged")
        // A shared color, as `multipeer colors` does: its name in UTF-8 to every member.
        Output.line(stamp() + "Alice picks the color teal")
        let aliceMembers = await alice.session.connectedPeers
        _ = await alice.session.send(Array("teal".utf8), to: aliceMembers)
        _ = await Self.waitUntil { colorSeen.value >= 2 }
        lap("a color change seen by 2")
        // A file with its progress and verified SHA-256.
        let file = folder.appendingPathComponent("photo.jpg")
        let size = 8 << 20
        var block = [UInt8](repeating: 0, count: 1 << 16)
        for index in block.indices { block[index] = UInt8.random(in: 0...255) }
        try Data((0..<(size >> 16)).flatMap { _ in block }).write(to: file)
        mark = clock.now
        var fileOK = false
        if let bobPeer = members.first(where: { $0.displayName == "Bob" }) {
            Output.line(stamp() + "Carol sends photo.jpg (\(size >> 20) MiB) to Bob")
            let transfer = try await carol.session.sendResource(at: file, named: "photo.jpg", to: bobPeer)
            let bar = Task {
                var shown = -1
                while !Task.isCancelled {
                    let done = Int(transfer.progress.fractionCompleted * 20)
                    // 100% is printed once the transfer finished (below), so it always shows.
                    if done != shown, done % 5 == 0, done < 20 {
                        shown = done
                        Output.line(stamp() + "  \(ProgressPrinter.bar(Int64(done), of: 20, width: 20)) \(done * 5)%")
                    }
                    if done >= 20 { break }
                    try? await Task.sleep(for: .milliseconds(5))
                }
            }
            let receipt = try await transfer.finished()
            bar.cancel()
            _ = await bar.value
            Output.line(stamp() + "  \(ProgressPrinter.bar(20, of: 20, width: 20)) 100%")
            Output.line(stamp() + "Carol: sent photo.jpg \(receipt.size) bytes sha256 \(receipt.sha256) to Bob")
            fileOK = await Self.waitUntil { fileReceived.value >= 1 }
        }
        lap("an 8 MiB file, verified")
        Output.line(stamp() + "Alice changes her status")
        try alice.advertiser.updateDiscoveryInfo(["status": "busy"])
        var step = 0
        while let event = await events.next() {
            switch event {
            case .updated(let peer) where peer.peer.displayName == "Alice" && step == 0:
                Output.line(stamp() + "updated \(peer.peer) status=\(peer.discoveryInfo["status"] ?? "")")
                step = 1
                Output.line(stamp() + "Bob leaves the session and stops advertising (goodbye packets)")
                await bob.session.disconnect()
                await bob.advertiser.stop()
            case .lost(let peer) where peer.displayName == "Bob" && step == 1:
                Output.line(stamp() + "lost \(peer)")
                lap("a status update and a departure")
                step = 2
            default:
                break
            }
            if step == 2 { break }
        }
        browser.stop()
        for member in [carol, alice, bob, dave] {
            await member.session.disconnect()
            await member.advertiser.stop()
            await member.network.shutdown()
        }
        for task in tasks { task.cancel() }
        Output.line("")
        Output.line("summary")
        for (what, duration) in timings {
            let ms = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
            Output.line("  " + what.padding(toLength: 36, withPad: " ", startingAt: 0) + "\(ms) ms")
        }
        Output.line(
            "  " + "total".padding(toLength: 36, withPad: " ", startingAt: 0)
                + stamp().trimmingCharacters(in: .whitespaces))
        Output.line(stamp() + "done")
        return step == 2 && meshed && fileOK ? 0 : 1
    }

    static func waitUntil(_ condition: () async -> Bool) async -> Bool {
        for _ in 0..<500 {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}

/// A count the demo's tasks bump.
final class DemoCounter: Sendable {
    private let count = Lock(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
