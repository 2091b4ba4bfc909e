import MulticastDNS

/// `multipeer demo`: the whole discovery lifecycle on this machine's loopback interface, in a few seconds.
///
/// Two peers advertise, a browser finds both with their TXT records, one peer changes its TXT record, the
/// other stops with a goodbye, and the browser reports each step with its timing. Nothing leaves the host.
struct DemoCommand {
    static let usage = "multipeer demo [--service SERVICE]"
    static let summary = "advertise two peers and browse for them over loopback, showing found/updated/lost"

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
        func stamp() -> String {
            let ms =
                (clock.now - start).components.attoseconds / 1_000_000_000_000_000 + (clock.now - start).components
                .seconds * 1000
            let text = String(ms)
            return String(repeating: " ", count: max(0, 6 - text.count)) + text + " ms  "
        }
        Output.line("multipeer demo: DNS-SD over multicast DNS on the loopback interface (nothing leaves this host)")
        let browserStack = try await MulticastDNSStack(configuration: configuration)
        let browser = browserStack.browse(serviceType)
        Output.line(stamp() + "browsing for \(serviceType)")
        let aliceStack = try await MulticastDNSStack(configuration: configuration)
        let bobStack = try await MulticastDNSStack(configuration: configuration)
        let alice = try await aliceStack.advertise(
            serviceType, name: "Alice", port: 7001, txt: try TXTRecord(["status": "online"] as KeyValuePairs))
        let bob = try await bobStack.advertise(
            serviceType, name: "Bob", port: 7002, txt: try TXTRecord(["status": "online"] as KeyValuePairs))
        Output.line(
            stamp()
                + "Alice and Bob probe for their names and announce (RFC 6762: 0-250 ms wait, 3 probes 250 ms apart)")
        var events = browser.events.makeAsyncIterator()
        var found = Set<String>()
        var step = 0
        var bobStopped: Task<Void, Never>?
        while let event = await events.next() {
            Output.line(stamp() + Output.text(event))
            switch event {
            case .found(let service):
                found.insert(service.name)
                if found == ["Alice", "Bob"] && step == 0 {
                    step = 1
                    Output.line(stamp() + "Alice updates her TXT record")
                    alice.updateTXT(try TXTRecord(["status": "busy"] as KeyValuePairs))
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
        await bobStopped?.value
        await alice.stop()
        for stack in [aliceStack, bobStack, browserStack] { await stack.shutdown() }
        Output.line(stamp() + "done")
        return step == 3 ? 0 : 1
    }
}
