import Glibc
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@Suite(.ownThread) struct TCPConnectionTests {
    /// Outcome of `onClose`: `"orderly"` or the error's description.
    static func describe(_ error: SystemCallError?) -> String { error.map { "\($0)" } ?? "orderly" }

    @Test(arguments: [AddressFamily.ipv4, .ipv6])
    func echoesOneMebibyteBothWaysAndClosesOrderly(_ family: AddressFamily) async throws {
        let loopback: IPAddress = family == .ipv4 ? .v4(.loopback) : .v6(.loopback)
        let payload = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
        try await withLoop { loop in
            let serverClosed = Collector<String>()
            let clientClosed = Collector<String>()
            let echoed = Collector<UInt8>()
            let addresses = Collector<SocketAddress>()
            let listenAddress = try await loop.submit {
                let listener = try TCPListener(loop: loop, address: SocketAddress(loopback, port: 0))
                listener.setAcceptHandler { connection in
                    addresses.append(connection.remoteAddress)
                    connection.setHandlers(
                        onData: { connection.write($0) },
                        onClose: { serverClosed.append(Self.describe($0)) })
                }
                return try listener.localAddress()
            }
            try await loop.submit {
                TCPConnection.connect(to: listenAddress, loop: loop) { result in
                    guard case .success(let connection) = result else {
                        clientClosed.append("connect failed: \(result)")
                        return
                    }
                    addresses.append(connection.localAddress)
                    connection.setHandlers(
                        onData: { echoed.append(contentsOf: $0) },
                        onClose: { clientClosed.append(Self.describe($0)) })
                    connection.write(payload)
                    connection.shutdownWrite()
                }
            }
            #expect(await eventually(timeout: .seconds(30)) { clientClosed.count == 1 })
            #expect(clientClosed.values == ["orderly"])
            #expect(await eventually { serverClosed.count == 1 })
            #expect(serverClosed.values == ["orderly"])
            #expect(echoed.count == payload.count)
            #expect(byteDifference(echoed.values, payload) == nil)
            // The server saw the client's local address as the remote end.
            let seen = addresses.values
            #expect(seen.count == 2 && seen[0] == seen[1])
        }
    }

    @Test func connectingToAClosedPortFailsWithECONNREFUSED() async throws {
        try await withLoop { loop in
            let failures = Collector<SystemCallError>()
            // A port held by a socket that is bound but does not listen: a connect to it is refused, and no
            // socket of a test running beside this one can take the port meanwhile (a freed port could be bound
            // again, or even be picked as this connect's own local port, which connects it to itself).
            let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            #expect(holder >= 0)
            defer { close(holder) }
            var bound = loopbackSockaddr()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &bound) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(holder, $0, length) == 0 ? getsockname(holder, $0, &length) : -1
                }
            }
            #expect(named == 0, "bind/getsockname: errno \(errno)")
            let address = SocketAddress(.v4(.loopback), port: UInt16(bigEndian: bound.sin_port))
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    if case .failure(let error) = result { failures.append(error) }
                }
            }
            #expect(await eventually { failures.count == 1 })
            #expect(failures.values.first?.call == "connect")
            #expect(failures.values.first?.errno == ECONNREFUSED)
        }
    }

    @Test func pausedReaderAppliesBackpressureUntilResumed() async throws {
        let total = 16 << 20
        try await withLoop { loop in
            let serverReceived = Lock<Int>(0)
            let server = Collector<TCPConnection>()
            let client = Collector<TCPConnection>()
            let writable = Collector<Int>()
            let address = try await Self.listenPaused(loop: loop, accepted: server) { bytes in
                serverReceived.withLock { $0 += bytes.count }
            }
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    guard case .success(let connection) = result else { return }
                    connection.setHandlers(onData: { _ in }, onClose: { _ in })
                    connection.setWritabilityHandler(lowWatermark: 64 << 10) {
                        writable.append(connection.bufferedByteCount)
                    }
                    connection.write([UInt8](repeating: 0xab, count: total))
                    client.append(connection)
                }
            }
            #expect(await eventually { server.count == 1 && client.count == 1 })
            // Give the kernel time to fill both socket buffers; nothing may reach the paused reader.
            try await Task.sleep(for: .milliseconds(200))
            let (received, buffered) = try await loop.submit {
                (serverReceived.withLock { $0 }, client.values[0].bufferedByteCount)
            }
            #expect(received == 0)
            #expect(buffered > 0)
            #expect(writable.count == 0)

            try await loop.submit { server.values[0].resumeReading() }
            #expect(await eventually(timeout: .seconds(30)) { serverReceived.withLock { $0 } == total })
            #expect(await eventually { writable.count == 1 })
            #expect(writable.values.first.map { $0 < 64 << 10 } == true)
            let remaining = try await loop.submit {
                defer {
                    client.values[0].close()
                    server.values[0].close()
                }
                return client.values[0].bufferedByteCount
            }
            #expect(remaining == 0)
        }
    }

    /// A loopback listener whose connections start with reading paused, read through `onBytes` once resumed,
    /// and are collected in `accepted`.
    static func listenPaused(
        loop: EventLoop, accepted: Collector<TCPConnection>,
        onBytes: @escaping @Sendable (UnsafeRawBufferPointer) -> Void
    ) async throws -> SocketAddress {
        try await loop.submit {
            let listener = try TCPListener(loop: loop, address: SocketAddress(.v4(.loopback), port: 0))
            listener.setAcceptHandler { connection in
                connection.pauseReading()
                connection.setHandlers(onBytes: onBytes, onClose: { _ in })
                accepted.append(connection)
            }
            return try listener.localAddress()
        }
    }

    @Test(arguments: [false, true])
    func writesFromBorrowedMemoryArriveIntactThroughABlockedSocket(gathering: Bool) async throws {
        // Writes from the caller's memory send what the kernel takes and copy only the rest; the reader sees
        // the loop's read buffer (onBytes). 8 MiB in 1 MiB writes from one reused buffer, whose contents change
        // after every write, against a reader that starts paused: nothing may be lost, reordered or aliased.
        // Gathering writes send each 1 MiB as buffers of uneven sizes (an empty one too) in one sendmsg, so the
        // kernel stops in the middle of one of them.
        let writes = 8
        let chunk = 1 << 20
        try await withLoop { loop in
            let received = Lock<[UInt8]>([])
            let server = Collector<TCPConnection>()
            let address = try await Self.listenPaused(loop: loop, accepted: server) { bytes in
                received.withLock { $0.append(contentsOf: bytes) }
            }
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    guard case .success(let connection) = result else { return }
                    connection.setHandlers(onData: { _ in }, onClose: { _ in })
                    var buffer = [UInt8](repeating: 0, count: chunk)
                    for write in 0..<writes {
                        for index in buffer.indices { buffer[index] = UInt8(truncatingIfNeeded: index &+ write) }
                        buffer.withUnsafeBytes { bytes in
                            guard gathering else { return connection.write(bytes) }
                            let cuts = [0, 1, 13, 13, 4096, 300_000, 700_001, bytes.count]
                            let segments = zip(cuts, cuts.dropFirst()).map {
                                UnsafeRawBufferPointer(rebasing: bytes[$0..<$1])
                            }
                            segments.withUnsafeBufferPointer { connection.write(gathering: $0) }
                        }
                    }
                }
            }
            #expect(await eventually { server.count == 1 })
            try await loop.submit { server.values[0].resumeReading() }
            #expect(await eventually(timeout: .seconds(30)) { received.withLock { $0.count } == writes * chunk })
            let bytes = received.withLock { $0 }
            var mismatches = 0
            for write in 0..<writes {
                for index in stride(from: 0, to: chunk, by: 4099)
                where bytes[write * chunk + index] != UInt8(truncatingIfNeeded: index &+ write) {
                    mismatches += 1
                }
            }
            #expect(mismatches == 0)
            try await loop.submit { server.values[0].close() }
        }
    }

    @Test func directReadsFillTheOwnersMemoryFirstAndHandOverTheRestInOrder() async throws {
        // The receiver offers its own memory (of varying sizes, sometimes none, sometimes empty) before every
        // read; bytes must arrive there first, then in onBytes, and together make up the stream exactly.
        let total = 3 << 20
        try await withLoop { loop in
            final class Receiver: @unchecked Sendable {
                // Loop thread only until `done`; read by the test after.
                var pieces: [[UInt8]] = []
                var direct = 0
                var reads = 0
                var offers = 0
                var fills = 0
                /// Whether the current read's offer was left partly empty: nothing of that read may then reach
                /// `onBytes` (the offer is filled first).
                var shortFill = false
                var bytesPastAShortFill = 0
                var offered: UnsafeMutableRawBufferPointer?
                let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: 70_000, alignment: 16)
                deinit { memory.deallocate() }
            }
            let receiver = Receiver()
            let received = Lock(0)
            let server = Collector<TCPConnection>()
            let address = try await Self.listenPaused(loop: loop, accepted: server) { bytes in
                if receiver.shortFill { receiver.bytesPastAShortFill += bytes.count }
                receiver.pieces.append(Array(bytes))
                received.withLock { $0 += bytes.count }
            }
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    guard case .success(let connection) = result else { return }
                    connection.setHandlers(onData: { _ in }, onClose: { _ in })
                    connection.write((0..<total).map { UInt8(truncatingIfNeeded: $0 &* 5 &+ $0 >> 16) })
                    connection.shutdownWrite()  // the server's last read, memory offered or not, is the end
                }
            }
            #expect(await eventually { server.count == 1 })
            try await loop.submit {
                let connection = server.values[0]
                connection.setDirectReads(
                    target: {
                        receiver.reads += 1
                        receiver.shortFill = false
                        switch receiver.reads % 4 {
                        case 0: return nil
                        case 1: receiver.offered = UnsafeMutableRawBufferPointer(start: nil, count: 0)
                        case 2: receiver.offered = UnsafeMutableRawBufferPointer(rebasing: receiver.memory[..<13])
                        default: receiver.offered = receiver.memory
                        }
                        if receiver.offered != nil { receiver.offers += 1 }
                        return receiver.offered
                    },
                    filled: { count in
                        let offered = receiver.offered!
                        #expect(count <= offered.count)
                        receiver.shortFill = count < offered.count
                        receiver.pieces.append(Array(UnsafeRawBufferPointer(rebasing: offered[..<count])))
                        receiver.direct += count
                        receiver.fills += 1
                        received.withLock { $0 += count }
                        receiver.offered = nil
                    })
                connection.resumeReading()
            }
            #expect(await eventually(timeout: .seconds(30)) { received.withLock { $0 } == total })
            try await loop.submit {
                let expected = (0..<total).map { UInt8(truncatingIfNeeded: $0 &* 5 &+ $0 >> 16) }
                #expect(receiver.pieces.flatMap { $0 } == expected)
                // Some bytes went straight to the owner's memory, and none of a read went past an offer it had not
                // filled. (How many go direct depends on how much each read finds waiting: not checked.)
                #expect(receiver.direct > 0)
                #expect(receiver.bytesPastAShortFill == 0)
                // Every offer was answered exactly once, the end of the stream included.
                #expect(receiver.offers == receiver.fills && receiver.offers > 0)
                server.values[0].close()
            }
        }
    }

    @Test func peerResetIsReportedAsAnError() async throws {
        try await withLoop { loop in
            let clientClosed = Collector<String>()
            let address = try await loop.submit {
                let listener = try TCPListener(loop: loop, address: SocketAddress(.v4(.loopback), port: 0))
                listener.setAcceptHandler { connection in
                    // Unread data at close makes the kernel send RST instead of FIN.
                    connection.setHandlers(onData: { _ in connection.close() }, onClose: { _ in })
                }
                return try listener.localAddress()
            }
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    guard case .success(let connection) = result else { return }
                    connection.setHandlers(onData: { _ in }, onClose: { clientClosed.append(Self.describe($0)) })
                    connection.write([UInt8](repeating: 1, count: 1 << 20))
                }
            }
            #expect(await eventually { clientClosed.count == 1 })
            #expect(clientClosed.values.first != "orderly")
        }
    }
}

@Suite struct TCPConnectionShutdownTests {
    @Test func aConnectStillInProgressWhenTheLoopShutsDownFailsWithECANCELED() async throws {
        // A listener that never accepts, with the smallest backlog: after the first connection or two fill its
        // queue, the kernel drops further SYNs and those connects stay in progress.
        let listener = try RawListener(.v4(.loopback), backlog: 0)
        defer { listener.close() }
        let destination = listener.address
        let results = Collector<Int32>()
        let loop = try EventLoop(name: "shutdown-test")
        try await loop.submit {
            for _ in 0..<4 {
                TCPConnection.connect(to: destination, loop: loop) { result in
                    switch result {
                    case .success: results.append(0)
                    case .failure(let error): results.append(error.errno)
                    }
                }
            }
        }
        try await Task.sleep(for: .milliseconds(300))
        let completed = results.values
        let before = completed.count
        loop.shutdown()
        let after = results.values
        try #require(before < 4, "every connect completed before the shutdown (errno or 0 each): \(completed)")
        #expect(after.count == 4, "every connect's completion ran once the loop shut down: \(after)")
        #expect(after.suffix(4 - before).allSatisfy { $0 == ECANCELED })
    }
}
