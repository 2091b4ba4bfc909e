import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO
import NetLab
import Synchronization

// `multipeer-bench session`: 1. invitation to both sides connected, for a peer already discovered, against a
// bare TLS connect in the same runs; 2. a mesh of 8, 16 and 32 `multipeer chat` processes in a namespace lab,
// from a cold start to fully meshed, against the time until every process has discovered every other; 3. one
// member broadcasting 1 KiB messages to 31 others, against the same sender to one member; 4. a 1 GiB file
// between two lab hosts against iperf3, with peak memory; 5. a link back after a 3 s outage to the session
// whole and the outage's messages delivered; 6. the session layer's cost per message against a bare connection
// (SessionBenchmark+Layers.swift).

func runSession(_ options: BenchmarkOptions) throws -> Bool {
    let started = Date()
    print("multipeer-bench session: \(options.runs) runs per benchmark, \(machineDescription())")
    print("started \(ISO8601DateFormatter().string(from: started)), load average \(loadAverage())")
    var rows: [ConnectionRow] = []
    var notes: [String] = []
    if options.scenarios.contains(1) {
        let (row, note) = try blockingAwait { try await SessionBenchmark.inviteLatency(options) }
        rows.append(row)
        notes.append(note)
    }
    if options.scenarios.contains(2) {
        let (meshRows, meshNotes) = try SessionBenchmark.meshColdStart(options)
        rows += meshRows
        notes += meshNotes
    }
    if options.scenarios.contains(3) {
        let (row, note) = try blockingAwait { try await SessionBenchmark.broadcast(options) }
        rows.append(row)
        notes.append(note)
    }
    if options.scenarios.contains(6) {
        let (layerRows, note) = try blockingAwait { try await SessionBenchmark.layers(options) }
        rows += layerRows
        notes.append(note)
    }
    if options.scenarios.contains(7) {
        let (facadeRows, note) = try blockingAwait { try await SessionBenchmark.facade(options) }
        rows += facadeRows
        notes.append(note)
    }
    if options.scenarios.contains(4) || options.scenarios.contains(5) {
        let lab = try NetLab.create(hosts: 2, ipv6: false)
        defer { lab.teardown() }
        if options.scenarios.contains(4) {
            let (fileRows, fileNotes) = try SessionBenchmark.fileTransfer(lab: lab, options: options)
            rows += fileRows
            notes += fileNotes
        }
        if options.scenarios.contains(5) {
            let (row, note) = try SessionBenchmark.reconnection(lab: lab, options: options)
            rows += row
            notes.append(note)
        }
    }
    for row in rows {
        print(row.line)
        ResultLog.shared.add(row.record)
    }
    if options.verbose {
        print("raw per-run values:")
        for row in rows { row.rawLines.forEach { print($0) } }
    }
    print("notes:")
    for note in notes { print("  " + note) }
    notes.forEach(ResultLog.shared.addNote)
    print("took \(Int(-started.timeIntervalSinceNow)) s")
    return true
}

enum SessionBenchmark {
    static let serviceType = "mp-bench"

    /// Something that waits until a condition holds, polling.
    static func waitUntil(_ timeout: Duration, _ condition: () async -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            try? await Task.sleep(for: .microseconds(200))
        }
        return await condition()
    }

    // MARK: 1. Invitation latency

    /// A session that the advertiser's acceptor swaps for every invitation.
    final class CurrentSession: Sendable {
        let session = Lock<Session?>(nil)
    }

    static func inviteLatency(_ options: BenchmarkOptions) async throws -> (ConnectionRow, String) {
        let alice = try PeerIdentity.generate(displayName: "Alice")
        let bob = try PeerIdentity.generate(displayName: "Bob")
        let aliceNetwork = try PeerNetwork(configuration: .loopback)
        let bobNetwork = try PeerNetwork(configuration: .loopback)
        let type = "\(serviceType)-\(UInt16.random(in: 0...UInt16.max))"
        let advertiser = try await PeerAdvertiser(serviceType: type, identity: bob, network: bobNetwork)
        let browser = try await PeerBrowser(serviceType: type, identity: alice, network: aliceNetwork)
        let current = CurrentSession()
        let acceptor = Task {
            for await invitation in advertiser.invitations {
                if let session = current.session.withLock({ $0 }) { try? await invitation.accept(into: session) }
            }
        }
        var found: DiscoveredPeer?
        for await event in browser.events {
            if case .found(let peer) = event {
                found = peer
                break
            }
        }
        guard let found else { throw BenchmarkError("the advertiser was never found") }
        let address = SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: found.port)
        let count = options.quick ? 50 : 200
        var inviteMedians: [Double] = []
        var connectMedians: [Double] = []
        var all: [Double] = []
        for run in 0..<(options.runs + 1) {
            var invites: [Double] = []
            var connects: [Double] = []
            for _ in 0..<count {
                let aliceSession = try await Session(identity: alice, network: aliceNetwork)
                let bobSession = try await Session(identity: bob, network: bobNetwork)
                current.session.withLock { $0 = bobSession }
                let bobConnected = Task {
                    for await event in bobSession.events {
                        if case .peerChanged(_, .connected, _) = event { return ContinuousClock.now }
                    }
                    return ContinuousClock.now
                }
                let start = ContinuousClock.now
                let outcome = await browser.invite(found.peer, into: aliceSession)
                let aliceDone = ContinuousClock.now
                guard outcome == .accepted else { throw BenchmarkError("invitation: \(outcome)") }
                let bobDone = await bobConnected.value
                invites.append(Double((max(aliceDone, bobDone) - start).nanoseconds))
                await aliceSession.disconnect()
                await bobSession.disconnect()
                // The baseline: a bare TLS connect to the same listener (the router closes it unused).
                let connectStart = ContinuousClock.now
                let connection = try await PeerConnection.connect(
                    to: address, expecting: bob.fingerprint, configuration: ConnectionConfiguration(identity: alice),
                    loop: aliceNetwork.loop)
                connects.append(Double((ContinuousClock.now - connectStart).nanoseconds))
                connection.abort()
            }
            if run == 0 { continue }  // warm-up
            all += invites
            inviteMedians.append(Summary(invites).median)
            connectMedians.append(Summary(connects).median)
        }
        acceptor.cancel()
        browser.stop()
        await advertiser.stop()
        await aliceNetwork.shutdown()
        await bobNetwork.shutdown()
        let summary = Summary(all)
        let note = String(
            format: "1: %d invitations per run, each into fresh sessions of an already discovered peer on 127.0.0.1, "
                + "timed from browser.invite to both sides connected (the later of the inviter's outcome and the "
                + "invitee's connected event); baseline: a bare PeerConnection.connect (TLS, dialer returns) in "
                + "the same runs; all %d: p90 %.3f ms, max %.3f ms", count, summary.count, summary.p90 / 1e6,
            summary.max / 1e6)
        return (
            ConnectionRow(
                "1 invite -> both connected", ours: inviteMedians, baseline: connectMedians, unit: .milliseconds,
                target: .atMost(20_000_000), baselineName: "TLS connect"),
            note
        )
    }

    // MARK: 2. Mesh from a cold start

    static func meshColdStart(_ options: BenchmarkOptions) throws -> ([ConnectionRow], [String]) {
        let paths = try BenchmarkPaths()
        var rows: [ConnectionRow] = []
        var notes: [String] = []
        let sizes = [8, 16, 32]
        let lab = try NetLab.create(hosts: sizes.max()!, ipv6: false)
        defer { lab.teardown() }
        let runs = options.quick ? 1 : max(1, options.runs / 2)
        for size in sizes {
            var meshed: [Double] = []
            var discovered: [Double] = []
            for run in 0..<runs {
                let (mesh, found) = try meshOnce(lab: lab, paths: paths, size: size, run: run)
                meshed.append(mesh)
                discovered.append(found)
            }
            rows.append(
                ConnectionRow(
                    "2 mesh of \(size) from cold start", ours: meshed, baseline: discovered, unit: .milliseconds,
                    target: size == 32 ? .atMost(5e9) : .none, baselineName: "all discovered"))
        }
        notes.append(
            "2: \(runs) run(s) per size; N `multipeer chat` processes (release) started at once on N lab hosts, each "
                + "`--accept all --invite` every other name; timed from the first spawn until every process has "
                + "printed `connected` for all N-1 others; baseline: until every process has printed `found` for "
                + "all N-1 others (discovery alone), in the same run")
        return (rows, notes)
    }

    static func meshOnce(lab: NetLab, paths: BenchmarkPaths, size: Int, run: Int) throws -> (Double, Double) {
        let names = (0..<size).map { "P\($0)" }
        let service = "\(serviceType)-\(size)-\(run)"
        let start = ContinuousClock.now
        var processes: [TimedLines] = []
        for (index, name) in names.enumerated() {
            let invites = names.filter { $0 != name }.flatMap { ["--invite", $0] }
            processes.append(
                TimedLines(
                    try lab.spawn(
                        host: index, paths.multipeer,
                        [
                            "chat", service, "--name", name, "--interface", NetLab.interfaceName, "--accept", "all",
                            "--max-peers", "64", "--timeout", "20",
                        ] + invites, interactive: true)))
        }
        defer {
            for process in processes { process.process.signal(SIGTERM) }
            for process in processes { _ = process.process.waitForExit(timeout: .seconds(10)) }
        }
        let deadline = start + .seconds(60)
        func lastTime(_ prefix: String) -> ContinuousClock.Instant? {
            var latest = start
            for process in processes {
                let lines = process.all.filter { $0.text.hasPrefix(prefix) }
                let names = Set(lines.map { $0.text.split(separator: " ")[1] })
                guard names.count == size - 1 else { return nil }
                latest = max(latest, lines.map(\.time).max()!)
            }
            return latest
        }
        while ContinuousClock.now < deadline {
            if let meshed = lastTime("connected "), let found = lastTime("found ") {
                return (Double((meshed - start).nanoseconds), Double((found - start).nanoseconds))
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        let missing = processes.map { process in
            process.all.filter { $0.text.hasPrefix("connected ") }.count
        }
        throw BenchmarkError("mesh of \(size) not complete after 60 s; connected counts: \(missing)")
    }

    // MARK: 4. A file between two lab hosts

    /// iperf3 between the two lab hosts, bytes per second.
    static func labIperf3(_ lab: NetLab, seconds: Int) throws -> Double {
        let server = try lab.spawn(host: 0, "iperf3", ["-s", "-1", "-B", lab.hosts[0].ipv4, "-p", "5201"])
        defer { server.forceKill() }
        Thread.sleep(forTimeInterval: 0.5)
        let client = try lab.run(
            host: 1, "iperf3", ["-c", lab.hosts[0].ipv4, "-p", "5201", "-t", String(seconds), "-J"],
            timeout: .seconds(seconds + 20))
        guard let report = try? JSONSerialization.jsonObject(with: Data(client.stdout.utf8)) as? [String: Any],
            let end = report["end"] as? [String: Any], let received = end["sum_received"] as? [String: Any],
            let bits = (received["bits_per_second"] as? NSNumber)?.doubleValue
        else { throw BenchmarkError("iperf3 in the lab printed no report: \(client.stderr)") }
        return bits / 8
    }

    static func fileTransfer(lab: NetLab, options: BenchmarkOptions) throws -> ([ConnectionRow], [String]) {
        let paths = try BenchmarkPaths()
        let size = options.quick ? 256 : 1024
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-bench-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory + "/inbox", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let source = directory + "/file.bin"
        let dd = try lab.run(
            host: 0, "/bin/dd", ["if=/dev/urandom", "of=\(source)", "bs=1M", "count=\(size)", "status=none"],
            timeout: .seconds(120))
        guard dd.status == 0 else { throw BenchmarkError("dd: \(dd.stderr)") }
        let runs = options.quick ? 1 : 3
        var ours: [Double] = []
        var iperf: [Double] = []
        var peaks: [Double] = []
        for run in 0..<runs {
            if run % 2 == 1 { iperf.append(try labIperf3(lab, seconds: 5)) }
            try? FileManager.default.removeItem(atPath: directory + "/inbox/file.bin")
            let environment = ["MULTIPEER_REPORT_MEMORY": "1", "XDG_CONFIG_HOME": directory + "/config"]
            let receiver = TimedLines(
                try lab.spawn(
                    host: 0, paths.multipeer,
                    [
                        "receive", "--name", "Rx", "--dir", directory + "/inbox", "--yes", "--service",
                        "mp-bench-f\(run)",
                        "--interface", NetLab.interfaceName,
                    ], environment: environment))
            let sender = TimedLines(
                try lab.spawn(
                    host: 1, paths.multipeer,
                    [
                        "send", source, "--to", "Rx", "--name", "Tx", "--service", "mp-bench-f\(run)", "--interface",
                        NetLab.interfaceName,
                    ], environment: environment))
            let deadline = ContinuousClock.now + .seconds(180)
            var started: ContinuousClock.Instant?
            var finished: ContinuousClock.Instant?
            while ContinuousClock.now < deadline, finished == nil {
                for line in receiver.all {
                    if started == nil, line.text.hasPrefix("receiving file.bin") { started = line.time }
                    if line.text.hasPrefix("received ") { finished = line.time }
                }
                Thread.sleep(forTimeInterval: 0.01)
            }
            guard let started, let finished else {
                throw BenchmarkError(
                    "the file did not arrive: \(receiver.all.map(\.text).suffix(3)) \(sender.all.map(\.text).suffix(3))"
                )
            }
            _ = sender.process.waitForExit(timeout: .seconds(20))
            _ = receiver.process.waitForExit(timeout: .seconds(20))
            let seconds = Double((finished - started).nanoseconds) / 1e9
            ours.append(Double(size << 20) / seconds)
            let peak =
                (receiver.all + sender.all).compactMap { line -> Double? in
                    guard line.text.hasPrefix("peak memory ") else { return nil }
                    return Double(line.text.split(separator: " ")[2]).map { $0 * 1024 }
                }.max() ?? .nan
            peaks.append(peak)
            if run % 2 == 0 { iperf.append(try labIperf3(lab, seconds: 5)) }
        }
        let note =
            "4: \(size) MiB file, `multipeer send` (lab host 1) to `multipeer receive` (host 0), TLS, release build; "
            + "rate from the receiver's first progress line to its `received` line (SHA-256 checked, file fsynced); "
            + "baseline iperf3 -t 5 between the same hosts, alternating; \(runs) run(s); peak = the larger VmHWM of "
            + "the two processes"
        return (
            [
                ConnectionRow(
                    "4 file \(size) MiB, TLS, lab", ours: ours, baseline: iperf, unit: .bytesPerSecond,
                    target: .atLeastTimesBaseline(0.5), baselineName: "iperf3"),
                ConnectionRow(
                    "4 file peak resident memory", ours: peaks, unit: .kibibytes, target: .atMost(64 * 1024 * 1024)),
            ],
            [note]
        )
    }

    // MARK: 5. Reconnection

    static func reconnection(lab: NetLab, options: BenchmarkOptions) throws -> ([ConnectionRow], String) {
        let paths = try BenchmarkPaths()
        let runs = options.quick ? 1 : 3
        var whole: [Double] = []
        var delivered: [Double] = []
        var firstConnect: [Double] = []
        for run in 0..<runs {
            let service = "mp-bench-r\(run)"
            let base = ["chat", service, "--interface", NetLab.interfaceName, "--silence-timeout", "1"]
            let alpha = TimedLines(
                try lab.spawn(
                    host: 0, paths.multipeer, base + ["--name", "Alpha", "--accept", "all"], interactive: true))
            let invited = ContinuousClock.now
            let bravo = TimedLines(
                try lab.spawn(
                    host: 1, paths.multipeer, base + ["--name", "Bravo", "--invite", "Alpha"], interactive: true))
            defer {
                alpha.process.signal(SIGTERM)
                bravo.process.signal(SIGTERM)
                _ = alpha.process.waitForExit(timeout: .seconds(5))
                _ = bravo.process.waitForExit(timeout: .seconds(5))
            }
            func when(_ lines: TimedLines, _ prefix: String, after: ContinuousClock.Instant, within: Duration)
                -> ContinuousClock.Instant?
            {
                let deadline = ContinuousClock.now + within
                while ContinuousClock.now < deadline {
                    if let line = lines.all.first(where: { $0.text.hasPrefix(prefix) && $0.time >= after }) {
                        return line.time
                    }
                    Thread.sleep(forTimeInterval: 0.002)
                }
                return nil
            }
            guard let found = when(bravo, "found Alpha", after: invited, within: .seconds(15)),
                let connected = when(alpha, "connected Bravo", after: invited, within: .seconds(15))
            else { throw BenchmarkError("the chat processes did not connect") }
            firstConnect.append(Double((connected - found).nanoseconds))
            try lab.setLinkDown(host: 1)
            Thread.sleep(forTimeInterval: 3)
            // Sent while the link is down: kept and delivered once it is back.
            for index in 0..<100 { _ = bravo.process.writeLine("outage \(index)") }
            let up = ContinuousClock.now
            try lab.setLinkUp(host: 1)
            guard let back = when(alpha, "reconnected Bravo", after: up, within: .seconds(15)),
                let last = when(alpha, "message Bravo: outage 99", after: up, within: .seconds(15))
            else {
                throw BenchmarkError("no reconnection: \(alpha.all.map(\.text).suffix(4))")
            }
            whole.append(Double((back - up).nanoseconds))
            delivered.append(Double((last - up).nanoseconds))
        }
        let note =
            "5: `multipeer chat` on two lab hosts with a 1 s silence timeout; host 1's link down for 3 s (the link "
            + "is declared lost after 1 s), 100 messages typed during the outage; timed from the link coming back "
            + "until Alpha prints `reconnected Bravo`, and until the 100th message is printed; baseline: the first "
            + "connection of the same run, from Bravo's `found Alpha` to Alpha's `connected Bravo`"
        return (
            [
                ConnectionRow(
                    "5 link back -> session whole", ours: whole, baseline: firstConnect, unit: .milliseconds,
                    baselineName: "first invite -> connected"),
                ConnectionRow(
                    "5 link back -> outage messages in", ours: delivered, baseline: firstConnect, unit: .milliseconds,
                    baselineName: "first invite -> connected"),
            ],
            note
        )
    }

    // MARK: 3. Broadcast

    final class Counter: Sendable {
        let value = Atomic<Int>(0)
    }

    static func broadcast(_ options: BenchmarkOptions) async throws -> (ConnectionRow, String) {
        let receivers = 31
        let count = options.quick ? 1_000 : 4_000
        let payload = [UInt8](repeating: 0x42, count: 1024)
        var networks: [PeerNetwork] = []
        var sessions: [Session] = []
        var advertisers: [PeerAdvertiser] = []
        for index in 0...receivers {
            let identity = try PeerIdentity.generate(displayName: "N\(index)")
            let network = try PeerNetwork(configuration: .loopback)
            let session = try await Session(identity: identity, network: network)
            let advertiser = try await PeerAdvertiser(
                serviceType: "\(serviceType)-b", identity: identity, network: network)
            let invitations = advertiser.invitations
            Task { for await invitation in invitations { try? await invitation.accept(into: session) } }
            networks.append(network)
            sessions.append(session)
            advertisers.append(advertiser)
        }
        let browser = try await PeerBrowser(
            serviceType: "\(serviceType)-b", identity: sessions[0].identity, network: networks[0])
        var found: [Peer: DiscoveredPeer] = [:]
        for await event in browser.events {
            if case .found(let peer) = event { found[peer.peer] = peer }
            if found.count == receivers { break }
        }
        for peer in found.keys {
            let outcome = await browser.invite(peer, into: sessions[0])
            guard outcome == .accepted else { throw BenchmarkError("broadcast setup: \(outcome)") }
        }
        let counters = (0...receivers).map { _ in Counter() }
        for index in 1...receivers {
            let session = sessions[index]
            let counter = counters[index]
            Task { for await _ in session.messages { counter.value.add(1, ordering: .relaxed) } }
        }
        let members = await sessions[0].connectedPeers
        func deliver(to peers: [Peer], indices: [Int]) async throws -> Double {
            let before = indices.map { counters[$0].value.load(ordering: .relaxed) }
            let start = ContinuousClock.now
            for _ in 0..<count {
                let results = await sessions[0].send(payload, to: peers)
                guard results.values.allSatisfy(\.isEnqueued) else { throw BenchmarkError("send failed") }
            }
            let done = await waitUntil(.seconds(120)) {
                zip(indices, before).allSatisfy { counters[$0.0].value.load(ordering: .relaxed) >= $0.1 + count }
            }
            guard done else { throw BenchmarkError("broadcast: not every message arrived") }
            return Double(count) / (ContinuousClock.now - start).seconds
        }
        // Which receiver index holds which peer.
        var indexOf: [Peer: Int] = [:]
        for index in 1...receivers { indexOf[sessions[index].localPeer] = index }
        let allIndices = members.compactMap { indexOf[$0] }
        var broadcastRates: [Double] = []
        var singleRates: [Double] = []
        for run in 0..<(options.runs + 1) {
            let one = try await deliver(to: [members[0]], indices: [allIndices[0]])
            let all = try await deliver(to: members, indices: allIndices)
            if run == 0 { continue }
            singleRates.append(one)
            broadcastRates.append(all)
        }
        browser.stop()
        for session in sessions { await session.disconnect() }
        for advertiser in advertisers { await advertiser.stop() }
        for network in networks { await network.shutdown() }
        let note =
            "3: 32 sessions in one process (one event loop each) on 127.0.0.1, fully meshed; member 0 sends "
            + "\(count) reliable 1 KiB messages with one send(to: all 31) each; rate = messages delivered to all 31 "
            + "per second (\(receivers)× as many deliveries); baseline: the same sender sending to one member, "
            + "same runs; 2 cores carry all 32 loops"
        return (
            ConnectionRow(
                "3 broadcast 1 KiB to 31", ours: broadcastRates, baseline: singleRates, unit: .messagesPerSecond,
                baselineName: "same sender to 1 member"),
            note
        )
    }
}

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
}
