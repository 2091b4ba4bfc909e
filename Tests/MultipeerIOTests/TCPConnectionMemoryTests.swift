import Glibc
import MultipeerIO
import TestIsolation
import Testing

@Suite(.measuring) struct TCPConnectionMemoryTests {
    /// Connection pairs the test opens (twice as many descriptors and `TCPConnection`s).
    static let pairs = 1000

    /// Heap bytes per `TCPConnection` the test accepts. A connection that kept a 64 KiB read buffer (as the first
    /// version did) costs more than four times this.
    static let maximumBytesPerConnection = 16 << 10

    /// A measurement below this (bytes per connection) means memory was freed by something else meanwhile: a test
    /// running in parallel released a large buffer. Such a measurement proves nothing and is repeated.
    static let interferenceThreshold = -512

    /// Accepted and connected loopback connections that each received one byte and then sit idle hold no
    /// read buffer of their own: the heap (glibc `mallinfo2`, every arena) grows by well under 16 KiB each.
    ///
    /// Other tests run in parallel in this process and allocate too, so a measurement outside the expected range
    /// is repeated (at most five times) with fresh connections: a real regression fails every attempt, a
    /// neighbour's burst does not recur every time.
    @Test(.enabled(if: heapInUse() != nil, "mallinfo2 is only wired up on x86-64 Linux"))
    func idleConnectionsRetainNoReadBuffer() async throws {
        let descriptors = try raiseDescriptorLimit(to: rlim_t(2 * Self.pairs + 256))
        let pairs = min(Self.pairs, (Int(descriptors) - 256) / 2)
        try #require(pairs >= 200, "RLIMIT_NOFILE \(descriptors) is too low for a meaningful measurement")
        try await withLoop { loop in
            let accepted = Collector<TCPConnection>()
            let connected = Collector<TCPConnection>()
            let received = Collector<UInt8>()
            let address = try await loop.submit {
                let listener = try TCPListener(
                    loop: loop, address: SocketAddress(.v4(.loopback), port: 0), backlog: 1024)
                listener.setAcceptHandler { connection in
                    connection.setHandlers(onData: { received.append(contentsOf: $0) }, onClose: { _ in })
                    accepted.append(connection)
                }
                return try listener.localAddress()
            }
            /// Opens `count` pairs in batches (so the accept queue never overflows) and sends one byte on each.
            func openPairs(_ count: Int) async throws {
                var opened = 0
                while opened < count {
                    let batch = min(100, count - opened)
                    try await loop.submit {
                        for _ in 0..<batch {
                            TCPConnection.connect(to: address, loop: loop) { result in
                                guard case .success(let connection) = result else { return }
                                connection.setHandlers(onData: { _ in }, onClose: { _ in })
                                connection.write([1])
                                connected.append(connection)
                            }
                        }
                    }
                    opened += batch
                    try #require(await eventually { connected.count == opened && accepted.count == opened })
                }
                try #require(await eventually { received.count == count })
            }
            /// Closes every pair and forgets it.
            func closePairs() async throws {
                let all = accepted.removeAll() + connected.removeAll()
                _ = received.removeAll()
                try await loop.submit { for connection in all { connection.close() } }
            }

            // Warm up: the first connections allocate runtime metadata, the loop's shared read buffer and the
            // collectors' first storage, none of which is per connection.
            try await openPairs(32)
            try await closePairs()
            var measured: [Int] = []
            for _ in 0..<5 {
                let before = await quietHeapInUse()
                try await openPairs(pairs)
                let after = await quietHeapInUse()
                try await closePairs()
                let perConnection = (after - before) / (2 * pairs)
                measured.append(perConnection)
                if (Self.interferenceThreshold..<Self.maximumBytesPerConnection).contains(perConnection) { break }
            }
            #expect(
                (Self.interferenceThreshold..<Self.maximumBytesPerConnection).contains(measured.last!),
                "heap bytes per idle connection over \(2 * pairs) connections, by attempt: \(measured)")
        }
    }

    /// The smallest of a few heap samples taken 20 ms apart, so a transient allocation by a test running in
    /// parallel does not count.
    private func quietHeapInUse() async -> Int {
        var smallest = Int.max
        for _ in 0..<5 {
            smallest = min(smallest, heapInUse() ?? 0)
            try? await Task.sleep(for: .milliseconds(20))
        }
        return smallest
    }

    /// Raises the soft `RLIMIT_NOFILE` to `wanted` if it is lower (within the hard limit); returns the soft limit.
    private func raiseDescriptorLimit(to wanted: rlim_t) throws -> rlim_t {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw SystemCallError(call: "getrlimit", errno: errno)
        }
        if limit.rlim_cur >= wanted { return limit.rlim_cur }
        limit.rlim_cur = limit.rlim_max == rlim_t.max ? wanted : min(wanted, limit.rlim_max)
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw SystemCallError(call: "setrlimit", errno: errno)
        }
        return limit.rlim_cur
    }
}
