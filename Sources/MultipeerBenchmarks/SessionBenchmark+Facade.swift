import Foundation
import Multipeer
import MultipeerConnectivity
import MultipeerIO

// `multipeer-bench session --only 7`: what the Multipeer Connectivity facade costs. Two `MCSession`s in one
// process on 127.0.0.1 (the facade's one network: one event loop), linked by custom discovery, used as apps use
// them (a thread calling `send`, the delegate counting or echoing on its queue, streams written and read by
// threads), against two native `Session`s on one network of their own, run by run alternating.

extension SessionBenchmark {
    /// Apple's API on both ends, and what a test of it needs to see.
    final class FacadePair: @unchecked Sendable {
        // Safety: the sessions are immutable references; the counters are behind their locks.
        let alice: MCSession
        let bob: MCSession
        let aliceID: MCPeerID
        let bobID: MCPeerID
        let aliceDelegate = FacadeDelegate()
        let bobDelegate = FacadeDelegate()

        init() async throws {
            MCNetwork.configuration = .loopback
            MCPeerID.identityStore = PeerIdentityStore(
                directory: FileManager.default.temporaryDirectory.appendingPathComponent(
                    "mp-bench-\(UUID().uuidString)", isDirectory: true))
            aliceID = MCPeerID(displayName: "Alice")
            bobID = MCPeerID(displayName: "Bob")
            alice = MCSession(peer: aliceID, securityIdentity: nil, encryptionPreference: .required)
            bob = MCSession(peer: bobID, securityIdentity: nil, encryptionPreference: .required)
            alice.delegate = aliceDelegate
            bob.delegate = bobDelegate
            let forBob = try await alice.nearbyConnectionData(forPeer: bobID)
            let forAlice = try await bob.nearbyConnectionData(forPeer: aliceID)
            alice.connectPeer(bobID, withNearbyConnectionData: forAlice)
            bob.connectPeer(aliceID, withNearbyConnectionData: forBob)
            let (alice, bob) = (alice, bob)
            guard
                await SessionBenchmark.waitUntil(
                    .seconds(10),
                    {
                        !alice.connectedPeers.isEmpty && !bob.connectedPeers.isEmpty
                    })
            else { throw BenchmarkError("facade setup: the sessions did not connect") }
        }

        func shutdown() {
            alice.disconnect()
            bob.disconnect()
        }

        /// Messages per second: a thread sending `count` messages of `payload` bytes with `send`, Bob's delegate
        /// counting; a full queue (`unavailable`) is waited out 1 ms at a time, as an app would retry.
        func rate(count: Int, payload: Int) async throws -> Double {
            let done = bobDelegate.expect(count)
            let data = Data(repeating: 0x42, count: payload)
            let (alice, bobID) = (alice, bobID)
            let start = BaselineSocket.nanoseconds()
            try await onThread {
                var sent = 0
                while sent < count {
                    do {
                        try alice.send(data, toPeers: [bobID], with: .reliable)
                        sent += 1
                    } catch let error as MCError where error.code == .unavailable {
                        Thread.sleep(forTimeInterval: 0.001)
                    }
                }
            }
            let end = await done.value
            return Double(count) / Baseline.seconds(from: start, to: end)
        }

        /// Round trips driven from the delegates, as a request-response app runs them: Alice's delegate takes
        /// each echo and sends the next message; Bob's delegate sends each message back.
        func roundTrips(rounds: Int, payload: Int) async throws -> [Double] {
            bobDelegate.echo.withLock { $0 = true }
            defer { bobDelegate.echo.withLock { $0 = false } }
            let data = Data(repeating: 0x42, count: payload)
            let total = rounds + 200
            let times = await withCheckedContinuation { (continuation: CheckedContinuation<[Double], Never>) in
                let state = Lock((round: 0, start: BaselineSocket.nanoseconds(), times: [Double]()))
                aliceDelegate.onData.withLock {
                    $0 = OnData { [alice, bobID] in
                        let done = state.withLock { state -> [Double]? in
                            let now = BaselineSocket.nanoseconds()
                            if state.round >= 200 { state.times.append(Double(now - state.start)) }
                            state.round += 1
                            state.start = now
                            return state.round == total ? state.times : nil
                        }
                        if let done { return continuation.resume(returning: done) }
                        try? alice.send(data, toPeers: [bobID], with: .reliable)
                    }
                }
                state.withLock { $0.start = BaselineSocket.nanoseconds() }
                try? alice.send(data, toPeers: [bobID], with: .reliable)
            }
            aliceDelegate.onData.withLock { $0 = nil }
            guard times.count == rounds else { throw BenchmarkError("\(times.count) of \(rounds) round trips") }
            return times
        }

        /// Bytes per second through a stream: a thread writing `total` bytes in 64 KiB writes to the
        /// `OutputStream`, another reading Bob's `InputStream` until its end.
        func streamRate(total: Int) async throws -> Double {
            let incoming = bobDelegate.nextStream()
            let output = try alice.startStream(withName: "bench", toPeer: bobID)
            nonisolated(unsafe) let stream = output
            let start = BaselineSocket.nanoseconds()
            let writer = Task.detached {
                try await onThread {
                    stream.open()
                    let chunk = [UInt8](repeating: 0x42, count: 65_536)
                    var written = 0
                    while written < total {
                        let count = chunk.withUnsafeBufferPointer {
                            stream.write($0.baseAddress!, maxLength: min($0.count, total - written))
                        }
                        guard count > 0 else { throw BenchmarkError("the stream write failed") }
                        written += count
                    }
                    stream.close()
                }
            }
            let box = await incoming.value
            let received = try await onThread { () throws -> Int in
                let input = box.stream
                input.open()
                var buffer = [UInt8](repeating: 0, count: 262_144)
                var received = 0
                while true {
                    let count = input.read(&buffer, maxLength: buffer.count)
                    if count < 0 { throw BenchmarkError("the stream read failed") }
                    if count == 0 { break }
                    received += count
                }
                input.close()
                return received
            }
            let end = BaselineSocket.nanoseconds()
            try await writer.value
            guard received == total else { throw BenchmarkError("the stream carried \(received) of \(total) bytes") }
            return Double(total) / Baseline.seconds(from: start, to: end)
        }
    }

    /// The benchmark's delegate: counts data (and says when a count is reached), echoes it, or hands streams over.
    final class FacadeDelegate: NSObject, MCSessionDelegate, Sendable {
        let echo = Lock(false)
        /// Boxed: a closure read out of a `Lock` directly gains two thunks per read (see MCRuntime's `Boxed`).
        let onData = Lock<OnData?>(nil)
        private let counting = Lock<(left: Int, done: CheckedContinuation<UInt64, Never>?)>((0, nil))
        private let streams = Lock<CheckedContinuation<StreamBox, Never>?>(nil)

        /// A task that ends, with the time, once `count` more messages arrived.
        func expect(_ count: Int) -> Task<UInt64, Never> {
            let started = Lock(false)
            let task = Task {
                await withCheckedContinuation { continuation in
                    counting.withLock { $0 = (count, continuation) }
                    started.withLock { $0 = true }
                }
            }
            while !started.withLock({ $0 }) { usleep(100) }
            return task
        }

        /// A task that ends with the next stream received.
        func nextStream() -> Task<StreamBox, Never> {
            let started = Lock(false)
            let task = Task {
                await withCheckedContinuation { continuation in
                    streams.withLock { $0 = continuation }
                    started.withLock { $0 = true }
                }
            }
            while !started.withLock({ $0 }) { usleep(100) }
            return task
        }

        func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}

        func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
            if echo.withLock({ $0 }) {
                try? session.send(data, toPeers: [peerID], with: .reliable)
                return
            }
            if let call = onData.withLock({ $0 }) { return call.call() }
            let done = counting.withLock { state -> CheckedContinuation<UInt64, Never>? in
                state.left -= 1
                guard state.left == 0 else { return nil }
                defer { state.done = nil }
                return state.done
            }
            done?.resume(returning: BaselineSocket.nanoseconds())
        }

        func session(
            _ session: MCSession, didReceive stream: InputStream, withName streamName: String,
            fromPeer peerID: MCPeerID
        ) {
            streams.withLock { waiting in
                defer { waiting = nil }
                return waiting
            }?.resume(returning: StreamBox(stream: stream))
        }

        func session(
            _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            with progress: Progress
        ) {}

        func session(
            _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
            at localURL: URL?, withError error: (any Error)?
        ) {}
    }

    /// What the benchmark's delegate calls on data.
    final class OnData: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    /// A received stream handed to a reading thread.
    struct StreamBox: @unchecked Sendable {
        // Safety: used by one thread at a time (the delegate hands it over, then only the reader uses it).
        let stream: InputStream
    }

    /// The native baseline's stream: `total` bytes written in 64 KiB writes, read with `read(into:)`.
    static func nativeStreamRate(_ layers: Layers, total: Int) async throws -> Double {
        let bob = layers.bob
        let reader = Task { () throws -> (Int, UInt64) in
            for await event in bob.events {
                guard case .stream(let stream, _) = event else { continue }
                var chunk: [UInt8] = []
                var received = 0
                while true {
                    let count = try await stream.read(into: &chunk, maximumCount: 262_144)
                    if count == 0 { break }
                    received += count
                }
                return (received, BaselineSocket.nanoseconds())
            }
            throw BenchmarkError("the session ended before a stream came")
        }
        let start = BaselineSocket.nanoseconds()
        let stream = try await layers.alice.openStream(named: "bench", to: layers.bob.localPeer)
        let chunk = [UInt8](repeating: 0x42, count: 65_536)
        var written = 0
        while written < total {
            let count = min(chunk.count, total - written)
            try await stream.write(count == chunk.count ? chunk : Array(chunk[..<count]))
            written += count
        }
        try await stream.finish()
        let (received, end) = try await reader.value
        guard received == total else { throw BenchmarkError("the stream carried \(received) of \(total) bytes") }
        return Double(total) / Baseline.seconds(from: start, to: end)
    }

    static func facade(_ options: BenchmarkOptions) async throws -> ([ConnectionRow], String) {
        let facade = try await FacadePair()
        let native = try await Layers.make(sharedNetwork: true)
        let count = options.quick ? 50_000 : 200_000
        let rounds = options.quick ? 2_000 : 10_000
        let large = 1 << 20
        let largeCount = options.quick ? 64 : 256
        let streamBytes = options.quick ? 64 << 20 : 256 << 20
        // Warm-up of both paths.
        _ = try await facade.rate(count: 10_000, payload: 64)
        _ = try await native.sessionRate(count: 10_000, payload: 64)
        var rates: ([Double], [Double]) = ([], [])
        var trips: ([Double], [Double]) = ([], [])
        var p99: ([Double], [Double]) = ([], [])
        var largeRates: ([Double], [Double]) = ([], [])
        var streams: ([Double], [Double]) = ([], [])
        for run in 0..<options.runs {
            for facadeFirst in [run.isMultiple(of: 2), !run.isMultiple(of: 2)] {
                if facadeFirst {
                    rates.0.append(try await facade.rate(count: count, payload: 64))
                    let summary = Summary(try await facade.roundTrips(rounds: rounds, payload: 64))
                    trips.0.append(summary.median)
                    p99.0.append(summary.percentile(0.99))
                    largeRates.0.append(try await facade.rate(count: largeCount, payload: large) * Double(large))
                    streams.0.append(try await facade.streamRate(total: streamBytes))
                } else {
                    rates.1.append(try await native.sessionRate(count: count, payload: 64))
                    let summary = Summary(try await native.sessionRoundTrips(rounds: rounds, payload: 64))
                    trips.1.append(summary.median)
                    p99.1.append(summary.percentile(0.99))
                    largeRates.1.append(
                        try await native.sessionRate(count: largeCount, payload: large) * Double(large))
                    streams.1.append(try await nativeStreamRate(native, total: streamBytes))
                }
            }
        }
        facade.shutdown()
        await native.shutdown()
        let note =
            "7: two MCSessions in one process on 127.0.0.1 (the facade's one network), linked by custom discovery, "
            + "TLS; \(count) reliable 64 B messages per run sent by a thread with `send(_:toPeers:with:)`, counted by "
            + "Bob's delegate; \(rounds) round trips per run (Alice's delegate sends the next message when it gets "
            + "the echo, Bob's delegate echoes with `send`), 200 more first as warm-up; \(largeCount) messages of 1 MiB per run (a full queue, "
            + "`unavailable`, waited out 1 ms at a time); a \(streamBytes >> 20) MiB stream per run (threads writing "
            + "the OutputStream in 64 KiB writes and reading the InputStream); baseline: two native Sessions on one "
            + "network of their own, `send` awaited one by one, `for await` on `messages`, a PeerStream written in "
            + "64 KiB writes, same runs, alternating which goes first"
        return (
            [
                ConnectionRow(
                    "7 64 B messages, MCSession", ours: rates.0, baseline: rates.1, unit: .messagesPerSecond,
                    target: .atLeastTimesBaseline(0.8), baselineName: "Session"),
                ConnectionRow(
                    "7 round trip p50, MCSession", ours: trips.0, baseline: trips.1, unit: .microseconds,
                    target: .atMostTimesBaseline(1.25), baselineName: "Session"),
                ConnectionRow(
                    "7 round trip p99, MCSession", ours: p99.0, baseline: p99.1, unit: .microseconds,
                    baselineName: "Session"),
                ConnectionRow(
                    "7 1 MiB messages, MCSession", ours: largeRates.0, baseline: largeRates.1, unit: .bytesPerSecond,
                    target: .atLeastTimesBaseline(0.9), baselineName: "Session"),
                ConnectionRow(
                    "7 stream, MCSession", ours: streams.0, baseline: streams.1, unit: .bytesPerSecond,
                    target: .atLeastTimesBaseline(0.9), baselineName: "Session"),
            ],
            note
        )
    }
}

/// Runs `body` on a thread of its own (blocking calls, as an application makes them) and returns its result.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }.start()
    }
}
