#if canImport(Glibc)
    import Glibc
#endif

/// The baselines the connection benchmarks compare ours against, measured in the same run on 127.0.0.1: iperf3,
/// and plain blocking POSIX sockets driven by threads, without `MultipeerIO`'s event loop, TLS or any framing
/// library. Each function returns its numbers; `runBaselines(_:)` prints them.
enum Baseline {
    /// Bytes per `send` and per `read` of the raw TCP pump.
    static let pumpChunkSize = 128 << 10

    /// Bytes per `send` of the framed-message pump: frames are batched up to this size.
    static let frameBatchSize = 64 << 10

    /// Runs the two ends of a fresh loopback TCP connection: `accepted` on a new thread with the accepted socket,
    /// `connected` on the calling thread with the connecting one. Whatever happens, both descriptors are closed and
    /// the thread is joined before this returns.
    ///
    /// The accepted socket is closed as soon as `accepted` returns or throws. When `connected` throws, its socket is
    /// closed at once; when it returns, its write side is shut down (so an `accepted` that reads until the end of
    /// the stream finishes) and it is closed after the thread ends. Closing rather than only shutting down means a
    /// side blocked in `read` sees the end of the stream and a side blocked in `send` gets an error (the kernel
    /// answers with a reset), so one side's failure never leaves the other blocked for ever.
    /// - Parameters:
    ///   - noDelay: Whether to set `TCP_NODELAY` on both sockets.
    ///   - accepted: The listening side's work.
    ///   - connected: The connecting side's work.
    /// - Returns: What both sides returned.
    /// - Throws: What either side threw (the calling side's error first), or a socket setup error.
    static func withLoopbackPair<Accepted: Sendable, Connected>(
        noDelay: Bool, accepted: @escaping @Sendable (Int32) throws -> Accepted,
        connected: (Int32) throws -> Connected
    ) throws -> (accepted: Accepted, connected: Connected) {
        let (listener, port) = try BaselineSocket.listen()
        defer { close(listener) }
        let client = try BaselineSocket.connect(port: port, noDelay: noDelay)
        let server: Int32
        do {
            server = try BaselineSocket.accept(listener, noDelay: noDelay)
        } catch {
            close(client)
            throw error
        }
        let thread = BaselineThread(name: "baseline-peer") { () throws -> Accepted in
            defer { close(server) }
            return try accepted(server)
        }
        let connectedResult = Result { try connected(client) }
        if connectedResult.isSuccess {
            shutdown(client, Int32(SHUT_WR))
        } else {
            close(client)
        }
        let acceptedResult = Result { try thread.join() }
        if connectedResult.isSuccess { close(client) }
        let connectedValue = try connectedResult.get()
        return (try acceptedResult.get(), connectedValue)
    }

    /// The throughput of a plain TCP pump inside this process: one thread sends `bytes` in 128 KiB `send` calls,
    /// the other reads them in 128 KiB `read` calls and only counts them. No `TCP_NODELAY`, default socket buffers.
    ///
    /// Timed from the sender's first `send` to the receiver's read of the last byte (both `CLOCK_MONOTONIC`).
    /// - Parameter bytes: How many bytes to send; a few GiB take about a second on loopback.
    /// - Returns: Bytes per second received.
    /// - Throws: ``BenchmarkError`` from a socket call, or if fewer bytes arrived.
    static func rawTCPThroughput(bytes: Int) throws -> Double {
        precondition(bytes > 0, "rawTCPThroughput needs a positive byte count")
        let chunk = pumpChunkSize
        let (end, start) = try withLoopbackPair(
            noDelay: false,
            accepted: { fd throws -> UInt64 in
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
                defer { buffer.deallocate() }
                var received = 0
                while received < bytes {
                    let count = try BaselineSocket.readSome(fd, buffer.baseAddress!, min(chunk, bytes - received))
                    if count == 0 { throw BenchmarkError("raw TCP pump: stream ended after \(received) of \(bytes)") }
                    received += count
                }
                return BaselineSocket.nanoseconds()
            },
            connected: { fd throws -> UInt64 in
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
                defer { buffer.deallocate() }
                buffer.initializeMemory(as: UInt8.self, repeating: 0x5a)
                let start = BaselineSocket.nanoseconds()
                var sent = 0
                while sent < bytes {
                    let count = min(chunk, bytes - sent)
                    try BaselineSocket.writeAll(fd, buffer.baseAddress!, count)
                    sent += count
                }
                return start
            })
        return Double(bytes) / seconds(from: start, to: end)
    }

    /// The rate of a raw TCP pump of single-fragment `message` frames exactly as our wire protocol lays them out
    /// (`docs/PROTOCOL.md` section 2, `FrameEncoder`), without TLS, flow control or per-message delivery.
    ///
    /// Each frame is the 12-byte header (version 1, type 0x20 `message`, flags 0x03 FIRST|LAST, a zero byte,
    /// channel 1 and the payload length `payload + 12`, both UInt32 big-endian), the message id (UInt32 BE,
    /// counting up from 0), the total length (UInt64 BE, `payload`) and `payload` bytes. The sender encodes every
    /// frame into a 64 KiB batch and sends the batch when the next frame would not fit. The receiver reads up to
    /// 128 KiB at a time into a buffer, parses and checks every header, id and total length, and counts complete
    /// messages (it does not copy payloads out). Timed from the sender's first `send` to the last message parsed.
    /// - Parameters:
    ///   - count: How many messages to send.
    ///   - payload: Message size in bytes, at most 65,524 (one frame).
    /// - Returns: Messages per second counted at the receiver.
    /// - Throws: ``BenchmarkError`` from a socket call, or if a frame is malformed or the stream ends early.
    static func rawFramedMessageRate(count: Int, payload: Int = 64) throws -> Double {
        precondition(count > 0, "rawFramedMessageRate needs a positive message count")
        precondition((0...FramedPump.maximumPayload).contains(payload), "payload must fit one message frame")
        let (end, start) = try withLoopbackPair(
            noDelay: false,
            accepted: { fd throws -> UInt64 in
                try FramedPump.receive(fd, count: count, payload: payload)
                return BaselineSocket.nanoseconds()
            },
            connected: { fd throws -> UInt64 in
                try FramedPump.send(fd, count: count, payload: payload)
            })
        return Double(count) / seconds(from: start, to: end)
    }

    /// Seconds between two `BaselineSocket.nanoseconds()` readings (at least 1 ns).
    static func seconds(from start: UInt64, to end: UInt64) -> Double {
        Double(max(1, end &- start)) / 1e9
    }
}

/// The two ends of ``Baseline/rawFramedMessageRate(count:payload:)``.
enum FramedPump {
    /// Header bytes before the payload of every frame.
    static let headerLength = 12
    /// Message id (4) and total length (8) at the start of a FIRST fragment's payload.
    static let messagePrefixLength = 12
    /// The largest payload one frame carries (`docs/PROTOCOL.md`: 65,524 bytes with FIRST|LAST).
    static let maximumPayload = 65_524
    /// Frame type `message`.
    static let messageType: UInt8 = 0x20
    /// FIRST | LAST.
    static let singleFragmentFlags: UInt8 = 0x03
    /// The channel every message goes on.
    static let channel: UInt32 = 1

    /// Encodes `count` frames into batches of at most ``Baseline/frameBatchSize`` and sends them.
    /// - Returns: When the first `send` started (`CLOCK_MONOTONIC` ns).
    static func send(_ fd: Int32, count: Int, payload: Int) throws -> UInt64 {
        let frameLength = headerLength + messagePrefixLength + payload
        let batch = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(Baseline.frameBatchSize, frameLength), alignment: 16)
        defer { batch.deallocate() }
        let body = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, payload), alignment: 16)
        defer { body.deallocate() }
        for index in 0..<body.count { body[index] = UInt8(truncatingIfNeeded: index &* 7 &+ 1) }
        let start = BaselineSocket.nanoseconds()
        var used = 0
        for id in 0..<count {
            if used + frameLength > batch.count {
                try BaselineSocket.writeAll(fd, batch.baseAddress!, used)
                used = 0
            }
            batch[used] = 1
            batch[used + 1] = messageType
            batch[used + 2] = singleFragmentFlags
            batch[used + 3] = 0
            batch.storeBytes(of: channel.bigEndian, toByteOffset: used + 4, as: UInt32.self)
            batch.storeBytes(
                of: UInt32(messagePrefixLength + payload).bigEndian, toByteOffset: used + 8, as: UInt32.self)
            batch.storeBytes(of: UInt32(truncatingIfNeeded: id).bigEndian, toByteOffset: used + 12, as: UInt32.self)
            batch.storeBytes(of: UInt64(payload).bigEndian, toByteOffset: used + 16, as: UInt64.self)
            if payload > 0 {
                (batch.baseAddress! + used + headerLength + messagePrefixLength).copyMemory(
                    from: body.baseAddress!, byteCount: payload)
            }
            used += frameLength
        }
        if used > 0 { try BaselineSocket.writeAll(fd, batch.baseAddress!, used) }
        return start
    }

    /// Reads and parses frames until `count` messages arrived, checking every header against the layout.
    static func receive(_ fd: Int32, count: Int, payload: Int) throws {
        let readSize = Baseline.pumpChunkSize
        // A partial frame (at most 12 + 65,536 bytes) plus one full read always fit after compaction.
        let capacity = 2 * readSize + headerLength + 65_536
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        defer { buffer.deallocate() }
        var start = 0
        var end = 0
        var messages = 0
        var expectedID: UInt32 = 0
        while messages < count {
            if capacity - end < readSize {
                (buffer.baseAddress!).copyMemory(from: buffer.baseAddress! + start, byteCount: end - start)
                end -= start
                start = 0
            }
            let received = try BaselineSocket.readSome(fd, buffer.baseAddress! + end, readSize)
            if received == 0 { throw BenchmarkError("framed pump: stream ended after \(messages) of \(count)") }
            end += received
            while end - start >= headerLength {
                let length = Int(UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: start + 8, as: UInt32.self)))
                guard buffer[start] == 1, buffer[start + 1] == messageType, buffer[start + 3] == 0,
                    UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: start + 4, as: UInt32.self)) == channel,
                    length <= 65_536
                else { throw BenchmarkError("framed pump: malformed header at message \(messages)") }
                if end - start < headerLength + length { break }
                let id = UInt32(bigEndian: buffer.loadUnaligned(fromByteOffset: start + 12, as: UInt32.self))
                let total = UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: start + 16, as: UInt64.self))
                guard buffer[start + 2] == singleFragmentFlags, length >= messagePrefixLength,
                    total == UInt64(length - messagePrefixLength), total == UInt64(payload), id == expectedID
                else { throw BenchmarkError("framed pump: unexpected message frame at message \(messages)") }
                messages += 1
                expectedID &+= 1
                start += headerLength + length
            }
        }
    }
}

extension Result {
    /// Whether this is `.success`.
    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}
