import Multipeer

#if canImport(Glibc)
    import Glibc
#endif

extension ConnectionBenchmark {
    /// Benchmark 4: time from just before `PeerConnection.connect` until both ends have the established
    /// connection, TLS and plaintext, against a raw TCP connect + accept.
    func connectTime() throws -> [ConnectionRow] {
        let tls = try peers(.required)
        let plain = try peers(.none)
        let count = sizes.connects
        for peers in [tls, plain] { _ = try blockingAwait { try await Self.connectTimes(peers, count: 10) } }
        var tlsMedians: [Double] = []
        var plainMedians: [Double] = []
        var rawMedians: [Double] = []
        var tlsAll: [UInt64] = []
        for run in 0..<options.runs {
            try alternate(run) {
                let tlsTimes = try phase("4 connect TLS") {
                    try blockingAwait { try await Self.connectTimes(tls, count: count) }
                }
                tlsAll += tlsTimes
                tlsMedians.append(Summary(tlsTimes).median)
                let plainTimes = try phase("4 connect plaintext") {
                    try blockingAwait { try await Self.connectTimes(plain, count: count) }
                }
                plainMedians.append(Summary(plainTimes).median)
            } baseline: {
                rawMedians.append(
                    Summary(try phase("4 raw connect") { try Baseline.rawConnectTimes(count: count) }).median)
            }
        }
        let all = Summary(tlsAll)
        notes.append(
            "4: \(count) connects per run and configuration, one after another, each closed (gracefully, both ends "
                + "waited for) before the next; rows show the median over runs of each run's median; TLS over all "
                + String(
                    format: "%d connects: p90 %.3f ms, p99 %.3f ms, max %.3f ms", all.count, all.p90 / 1e6,
                    all.percentile(0.99) / 1e6, all.max / 1e6))
        return [
            ConnectionRow(
                "4 connect, TLS (both ends established)", ours: tlsMedians, baseline: rawMedians,
                unit: .milliseconds, target: .atMost(5_000_000), baselineName: "raw TCP connect+accept"),
            ConnectionRow(
                "4 connect, plaintext", ours: plainMedians, baseline: rawMedians, unit: .milliseconds,
                target: .atMost(5_000_000), baselineName: "raw TCP connect+accept"),
        ]
    }

    /// `count` connects one after another; each is timed from just before `PeerConnection.connect` until the
    /// dialer has returned and the listener has yielded the other end, then closed before the next.
    /// - Returns: The times in nanoseconds.
    static func connectTimes(_ peers: LoopbackPeers, count: Int) async throws -> [UInt64] {
        var samples: [UInt64] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = BaselineSocket.nanoseconds()
            let dialer = try await peers.connect()
            let acceptor = try await peers.accepted()
            samples.append(nanosecondsSince(start))
            await dialer.close()
            _ = await acceptor.closed()
        }
        return samples
    }
}

extension Baseline {
    /// Raw TCP connection set-up on 127.0.0.1: blocking `connect` to a listening socket and then `accept` of the
    /// new connection, both on the calling thread, timed from just before `socket()` of the connecting side to
    /// the return of `accept`. Both sockets are closed before the next connect.
    /// - Parameter count: How many connections.
    /// - Returns: Each set-up time in nanoseconds.
    /// - Throws: ``BenchmarkError`` from a socket call.
    static func rawConnectTimes(count: Int) throws -> [UInt64] {
        let (listener, port) = try BaselineSocket.listen(backlog: 64)
        defer { close(listener) }
        var samples: [UInt64] = []
        samples.reserveCapacity(count)
        for _ in 0..<count {
            let start = BaselineSocket.nanoseconds()
            let client = try BaselineSocket.connect(port: port)
            let server: Int32
            do {
                server = try BaselineSocket.accept(listener)
            } catch {
                close(client)
                throw error
            }
            samples.append(BaselineSocket.nanoseconds() &- start)
            close(client)
            close(server)
        }
        return samples
    }
}
