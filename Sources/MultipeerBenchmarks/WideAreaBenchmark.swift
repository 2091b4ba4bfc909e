import Foundation
import Multipeer
import MultipeerIO
import NetLab
import Synchronization

/// `multipeer-bench widearea`: peers beyond one link (issue 21), with the baselines in the same runs.
///
/// 1. Start to found: in a routed lab (two hosts on one subnet, one on another, Knot on the router), an advertiser
///    starts (`multipeer advertise --domain ...`); the time until a browser on its own subnet reports it by
///    multicast DNS, and until a browser on the other subnet reports it through the DNS server (default poll
///    interval, 5 s).
/// 2. Connect: in one process on loopback with coturn, the whole connection setup (TCP, TLS 1.3, hello) to a
///    listener directly, and to its relayed address through the dialer's own allocation (Connect, ConnectionBind).
/// 3. Round trip of a 64-byte message over each connection (p50 of 2000).
/// 4. Bulk: 256 MiB through a stream over each connection.
/// 5. coturn's own client (`turnutils_uclient -T`, TCP relaying, with `turnutils_peer`) through the same relay: its
///    average round trip, beside ours (it paces its sends, so its throughput does not compare).
enum WideAreaBenchmark {
    /// Runs the selected parts; a part that fails is reported (and recorded as a failed row) and the next runs.
    /// - Returns: Whether every part ran.
    static func run(_ options: BenchmarkOptions) -> Bool {
        let started = Date()
        print("multipeer-bench widearea: \(options.runs) runs, \(machineDescription())")
        print("started \(ISO8601DateFormatter().string(from: started))")
        var succeeded = true
        func part(_ name: String, _ body: () throws -> Void) {
            do {
                try body()
            } catch {
                print("\(name): failed: \(error)")
                ResultLog.shared.add(.failed(name, error))
                succeeded = false
            }
        }
        if options.scenarios.contains(1) { part("1 start to found") { try foundTimes(runs: options.runs) } }
        if !options.scenarios.isDisjoint(with: [2, 3, 4, 5]) {
            part("2-5 relayed against direct") { try relayComparison(options) }
        }
        print("took \(Int(-started.timeIntervalSinceNow)) s")
        return succeeded
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return .nan }
        return sorted.count % 2 == 1
            ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
    }

    static func row(_ label: String, ours: [Double], baseline: [Double], unit: String, scale: Double = 1) {
        func show(_ values: [Double]) -> String {
            guard !values.isEmpty else { return "-" }
            return String(
                format: "%.3f (%.3f-%.3f)", median(values) * scale, values.min()! * scale, values.max()! * scale)
        }
        let ratio = baseline.isEmpty ? "" : String(format: "  ratio %.2f", median(ours) / median(baseline))
        print("\(label): \(show(ours)) \(unit) vs \(show(baseline)) \(unit)\(ratio)")
        ResultLog.shared.add(
            ResultLog.Record(
                label: label, ours: ours.isEmpty ? "n/a" : String(format: "%.3f %@", median(ours) * scale, unit),
                baseline: baseline.isEmpty ? "" : String(format: "%.3f %@", median(baseline) * scale, unit),
                ratio: baseline.isEmpty ? nil : median(ours) / median(baseline), runs: ours.count))
    }

    // MARK: 1. Start to found

    static func foundTimes(runs: Int) throws {
        let lab = try NetLab.createRouted(subnets: [2, 1])
        defer { lab.teardown() }
        let router = lab.routerAddress(subnet: 0)
        let knot = try KnotServer(
            address: router, port: 53, prefix: ["ip", "netns", "exec", lab.routerNamespace])
        defer { knot.stop() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-bench-wide-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = folder.appendingPathComponent("key").path
        _ = FileManager.default.createFile(
            atPath: keyFile, contents: Data(knot.keyLine.utf8), attributes: [.posixPermissions: 0o600])
        let binary = try BenchmarkPaths().multipeer
        var mdns: [Double] = []
        var dns: [Double] = []
        for run in 0..<runs {
            let service = "mp-bw\(run)x\(UInt16.random(in: 0...UInt16.max))"
            let domain = ["--domain", "lab.test", "--dns-server", router]
            let onLink = TimedLines(
                try lab.spawn(host: 1, binary, ["browse", service, "--line", "--interface", NetLab.interfaceName]))
            let beyond = TimedLines(
                try lab.spawn(
                    host: 2, binary, ["browse", service, "--line", "--interface", NetLab.interfaceName] + domain))
            Thread.sleep(forTimeInterval: 1.5)  // both browsers running
            let start = ContinuousClock.now
            let advertiser = try lab.spawn(
                host: 0, binary,
                ["advertise", service, "--name", "Bench", "--interface", NetLab.interfaceName, "--dns-key", keyFile]
                    + domain)
            func found(_ lines: TimedLines) -> Double? {
                guard let line = lines.next(within: .seconds(30), where: { $0.hasPrefix("found ") }) else { return nil }
                let elapsed = line.time - start
                return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            }
            if let time = found(onLink) { mdns.append(time) } else { print("run \(run): mDNS browser found nothing") }
            if let time = found(beyond) { dns.append(time) } else { print("run \(run): DNS browser found nothing") }
            for process in [advertiser, onLink.process, beyond.process] { process.signal(SIGINT) }
            for process in [advertiser, onLink.process, beyond.process] {
                _ = process.waitForExit(timeout: .seconds(10))
            }
        }
        row("1 start to found: across the router by DNS vs on the link by mDNS", ours: dns, baseline: mdns, unit: "s")
    }

    // MARK: 2-5. Relayed against direct

    /// A listener with an allocation on the relay, and a dialer with one of its own.
    final class Relayed: Sendable {
        let loop: EventLoop
        let listener: PeerListener
        let listenerRelay: RelayClient
        let dialerRelay: RelayClient
        let dialer: ConnectionConfiguration
        let accepted: AsyncStream<PeerConnection>
        let listenerFingerprint: PeerFingerprint

        init(server: SocketAddress, username: String, password: String) async throws {
            loop = try EventLoop(name: "bench-relay")
            let listenerIdentity = try PeerIdentity.generate(displayName: "listener")
            listenerFingerprint = listenerIdentity.fingerprint
            var configuration = ConnectionConfiguration(identity: listenerIdentity)
            configuration.maximumConnections = 1 << 12
            configuration.maximumPendingHandshakesPerHost = configuration.maximumPendingHandshakes
            listener = try await PeerListener(
                configuration: configuration, address: SocketAddress(.v4(.loopback), port: 0), loop: loop)
            accepted = listener.connections
            let credentials = TURNClientStateMachine.Credentials(username: username, password: password)
            let target = listener
            listenerRelay = RelayClient(
                configuration: .init(server: server, credentials: credentials), loop: loop,
                logger: MultipeerLogging.fallback, onEvent: { _ in },
                onIncoming: { socket, bytes, peer in target.acceptRelayed(socket, initialBytes: bytes, remote: peer) })
            dialerRelay = RelayClient(
                configuration: .init(server: server, credentials: credentials), loop: loop,
                logger: MultipeerLogging.fallback, onEvent: { _ in }, onIncoming: { socket, _, _ in socket.close() })
            dialer = ConnectionConfiguration(identity: try PeerIdentity.generate(displayName: "dialer"))
            listenerRelay.start()
            dialerRelay.start()
            for _ in 0..<200 where listenerRelay.relayedAddress == nil || dialerRelay.relayedAddress == nil {
                try await Task.sleep(for: .milliseconds(10))
            }
            guard let relayed = listenerRelay.relayedAddress, dialerRelay.relayedAddress != nil else {
                throw BenchmarkError("coturn gave no allocation within 2 s")
            }
            listenerRelay.permit([relayed.address])
            try await Task.sleep(for: .milliseconds(100))
        }

        var direct: SocketAddress { listener.localAddress }
        var relayed: SocketAddress { listenerRelay.relayedAddress! }

        /// One connection and the listener's side of it.
        func connect(relayed through: Bool) async throws -> (PeerConnection, PeerConnection) {
            let connection =
                through
                ? try await PeerConnection.connect(
                    relayedTo: relayed, through: dialerRelay, expecting: listenerFingerprint,
                    configuration: dialer, loop: loop)
                : try await PeerConnection.connect(
                    to: direct, expecting: listenerFingerprint, configuration: dialer, loop: loop)
            var iterator = accepted.makeAsyncIterator()
            guard let other = await iterator.next() else { throw BenchmarkError("the listener took no connection") }
            return (connection, other)
        }

        func stop() {
            listenerRelay.stop()
            dialerRelay.stop()
            listener.close()
            loop.shutdown()
        }
    }

    static func relayComparison(_ options: BenchmarkOptions) throws {
        let turn = try TurnServer()
        defer { turn.stop() }
        let server = SocketAddress(.v4(.loopback), port: turn.port)
        let setup = try blockingAwait {
            try await Relayed(server: server, username: turn.username, password: turn.password)
        }
        defer { setup.stop() }
        let runs = options.runs
        if options.scenarios.contains(2) {
            var direct: [Double] = []
            var relayed: [Double] = []
            for index in 0..<(runs * 10) {
                for through in index % 2 == 0 ? [false, true] : [true, false] {
                    let start = ContinuousClock.now
                    let (connection, other) = try blockingAwait { try await setup.connect(relayed: through) }
                    let elapsed = ContinuousClock.now - start
                    let ms = Double(elapsed.components.attoseconds) / 1e15 + Double(elapsed.components.seconds) * 1000
                    if through { relayed.append(ms) } else { direct.append(ms) }
                    connection.abort()
                    other.abort()
                }
            }
            row("2 connect (TCP, TLS 1.3, hello): relayed vs direct", ours: relayed, baseline: direct, unit: "ms")
        }
        let (directPair, relayedPair) = try blockingAwait {
            (try await setup.connect(relayed: false), try await setup.connect(relayed: true))
        }
        if options.scenarios.contains(3) {
            var direct: [Double] = []
            var relayed: [Double] = []
            for _ in 0..<runs {
                direct.append(try blockingAwait { try await roundTrip(directPair) })
                relayed.append(try blockingAwait { try await roundTrip(relayedPair) })
            }
            row("3 round trip p50, 64 B message: relayed vs direct", ours: relayed, baseline: direct, unit: "µs")
            if options.scenarios.contains(5) { coturnClient(turn) }
        } else if options.scenarios.contains(5) {
            coturnClient(turn)
        }
        if options.scenarios.contains(4) {
            // When scenario 3 ran, first the connections that carried its round trips (they can behave differently
            // through the relay: docs/BENCHMARKS.md); then fresh ones (the relay keeps one connection from an
            // allocation to a peer address at a time, so the first ones are closed before).
            var cases: [(String, () throws -> ((PeerConnection, PeerConnection), (PeerConnection, PeerConnection)))] =
                []
            if options.scenarios.contains(3) {
                cases.append(("4b stream of 256 MiB after 2000 round trips", { (directPair, relayedPair) }))
            }
            cases.append(
                (
                    "4 stream of 256 MiB, fresh connections",
                    {
                        for connection in [directPair.0, directPair.1, relayedPair.0, relayedPair.1] {
                            connection.abort()
                        }
                        Thread.sleep(forTimeInterval: 0.5)
                        return try blockingAwait {
                            (try await setup.connect(relayed: false), try await setup.connect(relayed: true))
                        }
                    }
                ))
            for (label, connections) in cases {
                let (directConnection, relayedConnection) = try connections()
                var direct: [Double] = []
                var relayed: [Double] = []
                for run in 0..<runs {
                    for through in run % 2 == 0 ? [false, true] : [true, false] {
                        let value = try blockingAwait {
                            try await bulk(through ? relayedConnection : directConnection, bytes: 256 << 20)
                        }
                        if through { relayed.append(value) } else { direct.append(value) }
                    }
                }
                row("\(label): relayed vs direct", ours: relayed, baseline: direct, unit: "GB/s")
            }
        }
    }

    /// The median round trip of 2000 64-byte messages echoed by the far side, in microseconds.
    static func roundTrip(_ pair: (PeerConnection, PeerConnection)) async throws -> Double {
        let (near, far) = pair
        let echo = Task {
            for await message in far.messages { try? await far.send(message) }
        }
        defer { echo.cancel() }
        var replies = near.messages.makeAsyncIterator()
        let payload = [UInt8](repeating: 7, count: 64)
        var samples: [Double] = []
        for index in 0..<2200 {
            let start = ContinuousClock.now
            try await near.send(payload)
            guard await replies.next() != nil else { throw BenchmarkError("no echo") }
            let elapsed = ContinuousClock.now - start
            if index >= 200 { samples.append(Double(elapsed.components.attoseconds) / 1e12) }
        }
        return median(samples)
    }

    /// Bytes through a stream, in GB/s.
    static func bulk(_ pair: (PeerConnection, PeerConnection), bytes: Int) async throws -> Double {
        let (near, far) = pair
        let stream = try await near.openStream(name: "bulk")
        let receiver = Task { () throws -> Int in
            var streams = far.incomingStreams.makeAsyncIterator()
            guard let incoming = await streams.next() else { throw BenchmarkError("no stream arrived") }
            var received = 0
            var buffer: [UInt8] = []
            while true {
                let count = try await incoming.read(into: &buffer)
                if count == 0 { break }
                received += count
            }
            return received
        }
        let block = [UInt8](repeating: 0x5a, count: 64 << 10)
        let start = ContinuousClock.now
        var sent = 0
        while sent < bytes {
            try await stream.write(block)
            sent += block.count
        }
        try await stream.finish()
        let received = try await receiver.value
        let elapsed = ContinuousClock.now - start
        guard received == bytes else { throw BenchmarkError("the stream carried \(received) of \(bytes) bytes") }
        return Double(bytes) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
            / 1e9
    }

    /// coturn's own TCP-relay client against its echo peer through the same relay: its average round trip.
    static func coturnClient(_ turn: TurnServer) {
        guard let uclient = KnotServer.path(of: "turnutils_uclient"), let peer = KnotServer.path(of: "turnutils_peer")
        else {
            print("5 turnutils_uclient: not installed")
            return
        }
        guard let echo = try? ProcessLauncher.launch(peer, ["-L", "127.0.0.1", "-p", "3490"]) else { return }
        defer {
            echo.signal(SIGKILL)
            _ = echo.waitForExit(timeout: .seconds(5))
        }
        Thread.sleep(forTimeInterval: 0.3)
        guard
            let result = try? ProcessLauncher.run(
                uclient,
                [
                    // 1400-byte messages: with short ones (64 B) this client never finishes over TCP relaying.
                    "-T", "-n", "200", "-l", "1400", "-m", "1", "-u", turn.username, "-w", turn.password, "-e",
                    "127.0.0.1", "-r", "3490", "-p", "\(turn.port)", "127.0.0.1",
                ], timeout: .seconds(120))
        else {
            print("5 turnutils_uclient: did not run")
            return
        }
        let line = (result.stdout + "\n" + result.stderr).split(separator: "\n").first {
            $0.contains("Average round trip")
        }
        print(
            "5 turnutils_uclient -T (1400 B messages, paced), through the same relay: "
                + (line.map { String($0) } ?? "no result"))
        ResultLog.shared.addNote(
            "5 turnutils_uclient -T (1400 B messages, paced), through the same relay: "
                + (line.map { String($0) } ?? "no result"))
    }
}
