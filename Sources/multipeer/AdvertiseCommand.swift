import MulticastDNS

/// `multipeer advertise SERVICE --name NAME [--info KEY=VALUE]... [--port PORT] [--interface IFNAME]...`
struct AdvertiseCommand {
    static let usage =
        "multipeer advertise SERVICE --name NAME [--info KEY=VALUE]... [--port PORT] \(DiscoveryOptions.usage)"
    static let summary = "advertise a service until interrupted; SIGINT/SIGTERM send goodbyes and exit 0"

    var serviceType: ServiceType
    var name: String
    var txt: TXTRecord
    var port: UInt16
    var options: DiscoveryOptions

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        options = try DiscoveryOptions(parsing: &arguments)
        guard let name = try arguments.value(of: "--name") else { throw UsageError("--name NAME is required") }
        self.name = name
        var entries: [TXTEntry] = []
        for pair in try arguments.values(of: "--info") {
            guard let equals = pair.firstIndex(of: "=") else {
                throw UsageError("--info wants KEY=VALUE, not '\(pair)'")
            }
            entries.append(TXTEntry(key: String(pair[..<equals]), value: String(pair[pair.index(after: equals)...])))
        }
        do {
            txt = try TXTRecord(entries: entries)
            try InstanceName.validate(name)
        } catch {
            throw UsageError("\(error)")
        }
        let portText = try arguments.value(of: "--port") ?? "49400"
        guard let port = UInt16(portText) else { throw UsageError("--port wants 0-65535, not '\(portText)'") }
        self.port = port
        serviceType = try DiscoveryOptions.serviceType(try arguments.positional("SERVICE"))
        try arguments.finish()
    }

    func run() async throws -> Int32 {
        let signals = TerminationSignals()
        let stack = try await MulticastDNSStack(configuration: options.configuration)
        let advertisement = try await stack.advertise(serviceType, name: name, port: port, txt: txt)
        let printer = Task {
            for await event in advertisement.events {
                switch event {
                case .registered(let name): Output.line("advertising \(name)")
                case .renamed(let from, let to): Output.line("renamed \(from) -> \(to)")
                case .hostRenamed(let from, let to): Output.line("host renamed \(from) -> \(to)")
                case .stopped: Output.line("stopped")
                }
            }
        }
        _ = await signals.wait()
        await advertisement.stop()
        await printer.value
        await stack.shutdown()
        return 0
    }
}
