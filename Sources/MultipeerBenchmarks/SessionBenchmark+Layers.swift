import Foundation
import Multipeer
import MultipeerIO

// `multipeer-bench session --only 6`: what the session layer costs per message. Two sessions in one process (an
// event loop each) on 127.0.0.1, linked by connection data; 64-byte reliable messages one way and round trips
// through `Session`, against a bare `PeerConnection` between the same two loops, run by run alternating.

extension SessionBenchmark {
    /// Both ends of the session layer and of the bare connection, on the same two loops.
    struct Layers {
        let aliceNetwork: PeerNetwork
        let bobNetwork: PeerNetwork
        let alice: Session
        let bob: Session
        let bare: LoopbackPeers

        /// Both sessions linked; with `sharedNetwork`, on one network (one event loop), as the facade's are.
        static func make(sharedNetwork: Bool = false) async throws -> Layers {
            let aliceIdentity = try PeerIdentity.generate(displayName: "Alice")
            let bobIdentity = try PeerIdentity.generate(displayName: "Bob")
            let aliceNetwork = try PeerNetwork(configuration: .loopback)
            let bobNetwork = sharedNetwork ? aliceNetwork : try PeerNetwork(configuration: .loopback)
            let alice = try await Session(identity: aliceIdentity, network: aliceNetwork)
            let bob = try await Session(identity: bobIdentity, network: bobNetwork)
            let fromAlice = try await alice.connectionData(for: bob.localPeer)
            let fromBob = try await bob.connectionData(for: alice.localPeer)
            async let a = alice.connect(bob.localPeer, connectionData: fromBob, timeout: .seconds(10))
            async let b = bob.connect(alice.localPeer, connectionData: fromAlice, timeout: .seconds(10))
            let outcomes = await (a, b)
            guard outcomes == (.accepted, .accepted) else { throw BenchmarkError("layers setup: \(outcomes)") }
            let bare = try await LoopbackPeers(
                dialer: ConnectionConfiguration(identity: aliceIdentity),
                listener: ConnectionConfiguration(identity: bobIdentity), dialerLoop: aliceNetwork.loop,
                listenerLoop: bobNetwork.loop)
            return Layers(aliceNetwork: aliceNetwork, bobNetwork: bobNetwork, alice: alice, bob: bob, bare: bare)
        }

        func shutdown() async {
            bare.listener.close()
            await alice.disconnect()
            await bob.disconnect()
            await aliceNetwork.shutdown()
            if bobNetwork !== aliceNetwork { await bobNetwork.shutdown() }
        }

        /// Messages per second through the sessions: one task sending, the receiver counting with `for await`.
        func sessionRate(count: Int, payload: Int) async throws -> Double {
            let bob = bob
            let receiver = Task { () throws -> UInt64 in
                var received = 0
                for await _ in bob.messages {
                    received += 1
                    if received == count { return BaselineSocket.nanoseconds() }
                }
                throw BenchmarkError("the session ended after \(received) of \(count) messages")
            }
            let message = [UInt8](repeating: 0x42, count: payload)
            let to = [bob.localPeer]
            let start = BaselineSocket.nanoseconds()
            for _ in 0..<count {
                guard await alice.send(message, to: to).values.first?.isEnqueued == true else {
                    throw BenchmarkError("a session send failed")
                }
            }
            let end = try await receiver.value
            return Double(count) / Baseline.seconds(from: start, to: end)
        }

        /// Round trips through the sessions (Bob echoes every message), in nanoseconds each.
        func sessionRoundTrips(rounds: Int, payload: Int) async throws -> [Double] {
            let bob = bob
            let echo = Task {
                for await message in bob.messages { _ = await bob.send(message.data, to: [message.peer]) }
            }
            defer { echo.cancel() }
            var replies = alice.messages.makeAsyncIterator()
            let message = [UInt8](repeating: 0x42, count: payload)
            let to = [bob.localPeer]
            var times: [Double] = []
            times.reserveCapacity(rounds)
            for round in 0..<(rounds + 200) {
                let start = BaselineSocket.nanoseconds()
                _ = await alice.send(message, to: to)
                guard await replies.next() != nil else { throw BenchmarkError("the session ended") }
                if round >= 200 { times.append(Double(BaselineSocket.nanoseconds() - start)) }
            }
            return times
        }

        /// Round trips over a bare connection between the same loops (a task on the acceptor echoes).
        func bareRoundTrips(rounds: Int, payload: Int) async throws -> [Double] {
            try await bare.withPair { dialer, acceptor in
                let echo = Task { for await message in acceptor.messages { try? await acceptor.send(message) } }
                defer { echo.cancel() }
                var replies = dialer.messages.makeAsyncIterator()
                let message = [UInt8](repeating: 0x42, count: payload)
                var times: [Double] = []
                times.reserveCapacity(rounds)
                for round in 0..<(rounds + 200) {
                    let start = BaselineSocket.nanoseconds()
                    try await dialer.send(message)
                    guard await replies.next() != nil else { throw BenchmarkError("the connection ended") }
                    if round >= 200 { times.append(Double(BaselineSocket.nanoseconds() - start)) }
                }
                return times
            }
        }
    }

    static func layers(_ options: BenchmarkOptions) async throws -> ([ConnectionRow], String) {
        let layers = try await Layers.make()
        let count = options.quick ? 50_000 : 200_000
        let rounds = options.quick ? 2_000 : 10_000
        let payload = 64
        // Warm-up of both paths.
        _ = try await layers.sessionRate(count: 10_000, payload: payload)
        _ = try await ConnectionBenchmark.messageRate(layers.bare, count: 10_000, payload: payload)
        var sessionRates: [Double] = []
        var bareRates: [Double] = []
        var sessionTrips: [Double] = []
        var bareTrips: [Double] = []
        var sessionP99: [Double] = []
        var bareP99: [Double] = []
        for run in 0..<options.runs {
            // Alternate which path goes first, so neither always runs on a warmer machine.
            for first in [run.isMultiple(of: 2), !run.isMultiple(of: 2)] {
                if first {
                    sessionRates.append(try await layers.sessionRate(count: count, payload: payload))
                    let trips = Summary(try await layers.sessionRoundTrips(rounds: rounds, payload: payload))
                    sessionTrips.append(trips.median)
                    sessionP99.append(trips.percentile(0.99))
                } else {
                    bareRates.append(
                        try await ConnectionBenchmark.messageRate(layers.bare, count: count, payload: payload))
                    let trips = Summary(try await layers.bareRoundTrips(rounds: rounds, payload: payload))
                    bareTrips.append(trips.median)
                    bareP99.append(trips.percentile(0.99))
                }
            }
        }
        await layers.shutdown()
        let note =
            "6: two sessions in one process (an event loop each) on 127.0.0.1, linked by connection data, TLS; "
            + "\(count) reliable 64 B messages per run from one task (`send(_:to:)` awaited one by one), counted by "
            + "`for await` on the receiver's `messages`; \(rounds) round trips per run (the receiver echoes each with "
            + "`send`), 200 more first as warm-up; baseline: a bare `PeerConnection` between the same two loops, "
            + "same message, same runs, alternating which goes first"
        return (
            [
                ConnectionRow(
                    "6 64 B messages, Session", ours: sessionRates, baseline: bareRates, unit: .messagesPerSecond,
                    target: .atLeastTimesBaseline(0.8), baselineName: "PeerConnection"),
                ConnectionRow(
                    "6 round trip p50, Session", ours: sessionTrips, baseline: bareTrips, unit: .microseconds,
                    target: .atMostTimesBaseline(1.1), baselineName: "PeerConnection"),
                ConnectionRow(
                    "6 round trip p99, Session", ours: sessionP99, baseline: bareP99, unit: .microseconds,
                    baselineName: "PeerConnection"),
            ],
            note
        )
    }
}
