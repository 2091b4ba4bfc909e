internal import Foundation
internal import Glibc
import MulticastDNS
import Multipeer
import MultipeerIO

/// `multipeer send FILE --to NAME` and `multipeer receive`: one file between two peers, with progress, a
/// SHA-256 both sides print, resumption after a dropped link, and a clean cancel on Ctrl-C.
enum FilesCommand {
    static let defaultService = "mp-files"
    static let sendSummary = "send a file (or an http(s) URL) to a peer, with progress and its SHA-256"
    static let receiveSummary = "receive files into a folder; asks once per new peer (or --yes)"
}

/// The process's peak resident memory (VmHWM), printed as `peak memory N KiB` when MULTIPEER_REPORT_MEMORY=1, so
/// tests and benchmarks can check it.
func reportPeakMemory() {
    guard ProcessInfo.processInfo.environment["MULTIPEER_REPORT_MEMORY"] == "1",
        let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
    else { return }
    let kib = line.split(separator: " ").dropFirst().first.map(String.init) ?? "?"
    Output.line("peak memory \(kib) KiB")
}

/// Prints a transfer's progress: a bar on a terminal, otherwise a line at most once a second.
final class ProgressPrinter: Sendable {
    let verb: String
    let name: String
    let total: Int64
    let started = ContinuousClock.now
    let terminal = isatty(STDOUT_FILENO) == 1

    init(verb: String, name: String, total: Int64) {
        self.verb = verb
        self.name = name
        self.total = total
    }

    static func bytes(_ count: Int64) -> String {
        let value = Double(count)
        if value >= Double(1 << 30) { return String(format: "%.2f GiB", value / Double(1 << 30)) }
        if value >= Double(1 << 20) { return String(format: "%.1f MiB", value / Double(1 << 20)) }
        if value >= 1024 { return String(format: "%.1f KiB", value / 1024) }
        return "\(count) B"
    }

    func line(_ done: Int64) -> String {
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = seconds > 0 ? Double(done) / seconds : 0
        let left = rate > 0 ? Double(total - done) / rate : 0
        return "\(verb) \(name) \(Self.bytes(done)) of \(Self.bytes(total)), \(Self.bytes(Int64(rate)))/s, "
            + String(format: "%.0f s left", left)
    }

    /// `[#####.....]`: the share of `total` that `done` is, in `width` marks.
    static func bar(_ done: Int64, of total: Int64, width: Int) -> String {
        let filled = total > 0 ? min(width, Int(Double(width) * Double(done) / Double(total))) : width
        return "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
    }

    /// Reports until `done()` says the transfer ended.
    func run(_ completed: @escaping @Sendable () -> Int64, done: @escaping @Sendable () -> Bool) async {
        while !done() && !Task.isCancelled {
            let count = completed()
            if terminal {
                FileHandle.standardOutput.write(
                    Data("\r\(Self.bar(count, of: total, width: 30)) \(line(count))\u{1b}[K".utf8))
                try? await Task.sleep(for: .milliseconds(100))
            } else {
                Output.line(line(count))
                for _ in 0..<10 where !done() && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(100)) }
            }
        }
        if terminal { FileHandle.standardOutput.write(Data("\r\u{1b}[K".utf8)) }
    }
}

struct SendCommand: PeerCommand {
    var file: String
    var peerName: String
    var service: String
    var timeout: Duration
    var options: PeerOptions

    init(_ parsed: MultipeerTool.Send) throws(UsageError) {
        options = try PeerOptions(
            discovery: parsed.discovery, connection: parsed.connection, wideArea: parsed.wideArea, relay: parsed.relay)
        guard let to = parsed.to else { throw UsageError("--to NAME is required") }
        peerName = to
        service = parsed.service ?? FilesCommand.defaultService
        _ = try DiscoveryOptions.serviceType(service)
        timeout =
            try parsed.timeout.map { text throws(UsageError) in
                try DiscoveryOptions.seconds(text, option: "--timeout")
            } ?? .seconds(30)
        file = parsed.file
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        let url: URL
        if file.hasPrefix("http://") || file.hasPrefix("https://"), let remote = URL(string: file) {
            url = remote
        } else {
            url = URL(fileURLWithPath: file)
            guard FileManager.default.isReadableFile(atPath: file) else {
                Output.error("multipeer: cannot read \(file)")
                return 1
            }
        }
        let name = url.lastPathComponent.isEmpty ? "resource" : url.lastPathComponent
        let network: PeerNetwork
        let session: Session
        let browser: PeerBrowser
        do {
            network = try options.network()
            session = try await Session(identity: connection.identity, configuration: options.session, network: network)
            browser = try await PeerBrowser(serviceType: service, identity: connection.identity, network: network)
        } catch {
            Output.error("multipeer: \(error.reason)")
            return 1
        }
        let work = Task { () -> (Int32, String) in
            // Not found within the timeout: say so instead of waiting for ever.
            let giveUp = Task {
                try? await Task.sleep(for: timeout)
                if !Task.isCancelled { browser.stop() }
            }
            var found: DiscoveredPeer?
            for await event in browser.events {
                if case .found(let peer) = event, peer.peer.displayName == peerName {
                    found = peer
                    break
                }
            }
            giveUp.cancel()
            guard let found else { return (1, "\(peerName) was not found within \(timeout)") }
            switch await browser.invite(found.peer, into: session, timeout: timeout) {
            case .accepted: break
            case let outcome: return (1, "\(peerName) \(outcome)")
            }
            let transfer: ResourceTransfer
            do throws(SessionError) {
                transfer = try await session.sendResource(at: url, named: name, to: found.peer)
            } catch {
                return (1, error.reason)
            }
            let printer = ProgressPrinter(verb: "sending", name: name, total: transfer.progress.totalUnitCount)
            let progress = Task {
                await printer.run({ transfer.progress.completedUnitCount }, done: { transfer.isFinished })
            }
            let result = await withTaskCancellationHandler { () async -> Result<ResourceReceipt, SessionError> in
                do throws(SessionError) {
                    return .success(try await transfer.finished())
                } catch {
                    return .failure(error)
                }
            } onCancel: {
                transfer.progress.cancel()
            }
            await progress.value
            switch result {
            case .success(let receipt):
                return (0, "sent \(name) \(receipt.size) sha256 \(receipt.sha256) to \(peerName)")
            case .failure(let error):
                return (1, "not sent: \(error.reason)")
            }
        }
        let interrupted = Interrupted()
        let signalled = Task {
            guard await signals.wait() != 0, !Task.isCancelled else { return }
            interrupted.set()
            work.cancel()
        }
        let (status, line) = await work.value
        signalled.cancel()
        if status == 0 {
            Output.line(line)
        } else {
            Output.error("multipeer: \(interrupted.value ? "cancelled" : line)")
        }
        reportPeakMemory()
        browser.stop()
        await session.disconnect()
        try? await Task.sleep(for: .milliseconds(100))
        await network.shutdown()
        return interrupted.value ? 130 : status
    }
}

struct ReceiveCommand: PeerCommand {
    var directory: String
    var yes: Bool
    var keepGoing: Bool
    var service: String
    var options: PeerOptions

    init(_ parsed: MultipeerTool.Receive) throws(UsageError) {
        options = try PeerOptions(
            discovery: parsed.discovery, connection: parsed.connection, wideArea: parsed.wideArea, relay: parsed.relay)
        directory = parsed.dir ?? FileManager.default.currentDirectoryPath
        yes = parsed.yes
        keepGoing = parsed.keepGoing
        service = parsed.service ?? FilesCommand.defaultService
        _ = try DiscoveryOptions.serviceType(service)
    }

    func run() async -> Int32 {
        let signals = TerminationSignals()
        let interactive = isatty(STDIN_FILENO) == 1
        let store: TrustOnFirstUseStore
        do {
            let configDirectory =
                (ProcessInfo.processInfo.environment["XDG_CONFIG_HOME"] ?? NSHomeDirectory() + "/.config")
                + "/multipeer"
            try FileManager.default.createDirectory(
                atPath: configDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            store = try TrustOnFirstUseStore(path: configDirectory + "/trusted-peers")
        } catch {
            Output.error("multipeer: cannot open the trusted-peers file: \(error)")
            return 1
        }
        var configuration = options.session
        configuration.resourceDirectory = directory
        let network: PeerNetwork
        let session: Session
        let advertiser: PeerAdvertiser
        do {
            network = try options.network()
            session = try await Session(identity: connection.identity, configuration: configuration, network: network)
            advertiser = try await PeerAdvertiser(
                serviceType: service, identity: connection.identity, encryption: connection.encryption,
                groupSecret: connection.groupSecret, network: network)
        } catch {
            Output.error("multipeer: \(error.reason)")
            return 1
        }
        Output.line("receiving as \(connection.identity.displayName) into \(directory)")
        let yes = yes
        let answering = Task {
            for await invitation in advertiser.invitations {
                let peer = invitation.peer
                let code = invitation.verificationCode?.description ?? "none"
                var accept = yes
                let known = store.fingerprint(for: peer.displayName)
                if !yes, let known, known == peer.fingerprint {
                    accept = true
                } else if !yes, let known {
                    Output.error(
                        "multipeer: IDENTITY CHANGED: \(Output.escaped(peer.displayName)) was \(known) and is now "
                            + "\(peer.claimedFingerprint); refused (remove the name from the trusted-peers file if "
                            + "the change is expected)")
                    accept = false
                } else if !yes && interactive {
                    Output.line(
                        "\(Output.escaped(peer.displayName)) (\(peer.claimedFingerprint)) wants to send you files; "
                            + "code \(code)")
                    Output.line("trust this peer? [y/N] ")
                    accept = (readLine() ?? "").lowercased().hasPrefix("y")
                    if accept { _ = try? store.evaluate(peer) }
                } else if !yes {
                    Output.error(
                        "multipeer: \(Output.escaped(peer.displayName)) wants to send a file; not a terminal, so not asked "
                            + "(run with --yes to accept)")
                }
                if accept {
                    try? await invitation.accept(into: session)
                } else {
                    invitation.decline(reason: yes || interactive ? "not trusted" : "the receiver cannot ask its user")
                }
            }
        }
        let keepGoing = keepGoing
        let work = Task { () -> Int32 in
            var status: Int32 = 0
            var printers: [ObjectIdentifier: Task<Void, Never>] = [:]
            for await event in session.events {
                switch event {
                case .resourceStarted(let resource):
                    let printer = ProgressPrinter(
                        verb: "receiving", name: Output.escaped(resource.name), total: resource.size)
                    printers[ObjectIdentifier(resource)] = Task {
                        await printer.run(
                            { resource.progress.completedUnitCount },
                            done: { resource.progress.isFinished || resource.progress.isCancelled })
                    }
                case .resourceFinished(let resource, let result):
                    printers.removeValue(forKey: ObjectIdentifier(resource))?.cancel()
                    switch result {
                    case .success(let url):
                        Output.line(
                            "received \(Output.escaped(url.lastPathComponent)) \(resource.size) sha256 "
                                + "\(resource.sha256) from \(Output.escaped(resource.peer.displayName))")
                        status = 0
                    case .failure(let error):
                        Output.error(
                            "multipeer: \(Output.escaped(resource.name)) from "
                                + "\(Output.escaped(resource.peer.displayName)) failed: \(Output.escaped(error.reason))"
                        )
                        status = 1
                    }
                    if !keepGoing { return status }
                case .peerChanged(let peer, .reconnecting, let reason):
                    Output.line(
                        "reconnecting \(Output.escaped(peer.displayName)): \(Output.escaped(reason.description))")
                default:
                    break
                }
            }
            return status
        }
        let interrupted = Interrupted()
        let signalled = Task {
            guard await signals.wait() != 0, !Task.isCancelled else { return }
            interrupted.set()
            work.cancel()
        }
        let status = await work.value
        signalled.cancel()
        reportPeakMemory()
        answering.cancel()
        await session.disconnect()
        await advertiser.stop()
        try? await Task.sleep(for: .milliseconds(100))
        await network.shutdown()
        return interrupted.value ? 130 : status
    }
}

/// Whether SIGINT or SIGTERM arrived.
final class Interrupted: Sendable {
    private let flag = Lock(false)
    func set() { flag.withLock { $0 = true } }
    var value: Bool { flag.withLock { $0 } }
}
