import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer demo`: discovery, invitations and a session of three on this machine's loopback interface, in a
/// couple of seconds.
///
/// Alice, Bob and Dave advertise their identity, display name and protocol version in their TXT records (next
/// to a `status` of their own), each with a network of its own (event loop, mDNS stack, listener). Carol
/// browses, finds them and invites each into her session: Alice and Bob accept (and are then introduced to
/// each other, so all three are linked), Dave declines with a reason. Carol sends to everyone, Alice sends
/// Bob a message he acknowledges, Alice changes her status, Bob leaves and stops advertising. Every step is
/// printed with its timing. Nothing leaves the host.
struct DemoCommand {
    static let usage = "multipeer demo [--service SERVICE]"
    static let summary =
        "discover peers over loopback, invite them into a session (accepted, declined), message, leave"

    var serviceType: ServiceType

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        serviceType = try DiscoveryOptions.serviceType(try arguments.value(of: "--service") ?? "mp-demo")
        try arguments.finish()
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
        func person(_ name: String) async throws -> Person {
            let identity = try PeerIdentity.generate(displayName: name)
            let network = try PeerNetwork(configuration: .loopback)
            let session = try await Session(identity: identity, network: network)
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
                        if case .peerChanged(let peer, let state, let reason) = event, state != .connecting {
                            Output.line(stamp() + "\(name)'s session: \(peer.displayName) \(state) (\(reason))")
                        }
                    }
                })
            tasks.append(
                Task {
                    for await message in member.session.messages {
                        Output.line(
                            stamp() + "\(name) received from \(message.peer.displayName): "
                                + String(decoding: message.data, as: UTF8.self))
                    }
                })
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
        Output.line(stamp() + "all three linked: \(meshed ? "yes" : "NO") (Alice and Bob were introduced by Carol)")
        let members = await carol.session.connectedPeers
        _ = await carol.session.send(Array("hello everyone".utf8), to: members)
        if let bobPeer = await alice.session.connectedPeers.first(where: { $0.displayName == "Bob" }) {
            try await alice.session.sendAcknowledged(Array("see you at noon".utf8), to: bobPeer)
            Output.line(stamp() + "Alice: Bob's application has her message (acknowledged send returned)")
        }
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
        Output.line(stamp() + "done")
        return step == 2 && meshed ? 0 : 1
    }

    static func waitUntil(_ condition: () async -> Bool) async -> Bool {
        for _ in 0..<500 {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return false
    }
}
