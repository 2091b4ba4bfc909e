import Multipeer

extension ConnectionBenchmark {
    /// Benchmark 2: 64-byte messages one way over TLS, counted at the receiver, against the raw framed pump.
    func smallMessages() throws -> [ConnectionRow] {
        let tls = try peers(.required)
        let sizes = sizes
        _ = try blockingAwait { try await Self.messageRate(tls, count: 100_000, payload: sizes.payload) }
        var ours: [Double] = []
        var raw: [Double] = []
        for run in 0..<options.runs {
            try alternate(run) {
                ours.append(
                    try phase("2 messages TLS") {
                        try blockingAwait {
                            try await Self.messageRate(tls, count: sizes.smallMessages, payload: sizes.payload)
                        }
                    })
            } baseline: {
                raw.append(
                    try phase("2 raw framed pump") {
                        try Baseline.rawFramedMessageRate(count: sizes.framedMessages, payload: sizes.payload)
                    })
            }
        }
        notes.append(
            "2: \(sizes.smallMessages) messages of \(sizes.payload) B per run over TLS (one sending task, "
                + "`for await` at the receiver); raw framed pump: \(sizes.framedMessages) frames, no TLS")
        return [
            ConnectionRow(
                "2 64 B messages, TLS", ours: ours, baseline: raw, unit: .messagesPerSecond,
                target: .atLeast(1_000_000), baselineName: "raw framed pump")
        ]
    }

    /// Sends `count` messages of `payload` bytes from one task in a tight loop of `send`; the acceptor takes them
    /// with `for await` and counts them.
    /// - Returns: Messages per second, from just before the first send to the arrival of the last message.
    static func messageRate(_ peers: LoopbackPeers, count: Int, payload: Int) async throws -> Double {
        try await peers.withPair { dialer, acceptor in
            let receiver = Task { () throws -> UInt64 in
                var received = 0
                for await _ in acceptor.messages {
                    received += 1
                    if received == count { return BaselineSocket.nanoseconds() }
                }
                throw BenchmarkError("the connection ended after \(received) of \(count) messages")
            }
            let message = [UInt8](repeating: 0x42, count: payload)
            let start = BaselineSocket.nanoseconds()
            for _ in 0..<count { try await dialer.send(message) }
            let end = try await receiver.value
            return Double(count) / Baseline.seconds(from: start, to: end)
        }
    }

    /// Benchmark 3: round trips of a 64-byte message (sent, echoed by a task on the acceptor) and of `ping()`,
    /// against the raw ping-pong.
    func roundTrips() throws -> [ConnectionRow] {
        let tls = try peers(.required)
        let sizes = sizes
        var messageP50: [Double] = []
        var messageP99: [Double] = []
        var pingP50: [Double] = []
        var pingP99: [Double] = []
        var hopP50: [Double] = []
        var loopP50: [Double] = []
        var loopP99: [Double] = []
        var rawP50: [Double] = []
        var rawP99: [Double] = []
        for run in 0..<options.runs {
            try alternate(run) {
                let (messages, pings, hops) = try phase("3 round trips TLS") {
                    try blockingAwait {
                        try await Self.roundTrips(tls, rounds: sizes.roundTrips, payload: sizes.payload, warmup: 1000)
                    }
                }
                let messageSummary = Summary(messages)
                messageP50.append(messageSummary.percentile(0.5))
                messageP99.append(messageSummary.percentile(0.99))
                let pingSummary = Summary(pings)
                pingP50.append(pingSummary.percentile(0.5))
                pingP99.append(pingSummary.percentile(0.99))
                hopP50.append(Summary(hops).percentile(0.5))
                let onLoops = Summary(
                    try phase("3 round trips TLS, tasks on the loops") {
                        try blockingAwait {
                            try await Self.loopRoundTrips(
                                tls, rounds: sizes.roundTrips, payload: sizes.payload, warmup: 1000)
                        }
                    })
                loopP50.append(onLoops.percentile(0.5))
                loopP99.append(onLoops.percentile(0.99))
            } baseline: {
                let raw = Summary(
                    try phase("3 raw ping-pong") {
                        try Baseline.rawPingPong(rounds: sizes.roundTrips, payload: sizes.payload)
                    }
                )
                rawP50.append(raw.percentile(0.5))
                rawP99.append(raw.percentile(0.99))
            }
        }
        notes.append(
            "3: per run \(sizes.roundTrips) recorded round trips (after 1000 unrecorded) of each kind over one TLS "
                + "connection (\"tasks on loops\": a second connection whose echo task and measuring task run with "
                + "executorPreference: connection.eventLoop); rows show the median over runs of each run's p50 or p99; "
                + "baseline: raw ping-pong, TCP_NODELAY, blocking sockets")
        return [
            ConnectionRow(
                "3 message round trip p50, TLS", ours: messageP50, baseline: rawP50, unit: .microseconds,
                target: .atMostTimesBaseline(2), baselineName: "raw ping-pong p50"),
            ConnectionRow(
                "3 message round trip p99, TLS", ours: messageP99, baseline: rawP99, unit: .microseconds,
                baselineName: "raw ping-pong p99"),
            ConnectionRow(
                "3 message round trip p50, tasks on loops", ours: loopP50, baseline: rawP50, unit: .microseconds,
                target: .atMostTimesBaseline(2), baselineName: "raw ping-pong p50"),
            ConnectionRow(
                "3 message round trip p99, tasks on loops", ours: loopP99, baseline: rawP99, unit: .microseconds,
                baselineName: "raw ping-pong p99"),
            ConnectionRow(
                "3 ping() round trip p50, TLS", ours: pingP50, baseline: rawP50, unit: .microseconds,
                target: .atMostTimesBaseline(2), baselineName: "raw ping-pong p50"),
            ConnectionRow(
                "3 ping() round trip p99, TLS", ours: pingP99, baseline: rawP99, unit: .microseconds,
                baselineName: "raw ping-pong p99"),
            ConnectionRow("3 (task -> loop -> task hop p50)", ours: hopP50, unit: .microseconds),
        ]
    }

    /// On one new connection: `warmup + rounds` message round trips as in ``roundTrips(_:rounds:payload:warmup:)``,
    /// but the echo task runs on the acceptor's event loop and the measuring task on the dialer's
    /// (`Task(executorPreference: connection.eventLoop)`), as an application that wants the lowest latency would
    /// run them.
    /// - Returns: The recorded round trips in nanoseconds.
    static func loopRoundTrips(_ peers: LoopbackPeers, rounds: Int, payload: Int, warmup: Int) async throws
        -> [UInt64]
    {
        try await peers.withPair { dialer, acceptor in
            let echo = startEcho(acceptor, on: acceptor.eventLoop)
            let measured = Task(executorPreference: dialer.eventLoop) {
                try await timedEchoes(dialer, rounds: rounds, payload: payload, warmup: warmup)
            }
            let times = try await measured.value
            _ = echo
            return times
        }
    }

    /// A task (on `executor`, if given) that sends every message of `acceptor` back; it ends with the connection.
    static func startEcho(_ acceptor: PeerConnection, on executor: (any TaskExecutor)?) -> Task<Void, Never> {
        Task(executorPreference: executor) {
            for await message in acceptor.messages {
                do { try await acceptor.send(message) } catch { break }
            }
        }
    }

    /// `warmup + rounds` round trips of a `payload`-byte message from `dialer` (whose peer echoes them), each timed
    /// from just before `send` to the echo taken from a `messages` iterator.
    /// - Returns: The last `rounds` round trips in nanoseconds.
    static func timedEchoes(_ dialer: PeerConnection, rounds: Int, payload: Int, warmup: Int) async throws
        -> [UInt64]
    {
        var replies = dialer.messages.makeAsyncIterator()
        var message = [UInt8](repeating: 0x42, count: payload)
        var times: [UInt64] = []
        times.reserveCapacity(rounds)
        for round in 0..<(warmup + rounds) {
            message[0] = UInt8(truncatingIfNeeded: round)
            let start = BaselineSocket.nanoseconds()
            try await dialer.send(message)
            guard let reply = await replies.next() else {
                throw BenchmarkError("the connection ended at round trip \(round)")
            }
            let took = nanosecondsSince(start)
            guard reply.count == payload, reply[0] == message[0] else {
                throw BenchmarkError("wrong echo at round trip \(round)")
            }
            if round >= warmup { times.append(took) }
        }
        return times
    }

    /// On one new connection: `warmup + rounds` message round trips (a task on the acceptor echoes every message
    /// with `send`; the dialer waits for the echo with an iterator of `messages`), then as many `ping()` calls.
    /// Last, as many empty `EventLoop.submit` calls to the dialer's loop: the cost of one task → loop → task hop
    /// (two thread hand-offs). A message round trip makes two such hops (the sender's, the echoing task's) plus
    /// two loop-to-loop socket legs; a `ping()` makes one hop plus the two legs.
    /// - Returns: The recorded round trips in nanoseconds, messages, pings and hops, each timed around the caller's
    ///   `send` + `next()`, `ping()` or `submit`.
    static func roundTrips(
        _ peers: LoopbackPeers, rounds: Int, payload: Int, warmup: Int
    ) async throws -> (messages: [UInt64], pings: [UInt64], hops: [UInt64]) {
        try await peers.withPair { dialer, acceptor in
            let echo = startEcho(acceptor, on: nil)
            let messages = try await timedEchoes(dialer, rounds: rounds, payload: payload, warmup: warmup)
            var pings: [UInt64] = []
            pings.reserveCapacity(rounds)
            for round in 0..<(warmup + rounds) {
                let start = BaselineSocket.nanoseconds()
                _ = try await dialer.ping()
                let took = nanosecondsSince(start)
                if round >= warmup { pings.append(took) }
            }
            var hops: [UInt64] = []
            hops.reserveCapacity(rounds)
            let loop = peers.dialerLoop
            for round in 0..<(warmup + rounds) {
                let start = BaselineSocket.nanoseconds()
                _ = try await loop.submit { 0 }
                let took = nanosecondsSince(start)
                if round >= warmup { hops.append(took) }
            }
            _ = echo
            return (messages, pings, hops)
        }
    }
}
