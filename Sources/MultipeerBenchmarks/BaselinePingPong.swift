#if canImport(Glibc)
    import Glibc
#endif

extension Baseline {
    /// Round trips of a small message over one loopback TCP connection with `TCP_NODELAY` on both ends: the client
    /// sends `payload` bytes, the server (another thread) reads all of them and sends them back, and the client
    /// waits for all `payload` bytes before the next round. Blocking `send`/`read`, no framing.
    ///
    /// `warmup` rounds run first and are not recorded (they fault in buffers and let the scheduler settle).
    /// Summarize the samples with ``Summary`` (`Summary(samples).percentile(0.99)`).
    /// - Parameters:
    ///   - rounds: How many round trips to record.
    ///   - payload: Bytes each way per round.
    ///   - warmup: Unrecorded rounds before the first recorded one.
    /// - Returns: Every recorded round trip in nanoseconds (`CLOCK_MONOTONIC`), in the order measured.
    /// - Throws: ``BenchmarkError`` from a socket call, or if the echo does not match what was sent.
    static func rawPingPong(rounds: Int, payload: Int = 64, warmup: Int = 1000) throws -> [UInt64] {
        precondition(rounds > 0 && payload > 0 && warmup >= 0, "rawPingPong needs positive rounds and payload")
        let (_, samples) = try withLoopbackPair(
            noDelay: true,
            accepted: { fd throws in
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: payload, alignment: 16)
                defer { buffer.deallocate() }
                // Echo until the client shuts its side down.
                while try BaselineSocket.readExactly(fd, buffer.baseAddress!, payload) {
                    try BaselineSocket.writeAll(fd, buffer.baseAddress!, payload)
                }
            },
            connected: { fd throws -> [UInt64] in
                let message = UnsafeMutableRawBufferPointer.allocate(byteCount: payload, alignment: 16)
                defer { message.deallocate() }
                message.initializeMemory(as: UInt8.self, repeating: 0x42)
                let echo = UnsafeMutableRawBufferPointer.allocate(byteCount: payload, alignment: 16)
                defer { echo.deallocate() }
                var samples: [UInt64] = []
                samples.reserveCapacity(rounds)
                for round in 0..<(warmup + rounds) {
                    message[0] = UInt8(truncatingIfNeeded: round)
                    let start = BaselineSocket.nanoseconds()
                    try BaselineSocket.writeAll(fd, message.baseAddress!, payload)
                    guard try BaselineSocket.readExactly(fd, echo.baseAddress!, payload) else {
                        throw BenchmarkError("ping-pong: the echo side closed at round \(round)")
                    }
                    let end = BaselineSocket.nanoseconds()
                    guard echo[0] == message[0] else { throw BenchmarkError("ping-pong: wrong echo at round \(round)") }
                    if round >= warmup { samples.append(end - start) }
                }
                return samples
            })
        return samples
    }
}
