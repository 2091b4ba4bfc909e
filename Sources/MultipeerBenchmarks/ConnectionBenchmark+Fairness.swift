import Multipeer
import Synchronization

extension ConnectionBenchmark {
    /// Benchmark 1f: how promptly a small message arrives while a bulk transfer fills the same TLS connection.
    ///
    /// A stream carries `bytes` (1 GiB by default) while another task sends a 64-byte message every 10 ms on the
    /// connection's message channel; each message carries its send time, and the acceptor records the delay
    /// until `messages` yields it. Baseline: the same messages on the same kind of connection with nothing else
    /// running (the idle one-way delay, measured the same way in the same run).
    func fairness() throws -> [ConnectionRow] {
        let tls = try peers(.required)
        var loaded: [Double] = []
        var loadedMax: [Double] = []
        var idle: [Double] = []
        for run in 0..<options.runs {
            try alternate(run) {
                let bulkBytes = sizes.bulkBytes
                let delays = try phase("1f small messages during bulk") {
                    try blockingAwait { try await Self.smallMessageDelays(tls, bulkBytes: bulkBytes) }
                }
                loaded.append(Summary(delays).percentile(0.5))
                loadedMax.append(delays.map { Double($0) }.max() ?? 0)
            } baseline: {
                let delays = try phase("1f small messages idle") {
                    try blockingAwait { try await Self.smallMessageDelays(tls, bulkBytes: 0) }
                }
                idle.append(Summary(delays).percentile(0.5))
            }
        }
        notes.append(
            "1f: a 64-byte message every 10 ms on the message channel of a TLS connection while a stream carries "
                + "\(sizes.bulkBytes >> 20) MiB on it; delay from send to `messages` yielding it; baseline: the same "
                + "messages on an idle connection")
        return [
            ConnectionRow(
                "1f small message during bulk p50, TLS", ours: loaded, baseline: idle, unit: .microseconds,
                target: .none, baselineName: "idle connection"),
            ConnectionRow(
                "1f small message during bulk max, TLS", ours: loadedMax, unit: .microseconds),
        ]
    }

    /// Sends 64-byte timestamped messages every 10 ms while `bulkBytes` go through a stream (or, with 0, for
    /// 50 messages on an idle connection); returns each message's delay in nanoseconds.
    static func smallMessageDelays(_ peers: LoopbackPeers, bulkBytes: Int) async throws -> [UInt64] {
        try await peers.withPair { dialer, acceptor in
            let collector = Task { () -> [UInt64] in
                var delays: [UInt64] = []
                for await message in acceptor.messages {
                    let now = BaselineSocket.nanoseconds()
                    let sent = message.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                    if message.count == 64 { delays.append(now - sent) }
                    if message.first == 0xFF { break }
                }
                return delays
            }
            let done = DoneFlag()
            let bulk = Task { () throws in
                defer { done.value.store(true, ordering: .releasing) }
                guard bulkBytes > 0 else { return }
                let stream = try await dialer.openStream(name: "bulk")
                let reader = Task {
                    var streams = acceptor.incomingStreams.makeAsyncIterator()
                    guard let incoming = await streams.next() else { return }
                    var buffer: [UInt8] = []
                    while try await incoming.read(into: &buffer) > 0 {}
                }
                let block = [UInt8](repeating: 0x5a, count: 256 * 1024)
                var sent = 0
                while sent < bulkBytes {
                    try await stream.write(block)
                    sent += block.count
                }
                try await stream.finish()
                try await reader.value
            }
            var count = 0
            repeat {
                var message = [UInt8](repeating: 0, count: 64)
                var stamp = BaselineSocket.nanoseconds()
                for index in (0..<8).reversed() {
                    message[index] = UInt8(truncatingIfNeeded: stamp)
                    stamp >>= 8
                }
                try await dialer.send(message)
                count += 1
                try await Task.sleep(for: .milliseconds(10))
            } while bulkBytes > 0 ? !done.value.load(ordering: .acquiring) : count < 50
            try await bulk.value
            try await dialer.send([0xFF])
            return await collector.value
        }
    }
}

/// Set once the bulk transfer finished.
final class DoneFlag: Sendable {
    let value = Atomic<Bool>(false)
}
