internal import Foundation
internal import Glibc
import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer browse SERVICE [--json] [--timeout SECONDS] [--lost-timeout SECONDS] [--interface IFNAME]...`
struct BrowseCommand {
    static let summary =
        "found, updated and lost peers: a live table on a terminal, else one event per line; ends at the timeout"

    var serviceType: ServiceType
    var json: Bool
    var line: Bool
    var timeout: Duration?
    var options: DiscoveryOptions
    var wideArea: WideAreaConfiguration?

    init(_ parsed: MultipeerTool.Browse) throws(UsageError) {
        options = try DiscoveryOptions(parsed.discovery)
        wideArea = try parsed.wideArea.configuration()
        json = parsed.json
        line = parsed.line
        if json && line { throw UsageError("--json and --line exclude each other") }
        timeout = try parsed.timeout.map { text throws(UsageError) in
            try DiscoveryOptions.seconds(text, option: "--timeout")
        }
        if let lost = parsed.lostTimeout {
            options.configuration.browser.lostTimeout = try DiscoveryOptions.seconds(lost, option: "--lost-timeout")
        }
        serviceType = try DiscoveryOptions.serviceType(parsed.service)
    }

    func run() async throws -> Int32 {
        let signals = TerminationSignals()
        let wide = try WideAreaTool.start(wideArea, discovery: options.configuration)
        guard let stack = await DiscoveryOptions.openStack(options.configuration) else {
            await wide?.stop()
            return 1
        }
        let browser = stack.browse(serviceType)
        // The domain's instances come as the link's do; their addresses name the domain as their interface.
        let wideBrowse = wide?.discovery.browse(serviceType, bufferLimit: options.configuration.eventBufferLimit)
        let json = json
        let table = !json && !line && isatty(1) == 1 ? BrowseTable() : nil
        let show: @Sendable (ServiceBrowserEvent) -> Void = { event in
            if let table { table.apply(event) } else { Output.line(json ? Output.json(event) : Output.text(event)) }
        }
        let printer = Task { for await event in browser.events { show(event) } }
        let widePrinter = Task {
            guard let wideBrowse else { return }
            for await event in wideBrowse.events { show(event) }
        }
        let resizes = table.map { _ in SignalStream(SIGWINCH) }
        let redrawer = Task {
            guard let table, let resizes else { return }
            for await _ in resizes.signals { table.redraw() }
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
        wideBrowse?.stop()
        redrawer.cancel()
        await printer.value
        await widePrinter.value
        table?.close()
        await stack.shutdown()
        await wide?.stop()
        return 0
    }
}

/// Suspends until the task is cancelled.
func waitUntilCancelled() async {
    let stream = AsyncStream<Void> { _ in }
    for await _ in stream {}
}

/// The live table `browse` shows on a terminal: one row per instance (name, short fingerprint for our peers,
/// addresses, interface, discovery info), redrawn in place on the alternate screen (on every event and when the
/// terminal's size changes), which is left at the end.
final class BrowseTable: Sendable {
    private let rows = Lock<[String: DiscoveredService]>([:])

    init() {
        Output.write("\u{1b}[?1049h\u{1b}[?25l")
        redraw()
    }

    func apply(_ event: ServiceBrowserEvent) {
        rows.withLock { rows in
            switch event {
            case .found(let service), .updated(let service): rows[service.name] = service
            case .lost(let service): rows[service.name] = nil
            }
            draw(rows)
        }
    }

    /// Draws the table again (the terminal's size changed).
    func redraw() { rows.withLock { draw($0) } }

    /// Writes the table (under the lock, so two draws never interleave).
    private func draw(_ rows: [String: DiscoveredService]) {
        var size = winsize()
        _ = ioctl(1, UInt(TIOCGWINSZ), &size)
        let columns = max(Int(size.ws_col), 40)
        let cell = FullScreen.fit
        var lines = ["multipeer browse: \(rows.count) found (q: Ctrl-C)", ""]
        lines.append(
            cell("NAME", 20) + " " + cell("FINGERPRINT", 14) + " " + cell("ADDRESSES", 28) + " " + cell("IF", 8)
                + " INFO")
        for (name, service) in rows.sorted(by: { $0.key < $1.key }) {
            let fingerprint =
                service.txt.entries.first { $0.key == PeerAdvertisement.fingerprintKey }
                .flatMap { $0.value }.map { Output.escaped(String(decoding: $0, as: UTF8.self)).prefix(12) }
                .map(String.init) ?? "-"
            let info = service.txt.entries.filter { !$0.key.hasPrefix("mp.") }.map { entry in
                entry.value.map { "\(entry.key)=\(String(decoding: $0, as: UTF8.self))" } ?? entry.key
            }.joined(separator: " ")
            let addresses = service.addresses.map(Output.addressText).joined(separator: " ")
            lines.append(
                cell(Output.escaped(name), 20) + " " + cell(fingerprint, 14) + " " + cell(addresses, 28) + " "
                    + cell(service.interfaces.first ?? "", 8) + " " + Output.escaped(info))
        }
        var out = "\u{1b}[H\u{1b}[2J"
        out += lines.map { String(CellWidth.prefix(Substring($0), fitting: columns)) }.joined(separator: "\r\n")
        Output.write(out)
    }

    func close() {
        Output.write("\u{1b}[?25h\u{1b}[?1049l")
    }
}
