internal import Foundation
internal import Glibc
import MulticastDNS
import Multipeer

/// `multipeer advertise SERVICE --name NAME [--info KEY=VALUE]... [--info-file PATH] [--port PORT] [--interface IFNAME]...`
///
/// With `--info-file`, the file's `KEY=VALUE` lines join the TXT record, and SIGHUP re-reads the file and
/// announces the new record.
struct AdvertiseCommand {
    static let summary = "advertise a service until interrupted; SIGINT/SIGTERM send goodbyes and exit 0"

    var serviceType: ServiceType
    var name: String
    var txt: TXTRecord
    var fixedEntries: [TXTEntry]
    var infoFile: String?
    var port: UInt16
    var options: DiscoveryOptions
    var wideArea: WideAreaConfiguration?

    init(_ parsed: MultipeerTool.Advertise) throws(UsageError) {
        options = try DiscoveryOptions(parsed.discovery)
        wideArea = try parsed.wideArea.configuration()
        if let wideArea, wideArea.key == nil {
            throw UsageError("advertising in a domain needs the key that signs updates: --dns-key FILE")
        }
        guard let name = parsed.name else { throw UsageError("--name NAME is required") }
        self.name = name
        var entries: [TXTEntry] = []
        for pair in parsed.info {
            entries.append(try Self.entry(pair, source: "--info"))
        }
        fixedEntries = entries
        infoFile = parsed.infoFile
        do {
            txt = try Self.record(fixed: entries, file: infoFile)
            try InstanceName.validate(name)
        } catch {
            throw UsageError("\(error)")
        }
        let portText = parsed.port ?? "49400"
        guard let port = UInt16(portText) else { throw UsageError("--port wants 0-65535, not '\(portText)'") }
        self.port = port
        serviceType = try DiscoveryOptions.serviceType(parsed.service)
    }

    static func entry(_ pair: String, source: String) throws(UsageError) -> TXTEntry {
        guard let equals = pair.firstIndex(of: "=") else {
            throw UsageError("\(source) wants KEY=VALUE, not '\(pair)'")
        }
        return TXTEntry(key: String(pair[..<equals]), value: String(pair[pair.index(after: equals)...]))
    }

    /// The `--info` entries followed by the file's `KEY=VALUE` lines (blank lines and `#` comments skipped).
    static func record(fixed: [TXTEntry], file: String?) throws(UsageError) -> TXTRecord {
        var entries = fixed
        if let file {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw UsageError("cannot read --info-file \(file)")
            }
            for line in text.split(whereSeparator: \.isNewline) {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
                entries.append(try entry(trimmed, source: file))
            }
        }
        do {
            return try TXTRecord(entries: entries)
        } catch {
            throw UsageError("\(error)")
        }
    }

    func run() async throws -> Int32 {
        let signals = TerminationSignals()
        let reloads = SignalStream(SIGHUP)
        let wide = try WideAreaTool.start(wideArea, discovery: options.configuration)
        guard let stack = await DiscoveryOptions.openStack(options.configuration) else {
            await wide?.stop()
            return 1
        }
        let advertisement: ServiceAdvertisement
        do {
            advertisement = try await stack.advertise(serviceType, name: name, port: port, txt: txt)
        } catch {
            Output.error(DiscoveryOptions.explain(error))
            await stack.shutdown()
            await wide?.stop()
            return 1
        }
        // The same instance in the domain, under the name multicast DNS settled on.
        let registration = await wide?.discovery.register(
            serviceType: serviceType, instance: await advertisement.registered(), host: WideAreaTool.hostLabel(),
            port: port, txt: txt.strings)
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
        let reloader = Task { [fixedEntries, infoFile, wide] in
            for await _ in reloads.signals {
                do {
                    let record = try Self.record(fixed: fixedEntries, file: infoFile)
                    advertisement.updateTXT(record)
                    if let wide, let registration { await wide.discovery.update(registration, txt: record.strings) }
                    let text = record.entries.map { entry in
                        entry.value.map { "\(entry.key)=\(String(decoding: $0, as: UTF8.self))" } ?? entry.key
                    }
                    Output.line("updated info \(text.joined(separator: " "))")
                } catch {
                    Output.error("multipeer: \(error)")
                }
            }
        }
        _ = await signals.wait()
        reloader.cancel()
        await advertisement.stop()
        await printer.value
        await stack.shutdown()
        await wide?.stop()
        return 0
    }
}
