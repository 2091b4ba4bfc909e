import Foundation

extension Baseline {
    /// How much work each baseline does; the defaults take a few seconds each at most on loopback.
    struct Sizes {
        /// `iperf3 -t`.
        var iperf3Seconds = 2
        /// Bytes through the raw TCP pump.
        var rawTCPBytes = 4 << 30
        /// Messages through the framed pump.
        var framedMessages = 40_000_000
        /// Recorded ping-pong round trips.
        var pingPongRounds = 100_000
        /// The message size of the framed pump and the ping-pong.
        var payload = 64

        /// A quarter of the work or less, for a quick look.
        static let quick = Sizes(
            iperf3Seconds: 1, rawTCPBytes: 1 << 30, framedMessages: 10_000_000, pingPongRounds: 20_000)
    }
}

/// `multipeer-bench baseline`: runs every baseline once and prints its numbers. A baseline that fails prints its
/// error and the others still run.
/// - Parameter options: `quick` selects ``Baseline/Sizes/quick``.
/// - Returns: Whether every baseline produced a number.
func runBaselines(_ options: BenchmarkOptions) -> Bool {
    let sizes = options.quick ? Baseline.Sizes.quick : Baseline.Sizes()
    print("multipeer-bench baseline: loopback 127.0.0.1, blocking sockets and threads, \(machineDescription())")
    var succeeded = true

    /// Runs one baseline, printing its line or its error, and the wall time it took.
    func measure(_ label: String, _ body: () throws -> String) {
        let started = ContinuousClock.now
        let text: String
        do {
            text = try body()
        } catch {
            text = "failed: \(error)"
            succeeded = false
        }
        let took = started.duration(to: .now)
        let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
        print(
            label.padding(toLength: 50, withPad: " ", startingAt: 0) + "  " + text
                + String(format: "  [%.1f s]", seconds))
        ResultLog.shared.add(
            ResultLog.Record(label: label, ours: text, met: text.hasPrefix("failed:") ? false : nil, runs: 1))
    }

    measure("iperf3 TCP, one stream, \(sizes.iperf3Seconds) s") {
        let rate = try Baseline.iperf3Throughput(seconds: sizes.iperf3Seconds)
        return String(format: "%.2f Gbit/s (%.2f GB/s)", rate * 8 / 1e9, rate / 1e9)
    }
    measure("raw TCP pump, 128 KiB writes, \(sizes.rawTCPBytes >> 20) MiB") {
        let rate = try Baseline.rawTCPThroughput(bytes: sizes.rawTCPBytes)
        return String(format: "%.2f GB/s (%.2f Gbit/s)", rate / 1e9, rate * 8 / 1e9)
    }
    measure("raw framed messages, \(sizes.payload) B, \(sizes.framedMessages / 1_000_000) M") {
        let rate = try Baseline.rawFramedMessageRate(count: sizes.framedMessages, payload: sizes.payload)
        let wireBytes = Double(FramedPump.headerLength + FramedPump.messagePrefixLength + sizes.payload)
        return String(format: "%.2f M msgs/s (%.2f GB/s of frames)", rate / 1e6, rate * wireBytes / 1e9)
    }
    measure("raw ping-pong, \(sizes.payload) B, TCP_NODELAY, \(sizes.pingPongRounds) rounds") {
        let samples = Summary(try Baseline.rawPingPong(rounds: sizes.pingPongRounds, payload: sizes.payload))
        return String(
            format: "p50 %.1f µs  p99 %.1f µs  (min %.1f µs, max %.1f µs)", samples.percentile(0.5) / 1e3,
            samples.percentile(0.99) / 1e3, samples.min / 1e3, samples.max / 1e3)
    }
    return succeeded
}
