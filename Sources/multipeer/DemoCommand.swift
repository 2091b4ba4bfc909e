import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer demo`: discovery and a secure connection on this machine's loopback interface, in a few seconds.
///
/// Two peers advertise their identity, display name and protocol version in their TXT records (a
/// ``PeerAdvertisement``, next to a `status` of their own); Alice also listens for connections. A browser,
/// Carol, finds both, dials every address Alice was found at (IPv6 first, RFC 8305) expecting the identity she
/// advertised, connects over TLS 1.3, exchanges messages, measures the round trip and closes gracefully; then
/// Alice changes her status and Bob stops with a goodbye. Every step is printed with its timing. Nothing
/// leaves the host.
struct DemoCommand {
    static let usage = "multipeer demo [--service SERVICE]"
    static let summary =
        "discover two peers over loopback (found/updated/lost) and connect to one over TLS 1.3"

    var serviceType: ServiceType

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        serviceType = try DiscoveryOptions.serviceType(try arguments.value(of: "--service") ?? "mp-demo")
        try arguments.finish()
    }

    func run() async throws -> Int32 {
        var configuration = DiscoveryConfiguration()
        configuration.interfaces = .loopbackOnly
        let clock = ContinuousClock()
        let start = clock.now
        let stamp: @Sendable () -> String = {
            let elapsed = clock.now - start
            let ms = elapsed.components.attoseconds / 1_000_000_000_000_000 + elapsed.components.seconds * 1000
            let text = String(ms)
            return String(repeating: " ", count: max(0, 6 - text.count)) + text + " ms  "
        }
        Output.line("multipeer demo: DNS-SD over multicast DNS on the loopback interface (nothing leaves this host)")
        let browserStack = try await MulticastDNSStack(configuration: configuration)
        let browser = browserStack.browse(serviceType)
        Output.line(stamp() + "browsing for \(serviceType)")
        let aliceStack = try await MulticastDNSStack(configuration: configuration)
        let bobStack = try await MulticastDNSStack(configuration: configuration)
        let loop = try EventLoop(name: "demo")
        defer { loop.shutdown() }
        let aliceIdentity = try PeerIdentity.generate(displayName: "Alice")
        let aliceListener = try await PeerListener(
            configuration: ConnectionConfiguration(identity: aliceIdentity),
            address: SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: 0), loop: loop)
        let aliceEcho = Task { await Self.echo(aliceListener, stamp: stamp) }
        let alice = try await aliceStack.advertise(
            serviceType, name: "Alice", port: aliceListener.localAddress.port,
            txt: try PeerAdvertisement(identity: aliceIdentity, discoveryInfo: ["status": "online"]).txtRecord)
        let bobIdentity = try PeerIdentity.generate(displayName: "Bob")
        let bob = try await bobStack.advertise(
            serviceType, name: "Bob", port: 7002,
            txt: try PeerAdvertisement(identity: bobIdentity, discoveryInfo: ["status": "online"]).txtRecord)
        Output.line(
            stamp()
                + "Alice and Bob probe for their names and announce (RFC 6762: 0-250 ms wait, 3 probes 250 ms apart)")
        var events = browser.events.makeAsyncIterator()
        var found = Set<String>()
        var step = 0
        var bobStopped: Task<Void, Never>?
        var aliceFound: DiscoveredService?
        while let event = await events.next() {
            Output.line(stamp() + Output.text(event))
            switch event {
            case .found(let service):
                found.insert(service.name)
                if service.name == "Alice" { aliceFound = service }
                if found == ["Alice", "Bob"] && step == 0 {
                    try await Self.connect(to: aliceFound!, loop: loop, stamp: stamp)
                    step = 1
                    Output.line(stamp() + "Alice updates her TXT record")
                    alice.updateTXT(
                        try PeerAdvertisement(identity: aliceIdentity, discoveryInfo: ["status": "busy"]).txtRecord)
                }
            case .updated(let service) where service.name == "Alice" && step == 1:
                step = 2
                Output.line(stamp() + "Bob stops advertising and says goodbye")
                bobStopped = Task { await bob.stop() }
            case .lost(let service) where service.name == "Bob" && step == 2:
                step = 3
            default:
                break
            }
            if step == 3 { break }
        }
        browser.stop()
        aliceListener.close()
        await aliceEcho.value
        await bobStopped?.value
        await alice.stop()
        for stack in [aliceStack, bobStack, browserStack] { await stack.shutdown() }
        Output.line(stamp() + "done")
        return step == 3 ? 0 : 1
    }

    /// Carol's side: dial a discovered Alice at every address she was found at, expecting the identity her
    /// advertisement names.
    static func connect(to service: DiscoveredService, loop: EventLoop, stamp: () -> String) async throws {
        let addresses = service.addresses.map(Output.addressText).joined(separator: ", ")
        Output.line(
            stamp() + "Carol dials Alice at \(addresses) (IPv6 first, RFC 8305), expecting the identity she advertised")
        let carol = try PeerIdentity.generate(displayName: "Carol")
        let connection = try await PeerConnection.connect(
            to: service, configuration: ConnectionConfiguration(identity: carol), loop: loop)
        let code = connection.verificationCode.map { "\($0)" } ?? "none"
        Output.line(
            stamp() + "connected: \(connection.peer) at \(connection.remoteAddress); verification code \(code)")
        try await connection.send(Array("hello from Carol".utf8))
        var replies = connection.messages.makeAsyncIterator()
        if let reply = await replies.next() {
            Output.line(stamp() + "Carol received: \(String(decoding: reply, as: UTF8.self))")
        }
        let roundTrip = try await connection.ping()
        Output.line(stamp() + "ping round trip: \(roundTrip.formatted(.units(allowed: [.microseconds])))")
        let end = await connection.close(reason: "demo finished")
        Output.line(stamp() + "Carol closed the connection: \(end.code)")
    }

    /// Alice's side: answer every message, and say how each connection ended.
    static func echo(_ listener: PeerListener, stamp: @escaping @Sendable () -> String) async {
        for await connection in listener.connections {
            for await message in connection.messages {
                try? await connection.send(Array("hello Carol, Alice here (you said: ".utf8) + message + [0x29])
            }
            Output.line(stamp() + "Alice saw the connection end: \(await connection.closed().code)")
        }
    }
}
