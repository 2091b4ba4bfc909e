import Multipeer

#if canImport(Glibc)
    import Glibc
#endif

extension ConnectionBenchmark {
    /// What one idle-memory run found.
    struct IdleMemory: Sendable {
        /// Heap growth (glibc `mallinfo2`, `uordblks + hblkhd`) per established pair (both ends).
        let heapPerPair: Double
        /// Resident set growth per pair (page granularity).
        let rssPerPair: Double
        /// Seconds it took to establish the pairs.
        let establishSeconds: Double
    }

    /// Warm-up pairs kept open through each measurement.
    static let memoryWarmupPairs = 32
    /// Handshakes in flight at once while benchmark 5 opens its pairs (well below the listener's 128).
    static let memoryConnectWidth = 8

    /// Benchmark 5: heap growth per idle established TLS connection, both ends in this process.
    func idleMemory() throws -> [ConnectionRow] {
        let pairs = sizes.idlePairs
        // Per pair: the dialer's TCP socket and its own UDP endpoint, the acceptor's TCP socket.
        let limit = try raiseDescriptorLimit(atLeast: 3 * (pairs + Self.memoryWarmupPairs) + 256)
        let tls = try peers(.required)
        let plain = try peers(.none)
        var perPair: [Double] = []
        var rss: [Double] = []
        var establish: [Double] = []
        var plainPerPair: [Double] = []
        for _ in 0..<options.runs {
            let result = try phase("5 idle memory TLS") {
                try blockingAwait {
                    try await Self.measureIdleMemory(tls, pairs: pairs, warmup: Self.memoryWarmupPairs)
                }
            }
            perPair.append(result.heapPerPair)
            rss.append(result.rssPerPair)
            establish.append(result.establishSeconds)
            let plainResult = try phase("5 idle memory plaintext") {
                try blockingAwait {
                    try await Self.measureIdleMemory(plain, pairs: pairs, warmup: Self.memoryWarmupPairs)
                }
            }
            plainPerPair.append(plainResult.heapPerPair)
        }
        let establishMedian = String(format: "%.2f", Summary(establish).median)
        notes.append(
            "5: \(pairs) idle TLS pairs per run, then as many plaintext pairs (2 x \(pairs) PeerConnection "
                + "objects, one per end, both in this process), measured 1 s after the last was established, "
                + "after \(Self.memoryWarmupPairs) warm-up pairs that stay open; heap = glibc mallinfo2 "
                + "uordblks+hblkhd (every arena, OpenSSL's allocations included); RLIMIT_NOFILE \(limit); "
                + "establishing the TLS pairs, \(Self.memoryConnectWidth) handshakes at a time, took "
                + "\(establishMedian) s (median)")
        return [
            ConnectionRow(
                "5 heap per idle TLS connection (2 ends)", ours: perPair, unit: .kibibytes,
                target: .atMost(64 * 1024)),
            ConnectionRow("5 heap per idle TLS connection end", ours: perPair.map { $0 / 2 }, unit: .kibibytes),
            ConnectionRow("5 RSS per idle TLS connection (2 ends)", ours: rss, unit: .kibibytes),
            ConnectionRow("5 heap per idle plaintext conn. (2 ends)", ours: plainPerPair, unit: .kibibytes),
        ]
    }

    /// Establishes `warmup` pairs, measures the heap, establishes `pairs` more (``memoryConnectWidth`` handshakes
    /// at a time), waits a second, measures again, then closes everything.
    static func measureIdleMemory(_ peers: LoopbackPeers, pairs: Int, warmup: Int) async throws -> IdleMemory {
        var connections: [PeerConnection] = []
        connections.reserveCapacity(2 * (pairs + warmup))
        defer {
            // Abort whatever is left if a connect failed; normally everything was closed below.
            for connection in connections where connection.closeReason == nil { connection.abort() }
        }
        for _ in 0..<warmup {
            let (dialer, acceptor) = try await peers.connectPair()
            connections += [dialer, acceptor]
        }
        try await Task.sleep(for: .milliseconds(500))
        guard let heapBefore = CacheMemoryBenchmark.heapInUse() else {
            throw BenchmarkError("mallinfo2 is only wired up on x86-64 Linux")
        }
        let rssBefore = CacheMemoryBenchmark.residentBytes()
        let start = BaselineSocket.nanoseconds()
        connections += try await connectDialers(peers, count: pairs, concurrently: memoryConnectWidth)
        // The listener's stream buffers the other ends; take them all.
        for _ in 0..<pairs { connections.append(try await peers.accepted()) }
        let establishSeconds = Double(nanosecondsSince(start)) / 1e9
        try await Task.sleep(for: .seconds(1))
        guard let heapAfter = CacheMemoryBenchmark.heapInUse() else {
            throw BenchmarkError("mallinfo2 is only wired up on x86-64 Linux")
        }
        let rssAfter = CacheMemoryBenchmark.residentBytes()
        if let closed = connections.first(where: { $0.closeReason != nil })?.closeReason {
            throw BenchmarkError("an idle connection closed during the measurement: \(closed)")
        }
        await withTaskGroup(of: Void.self) { group in
            for connection in connections { group.addTask { await connection.close() } }
        }
        return IdleMemory(
            heapPerPair: Double(heapAfter - heapBefore) / Double(pairs),
            rssPerPair: Double(rssAfter - rssBefore) / Double(pairs), establishSeconds: establishSeconds)
    }

    /// Connects `count` dialers to the listener, at most `width` handshakes at a time.
    /// - Returns: The dialers' ends, in the order they were established.
    static func connectDialers(_ peers: LoopbackPeers, count: Int, concurrently width: Int) async throws
        -> [PeerConnection]
    {
        try await withThrowingTaskGroup(of: PeerConnection.self) { group in
            var dialers: [PeerConnection] = []
            dialers.reserveCapacity(count)
            var started = 0
            while started < min(width, count) {
                group.addTask { try await peers.connect() }
                started += 1
            }
            while let dialer = try await group.next() {
                dialers.append(dialer)
                if started < count {
                    group.addTask { try await peers.connect() }
                    started += 1
                }
            }
            return dialers
        }
    }

    /// Raises the soft `RLIMIT_NOFILE` to at least `needed` descriptors (within the hard limit).
    /// - Returns: The soft limit now in force.
    /// - Throws: ``BenchmarkError`` if the hard limit is below `needed`.
    func raiseDescriptorLimit(atLeast needed: Int) throws -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw BenchmarkError("getrlimit(RLIMIT_NOFILE) failed (errno \(errno))")
        }
        if limit.rlim_cur >= rlim_t(needed) { return Int(limit.rlim_cur) }
        guard limit.rlim_max >= rlim_t(needed) else {
            throw BenchmarkError("RLIMIT_NOFILE hard limit \(limit.rlim_max) is below the \(needed) descriptors needed")
        }
        limit.rlim_cur = rlim_t(needed)
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw BenchmarkError("setrlimit(RLIMIT_NOFILE, \(needed)) failed (errno \(errno))")
        }
        return needed
    }
}
