import MulticastDNS

/// `multipeer browse SERVICE [--json] [--timeout SECONDS] [--lost-timeout SECONDS] [--interface IFNAME]...`
struct BrowseCommand {
    static let usage =
        "multipeer browse SERVICE [--json] [--timeout SECONDS] [--lost-timeout SECONDS] \(DiscoveryOptions.usage)"
    static let summary = "print found, updated and lost events; exits 0 at the timeout or on SIGINT/SIGTERM"

    var serviceType: ServiceType
    var json: Bool
    var timeout: Duration?
    var options: DiscoveryOptions

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        options = try DiscoveryOptions(parsing: &arguments)
        json = arguments.flag("--json")
        timeout = try arguments.value(of: "--timeout").map { text throws(UsageError) in
            try DiscoveryOptions.seconds(text, option: "--timeout")
        }
        if let lost = try arguments.value(of: "--lost-timeout") {
            options.configuration.browser.lostTimeout = try DiscoveryOptions.seconds(lost, option: "--lost-timeout")
        }
        serviceType = try DiscoveryOptions.serviceType(try arguments.positional("SERVICE"))
        try arguments.finish()
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        guard let stack = await DiscoveryOptions.openStack(options.configuration) else { return 1 }
        let browser = stack.browse(serviceType)
        let json = json
        let printer = Task {
            for await event in browser.events { Output.line(json ? Output.json(event) : Output.text(event)) }
        }
        let timeout = timeout
        // Whichever comes first ends the browse: the timeout or SIGINT/SIGTERM.
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                if let timeout {
                    try? await Task.sleep(for: timeout)
                } else {
                    await waitUntilCancelled()
                }
            }
            group.addTask { _ = await signals.wait() }
            await group.next()
            group.cancelAll()
        }
        browser.stop()
        await printer.value
        await stack.shutdown()
        return 0
    }
}

/// Suspends until the task is cancelled.
func waitUntilCancelled() async {
    let stream = AsyncStream<Void> { _ in }
    for await _ in stream {}
}
