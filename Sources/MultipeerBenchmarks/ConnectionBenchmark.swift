import Dispatch
import Foundation
import Multipeer
import MultipeerIO

/// `multipeer-bench connection`: throughput, small-message rate, round trips, connect time and idle memory of
/// ``PeerConnection`` on 127.0.0.1, each against a baseline measured in the same runs (iperf3, the raw framed
/// pump, raw ping-pong, raw TCP connect). See docs/BENCHMARKS.md, "Connections".
///
/// Both ends run in this process, each on an ``EventLoop`` of its own (the dialer's loop and the listener's
/// loop), so the two ends use two loop threads as two processes would; the application side (sending,
/// receiving, echoing) runs in Swift tasks on the global concurrent executor. Measurements are driven from the
/// main thread: each of ours runs as a task the main thread waits for (``blockingAwait(_:)``) and each baseline
/// runs on the main thread (plus its own threads or processes), never both at once. Within a run, ours and the
/// baseline alternate which goes first.
final class ConnectionBenchmark {
    /// How much work each benchmark does per run.
    struct Sizes: Sendable {
        /// Bytes per bulk transfer (benchmark 1).
        var bulkBytes = 1 << 30
        /// Bytes per `PeerStream.write` (benchmark 1).
        var streamChunk = 256 << 10
        /// Bytes per message of the bulk-message variant (benchmark 1).
        var bulkMessage = 1 << 20
        /// `iperf3 -t` (benchmark 1).
        var iperf3Seconds = 2
        /// 64-byte messages per run (benchmark 2).
        var smallMessages = 2_000_000
        /// Messages through the raw framed pump per run (benchmark 2).
        var framedMessages = 10_000_000
        /// Recorded round trips per run, for each of ours and the baseline (benchmark 3).
        var roundTrips = 20_000
        /// Connects per run and configuration (benchmark 4).
        var connects = 200
        /// Idle TLS connection pairs (benchmark 5).
        var idlePairs = 1000
        /// The message size of benchmarks 2 and 3.
        var payload = 64

        /// About a quarter of the work.
        static let quick = Sizes(
            bulkBytes: 256 << 20, iperf3Seconds: 1, smallMessages: 500_000, framedMessages: 2_500_000,
            roundTrips: 5000, connects: 50)
    }

    let options: BenchmarkOptions
    let sizes: Sizes
    let dialerLoop: EventLoop
    let listenerLoop: EventLoop
    let dialerIdentity: PeerIdentity
    let listenerIdentity: PeerIdentity
    private var peersByEncryption: [String: LoopbackPeers] = [:]
    /// Lines printed under "notes" after the table.
    var notes: [String] = []

    init(options: BenchmarkOptions) throws {
        self.options = options
        var sizes = options.quick ? Sizes.quick : Sizes()
        sizes.idlePairs = options.idlePairs
        self.sizes = sizes
        dialerLoop = try EventLoop(name: "bench-dialer")
        listenerLoop = try EventLoop(name: "bench-listener")
        dialerIdentity = try PeerIdentity.generate(displayName: "bench dialer")
        listenerIdentity = try PeerIdentity.generate(displayName: "bench listener")
    }

    /// The listener and dialer settings for `encryption` (`.required` or `.none` on both sides), made once.
    func peers(_ encryption: EncryptionPreference) throws -> LoopbackPeers {
        let key = "\(encryption)"
        if let peers = peersByEncryption[key] { return peers }
        let dialer = ConnectionConfiguration(identity: dialerIdentity, encryption: encryption)
        var listener = ConnectionConfiguration(identity: listenerIdentity, encryption: encryption)
        // Every dialer is this process on loopback, and benchmark 5 keeps a thousand connections open.
        listener.maximumConnections = 1 << 16
        listener.maximumQueuedConnections = 1 << 16
        listener.maximumPendingHandshakesPerHost = listener.maximumPendingHandshakes
        let loops = (dialerLoop, listenerLoop)
        let listenerConfiguration = listener
        let peers = try blockingAwait {
            try await LoopbackPeers(
                dialer: dialer, listener: listenerConfiguration, dialerLoop: loops.0, listenerLoop: loops.1)
        }
        peersByEncryption[key] = peers
        return peers
    }

    /// Closes the listeners and stops both loops.
    func shutdown() {
        for peers in peersByEncryption.values { peers.listener.close() }
        peersByEncryption = [:]
        dialerLoop.shutdown()
        listenerLoop.shutdown()
    }

    /// Runs `body`; with `--verbose`, writes its start and end (`CLOCK_MONOTONIC` seconds) to standard error, so a
    /// profile taken with `perf record -k CLOCK_MONOTONIC` can be cut into phases (`perf script --time`).
    func phase<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
        guard options.verbose else { return try body() }
        let start = BaselineSocket.nanoseconds()
        defer {
            let end = BaselineSocket.nanoseconds()
            let line = String(format: "phase %.6f %.6f %@\n", Double(start) / 1e9, Double(end) / 1e9, name)
            FileHandle.standardError.write(Data(line.utf8))
        }
        return try body()
    }

    /// Runs `ours` and `baseline` in the order of `run`: ours first in even runs, the baseline first in odd ones.
    func alternate(_ run: Int, ours: () throws -> Void, baseline: () throws -> Void) throws {
        if run % 2 == 0 {
            try ours()
            try baseline()
        } else {
            try baseline()
            try ours()
        }
    }
}

/// One listener on 127.0.0.1 on the listener's loop, and the dialer's configuration and loop.
final class LoopbackPeers: Sendable {
    let listener: PeerListener
    let dialerLoop: EventLoop
    let dialerConfiguration: ConnectionConfiguration
    let listenerFingerprint: PeerFingerprint

    init(
        dialer: ConnectionConfiguration, listener: ConnectionConfiguration, dialerLoop: EventLoop,
        listenerLoop: EventLoop
    ) async throws {
        self.listener = try await PeerListener(
            configuration: listener, address: SocketAddress(.v4(.loopback), port: 0), loop: listenerLoop)
        self.dialerLoop = dialerLoop
        dialerConfiguration = dialer
        listenerFingerprint = listener.identity.fingerprint
    }

    /// Dials the listener (expecting its identity over TLS; plaintext can prove no identity, so a plaintext
    /// dialer expects nobody) and returns once the dialer has the connection.
    func connect() async throws -> PeerConnection {
        try await PeerConnection.connect(
            to: listener.localAddress,
            expecting: dialerConfiguration.encryption == .none ? nil : listenerFingerprint,
            configuration: dialerConfiguration, loop: dialerLoop)
    }

    /// The next connection the listener yielded.
    func accepted() async throws -> PeerConnection {
        var connections = listener.connections.makeAsyncIterator()
        guard let connection = await connections.next() else { throw BenchmarkError("the listener closed") }
        return connection
    }

    /// A new connection: both of its ends.
    func connectPair() async throws -> (dialer: PeerConnection, acceptor: PeerConnection) {
        let dialer = try await connect()
        return (dialer, try await accepted())
    }

    /// Runs `body` on a new connection; closes it gracefully afterwards, or aborts both ends if `body` threw
    /// (so that tasks still reading from either end finish).
    func withPair<T: Sendable>(
        _ body: (_ dialer: PeerConnection, _ acceptor: PeerConnection) async throws -> T
    ) async throws -> T {
        let (dialer, acceptor) = try await connectPair()
        do {
            let result = try await body(dialer, acceptor)
            await dialer.close()
            _ = await acceptor.closed()
            return result
        } catch {
            dialer.abort()
            acceptor.abort()
            throw error
        }
    }
}

/// Runs `body` as a task and blocks the calling thread until it finished; the caller must not be a thread of
/// the concurrent executor (the benchmark calls it from the main thread).
/// - Returns: What `body` returned.
/// - Throws: What `body` threw.
func blockingAwait<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = Lock<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let result: Result<T, any Error>
        do {
            result = .success(try await body())
        } catch {
            result = .failure(error)
        }
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return try outcome.withLock { $0! }.get()
}

/// The nanoseconds from `start` to now (`CLOCK_MONOTONIC`, as the baselines measure).
func nanosecondsSince(_ start: UInt64) -> UInt64 {
    BaselineSocket.nanoseconds() &- start
}

/// `multipeer-bench connection`: runs the selected benchmarks and prints each one's rows as it finishes, then the
/// verdicts.
/// - Returns: Whether every selected benchmark ran (missed targets still count as ran).
func runConnection(_ options: BenchmarkOptions) throws -> Bool {
    let benchmark = try ConnectionBenchmark(options: options)
    defer { benchmark.shutdown() }
    let started = Date()
    print("multipeer-bench connection: \(options.runs) runs per benchmark, \(machineDescription())")
    print("started \(ISO8601DateFormatter().string(from: started)), load average \(loadAverage())")
    print(
        "ours: one EventLoop per side (dialer, listener), 127.0.0.1; baselines in the same runs, "
            + "order alternating run by run")
    var rows: [ConnectionRow] = []
    var succeeded = true
    let benchmarks: [(Int, String, () throws -> [ConnectionRow])] = [
        (1, "bulk throughput", benchmark.bulkThroughput),
        (1, "small message during bulk", benchmark.fairness),
        (2, "small messages", benchmark.smallMessages),
        (3, "round trips", benchmark.roundTrips),
        (4, "connect time", benchmark.connectTime),
        (5, "idle memory", benchmark.idleMemory),
    ]
    for (number, name, body) in benchmarks where options.scenarios.contains(number) {
        let start = ContinuousClock.now
        do {
            let produced = try body()
            rows += produced
            for row in produced {
                print(row.line)
                ResultLog.shared.add(row.record)
            }
            if options.verbose { for row in produced { row.rawLines.forEach { print($0) } } }
        } catch {
            print("\(number) \(name): failed: \(error)")
            ResultLog.shared.add(.failed("\(number) \(name)", error))
            succeeded = false
        }
        let took = start.duration(to: .now)
        let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
        print(String(format: "   [%d %@: %.1f s]", number, name, seconds))
    }
    print("took \(Int(-started.timeIntervalSinceNow)) s, load average \(loadAverage())")
    let judged = rows.filter { $0.met != nil }
    if !judged.isEmpty {
        print("verdicts:")
        for row in judged {
            print("  \(row.met == true ? "MET   " : "MISSED") \(row.label) (target \(row.targetText))")
        }
    }
    if !benchmark.notes.isEmpty {
        print("notes:")
        for note in benchmark.notes { print("  " + note) }
    }
    benchmark.notes.forEach(ResultLog.shared.addNote)
    return succeeded
}

/// The first three fields of `/proc/loadavg`.
func loadAverage() -> String {
    guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "?" }
    return text.split(separator: " ").prefix(3).joined(separator: " ")
}
