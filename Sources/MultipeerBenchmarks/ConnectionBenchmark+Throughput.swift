import Foundation
import Multipeer

extension ConnectionBenchmark {
    /// Benchmark 1: bulk throughput over one connection, TLS and plaintext, through a ``PeerStream`` and through
    /// 1 MiB messages, against iperf3 in the same runs.
    func bulkThroughput() throws -> [ConnectionRow] {
        let tls = try peers(.required)
        let plain = try peers(.none)
        let sizes = sizes
        // Warm-up: fault in buffers and code paths of both configurations.
        for peers in [tls, plain] {
            _ = try blockingAwait {
                try await Self.streamThroughput(peers, bytes: sizes.bulkBytes / 4, chunk: sizes.streamChunk)
            }
        }
        var tlsStream: [Double] = []
        var plainStream: [Double] = []
        var tlsMessages: [Double] = []
        var plainMessages: [Double] = []
        var iperf3: [Double] = []
        var tlsStreamOnLoop: [Double] = []
        var plainStreamOnLoop: [Double] = []
        var tlsStreamBorrowing: [Double] = []
        var plainStreamBorrowing: [Double] = []
        var pythonTLS: [Double] = []
        var pythonPlain: [Double] = []
        let paths = try BenchmarkPaths()
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("mp-bench-ssl-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        var sealRates: [Double] = []
        var openRates: [Double] = []
        var ceilings: [Double] = []
        for run in 0..<options.runs {
            try alternate(run) {
                tlsStream.append(
                    try phase("1 stream TLS") {
                        try blockingAwait {
                            try await Self.streamThroughput(tls, bytes: sizes.bulkBytes, chunk: sizes.streamChunk)
                        }
                    })
                plainStream.append(
                    try phase("1 stream plaintext") {
                        try blockingAwait {
                            try await Self.streamThroughput(plain, bytes: sizes.bulkBytes, chunk: sizes.streamChunk)
                        }
                    })
                tlsStreamOnLoop.append(
                    try phase("1 stream TLS, writer and reader on the loops, borrowing read") {
                        try blockingAwait {
                            try await Self.streamThroughput(
                                tls, bytes: sizes.bulkBytes, chunk: sizes.streamChunk, onLoops: true, borrowing: true)
                        }
                    })
                plainStreamOnLoop.append(
                    try phase("1 stream plaintext, writer and reader on the loops, borrowing read") {
                        try blockingAwait {
                            try await Self.streamThroughput(
                                plain, bytes: sizes.bulkBytes, chunk: sizes.streamChunk, onLoops: true,
                                borrowing: true)
                        }
                    })
                tlsStreamBorrowing.append(
                    try phase("1 stream TLS, borrowing read") {
                        try blockingAwait {
                            try await Self.streamThroughput(
                                tls, bytes: sizes.bulkBytes, chunk: sizes.streamChunk, borrowing: true)
                        }
                    })
                plainStreamBorrowing.append(
                    try phase("1 stream plaintext, borrowing read") {
                        try blockingAwait {
                            try await Self.streamThroughput(
                                plain, bytes: sizes.bulkBytes, chunk: sizes.streamChunk, borrowing: true)
                        }
                    })
                tlsMessages.append(
                    try phase("1 messages TLS") {
                        try blockingAwait {
                            try await Self.messageThroughput(tls, bytes: sizes.bulkBytes, message: sizes.bulkMessage)
                        }
                    })
                plainMessages.append(
                    try phase("1 messages plaintext") {
                        try blockingAwait {
                            try await Self.messageThroughput(plain, bytes: sizes.bulkBytes, message: sizes.bulkMessage)
                        }
                    })
            } baseline: {
                iperf3.append(try phase("1 iperf3") { try Baseline.iperf3Throughput(seconds: sizes.iperf3Seconds) })
                pythonTLS.append(
                    try phase("1 python ssl") {
                        try Baseline.pythonBulkThroughput(
                            tls: true, bytes: sizes.bulkBytes, repository: paths.repository, scratch: scratch)
                    })
                pythonPlain.append(
                    try phase("1 python plain") {
                        try Baseline.pythonBulkThroughput(
                            tls: false, bytes: sizes.bulkBytes, repository: paths.repository, scratch: scratch)
                    })
            }
            // What TLS could reach here at best: the receiving thread does the kernel's per-byte work (iperf3's
            // receiver does only that) plus opening the records, so 1 / (1 / iperf3 + 1 / open).
            let rates = phase("1 AES-128-GCM records") { RecordLayerSpeed.measure(bytes: sizes.bulkBytes / 4) }
            sealRates.append(rates.seal)
            openRates.append(rates.open)
            if let last = iperf3.last, rates.open > 0 { ceilings.append(1 / (1 / last + 1 / rates.open)) }
        }
        let mib = sizes.bulkBytes >> 20
        notes.append(
            "1: \(mib) MiB per transfer, stream writes of \(sizes.streamChunk >> 10) KiB, messages of "
                + "\(sizes.bulkMessage >> 20) MiB; iperf3 -t \(sizes.iperf3Seconds), one stream; a new connection "
                + "per transfer; the AES rows seal and open \(mib / 4) MiB of 16 KiB records on one thread with the "
                + "connections' record layer, and the TLS ceiling is 1 / (1 / iperf3 + 1 / open): the receiving "
                + "thread's kernel work (all iperf3's receiver does) plus opening the records, with nothing else")
        return [
            ConnectionRow(
                "1 bulk stream, TLS AES-128-GCM", ours: tlsStream, baseline: iperf3, unit: .bytesPerSecond,
                target: .atLeastTimesBaseline(0.6), baselineName: "iperf3"),
            ConnectionRow(
                "1 bulk stream, plaintext", ours: plainStream, baseline: iperf3, unit: .bytesPerSecond,
                target: .atLeastTimesBaseline(0.85), baselineName: "iperf3"),
            ConnectionRow(
                "1 stream TLS vs Python ssl", ours: tlsStream, baseline: pythonTLS, unit: .bytesPerSecond,
                target: .atLeastTimesBaseline(1.0), baselineName: "Python ssl (SSL_write/SSL_read), two processes"),
            ConnectionRow(
                "1 stream plaintext vs Python sockets", ours: plainStream, baseline: pythonPlain,
                unit: .bytesPerSecond, target: .atLeastTimesBaseline(1.0),
                baselineName: "Python sockets, two processes"),
            ConnectionRow(
                "1 stream TLS, on loops, borrowing, vs Py", ours: tlsStreamOnLoop, baseline: pythonTLS,
                unit: .bytesPerSecond, target: .atLeastTimesBaseline(1.0),
                baselineName: "Python ssl (SSL_write/SSL_read), two processes"),
            ConnectionRow(
                "1 stream plain, on loops, borrowing, vs Py", ours: plainStreamOnLoop, baseline: pythonPlain,
                unit: .bytesPerSecond, target: .atLeastTimesBaseline(1.0),
                baselineName: "Python sockets, two processes"),
            ConnectionRow(
                "1 stream TLS, borrowing read, vs Python", ours: tlsStreamBorrowing, baseline: pythonTLS,
                unit: .bytesPerSecond, target: .atLeastTimesBaseline(1.0),
                baselineName: "Python ssl (SSL_write/SSL_read), two processes"),
            ConnectionRow(
                "1 stream plain, borrowing read, vs Python", ours: plainStreamBorrowing, baseline: pythonPlain,
                unit: .bytesPerSecond, target: .atLeastTimesBaseline(1.0),
                baselineName: "Python sockets, two processes"),
            ConnectionRow(
                "1 bulk 1 MiB messages, TLS", ours: tlsMessages, baseline: iperf3, unit: .bytesPerSecond,
                target: .atLeastTimesBaseline(0.6), baselineName: "iperf3"),
            ConnectionRow(
                "1 bulk 1 MiB messages, plaintext", ours: plainMessages, baseline: iperf3, unit: .bytesPerSecond,
                target: .atLeastTimesBaseline(0.85), baselineName: "iperf3"),
            ConnectionRow(
                "1 (AES-128-GCM seal, one thread)", ours: sealRates, baseline: iperf3, unit: .bytesPerSecond,
                baselineName: "iperf3"),
            ConnectionRow(
                "1 (AES-128-GCM open, one thread)", ours: openRates, baseline: iperf3, unit: .bytesPerSecond,
                baselineName: "iperf3"),
            ConnectionRow(
                "1 (TLS ceiling: iperf3 + open)", ours: ceilings, baseline: iperf3, unit: .bytesPerSecond,
                baselineName: "iperf3"),
        ]
    }

    /// Sends `bytes` through a new stream in `chunk`-byte writes; the acceptor reads them into one reused array
    /// (``PeerStream/read(into:maximumCount:)``), or with `borrowing` looks at them in place
    /// (``PeerStream/read(maximumCount:borrowing:)``, as Python's `recv_into` has the kernel fill its one buffer),
    /// and counts them.
    /// - Returns: Bytes per second, from just before the first write to the read that completed the count.
    static func streamThroughput(
        _ peers: LoopbackPeers, bytes: Int, chunk: Int, onLoops: Bool = false, borrowing: Bool = false
    ) async throws -> Double {
        try await peers.withPair { dialer, acceptor in
            let stream = try await dialer.openStream(name: "bulk")
            // With `onLoops`, the reader runs on the acceptor's event loop (README: the low-latency way), so the
            // bytes reach it without a thread hand-off (and the writer on the dialer's, below).
            let receiver = Task(executorPreference: onLoops ? acceptor.eventLoop : nil) { () throws -> UInt64 in
                var streams = acceptor.incomingStreams.makeAsyncIterator()
                guard let incoming = await streams.next() else { throw BenchmarkError("no stream arrived") }
                var received = 0
                var end: UInt64 = 0
                // The fast way to read bulk data: one array, reused (iperf3 reads into one buffer too).
                var buffer: [UInt8] = []
                while true {
                    let count =
                        borrowing
                        ? try await incoming.read(borrowing: { $0.count }) ?? 0
                        : try await incoming.read(into: &buffer)
                    if count == 0 { break }
                    received += count
                    if received >= bytes && end == 0 { end = BaselineSocket.nanoseconds() }
                }
                guard received == bytes else { throw BenchmarkError("stream carried \(received) of \(bytes) bytes") }
                return end
            }
            // With `onLoops`, the writer runs on the dialer's loop too: two threads carry the transfer, as in the
            // two single-threaded Python processes.
            let writer = Task(executorPreference: onLoops ? dialer.eventLoop : nil) { () throws -> UInt64 in
                let block = [UInt8](repeating: 0x5a, count: chunk)
                let start = BaselineSocket.nanoseconds()
                var sent = 0
                while sent < bytes {
                    let count = min(chunk, bytes - sent)
                    try await stream.write(count == chunk ? block : Array(block[..<count]))
                    sent += count
                }
                try await stream.finish()
                return start
            }
            let start = try await writer.value
            let end = try await receiver.value
            return Double(bytes) / Baseline.seconds(from: start, to: end)
        }
    }

    /// Sends `bytes` as `message`-byte messages; the acceptor takes them from `messages` and counts the bytes.
    /// - Returns: Bytes per second, from just before the first send to the arrival of the last message.
    static func messageThroughput(_ peers: LoopbackPeers, bytes: Int, message: Int) async throws -> Double {
        try await peers.withPair { dialer, acceptor in
            let receiver = Task { () throws -> UInt64 in
                var messages = acceptor.messages.makeAsyncIterator()
                var received = 0
                while received < bytes {
                    guard let next = await messages.next() else {
                        throw BenchmarkError("the connection ended after \(received) of \(bytes) bytes")
                    }
                    received += next.count
                }
                return BaselineSocket.nanoseconds()
            }
            let block = [UInt8](repeating: 0xa5, count: message)
            let start = BaselineSocket.nanoseconds()
            var sent = 0
            while sent < bytes {
                let count = min(message, bytes - sent)
                try await dialer.send(count == message ? block : Array(block[..<count]))
                sent += count
            }
            let end = try await receiver.value
            return Double(bytes) / Baseline.seconds(from: start, to: end)
        }
    }
}
