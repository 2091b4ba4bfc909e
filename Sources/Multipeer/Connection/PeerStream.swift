internal import MultipeerIO

/// An ordered, flow-controlled byte stream to or from a connected peer, multiplexed with messages and other
/// streams on the connection (the equivalent of Apple's `startStream(withName:toPeer:)` and the
/// `didReceive stream` delegate call).
///
/// A stream opened with ``PeerConnection/openStream(name:)`` is written by this side and read by the peer;
/// the peer's streams arrive in ``PeerConnection/incomingStreams``. `write` suspends while the peer is
/// behind (its window is full), so a fast writer never buffers without bound.
public final class PeerStream: Sendable {
    /// The name given by the opener (for example a file name); may be empty.
    public let name: String
    let channel: UInt32
    private let driver: ConnectionDriver
    let inbound: StreamInbound

    init(driver: ConnectionDriver, channel: UInt32, name: String, inbound: StreamInbound) {
        self.driver = driver
        self.channel = channel
        self.name = name
        self.inbound = inbound
    }

    /// A stream the application no longer holds: if it was finished both ways with bytes left unread, the
    /// connection forgets it now (its credit and channel slot go back).
    deinit {
        let driver = driver
        let channel = channel
        driver.loop.execute { driver.streamDropped(channel) }
    }

    /// Sends `bytes`; returns once they are queued, suspending while the connection's send buffer is full.
    /// - Throws: ``ConnectionError`` if the connection ended or the stream was finished or reset.
    public func write(_ bytes: [UInt8]) async throws(ConnectionError) {
        let driver = driver
        let channel = channel
        do {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if !driver.loop.execute({ driver.write(bytes, channel: channel, continuation: continuation) }) {
                    continuation.resume(throwing: ConnectionError(code: .closedLocally, reason: "the loop stopped"))
                }
            }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    /// Says this side will write nothing more; the peer reads the end after everything written.
    public func finish() async throws(ConnectionError) {
        let driver = driver
        let channel = channel
        do {
            try await driver.loop.submit { try driver.finishStream(channel) }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    /// Aborts the stream both ways; unsent and unread bytes are dropped.
    public func reset() {
        let driver = driver
        let channel = channel
        driver.loop.execute { driver.resetStream(channel) }
    }

    /// The next bytes the peer wrote (at most 65,536), or nil at the end of the stream.
    ///
    /// Each call returns a new array; ``read(into:)`` reuses the caller's memory and is faster for bulk data.
    /// - Throws: ``ConnectionError`` if the stream was reset or the connection ended first.
    public func read() async throws(ConnectionError) -> [UInt8]? {
        try await inbound.next(report: reportConsumed)
    }

    /// Replaces the contents of `buffer` with the next bytes the peer wrote (as many as have arrived, at most
    /// `maximumCount`), suspending until some arrive. The array's memory is reused from call to call, so a
    /// loop over one buffer allocates nothing: the fast way to read bulk data.
    ///
    /// ```swift
    /// var buffer: [UInt8] = []
    /// while try await stream.read(into: &buffer) > 0 { consume(buffer) }
    /// ```
    /// - Parameters:
    ///   - buffer: Receives the bytes; its previous contents are discarded.
    ///   - maximumCount: The most bytes to take; 256 KiB by default.
    /// - Returns: How many bytes `buffer` now holds; 0 at the end of the stream.
    /// - Throws: ``ConnectionError`` if the stream was reset or the connection ended first.
    public func read(into buffer: inout [UInt8], maximumCount: Int = 262_144) async throws(ConnectionError) -> Int {
        try await inbound.read(into: &buffer, maximumCount: maximumCount, report: reportConsumed)
    }

    /// Lends the next bytes the peer wrote (as many as have arrived, at most `maximumCount`) to `body` where they
    /// lie in the stream's receive buffer, suspending until some arrive: no copy at all, the fastest way to
    /// consume bulk data (hash it, write it to a file, parse it in place).
    ///
    /// ```swift
    /// while let count = try await stream.read(borrowing: { bytes in hasher.update(bytes); return bytes.count }) {
    ///     total += count
    /// }
    /// ```
    /// The bytes are valid only inside `body` (do not keep the pointer), and count as read once it returns,
    /// also when it throws; the sender gets their credit back then. Concurrent readers take turns.
    /// - Parameters:
    ///   - maximumCount: The most bytes to lend at once; 256 KiB by default.
    ///   - body: Looks at the bytes (never empty).
    /// - Returns: What `body` returned; nil at the end of the stream.
    /// - Throws: ``ConnectionError`` if the stream was reset or the connection ended first, or what `body` threw.
    public func read<Result>(
        maximumCount: Int = 262_144, borrowing body: (UnsafeRawBufferPointer) throws -> Result
    ) async throws -> Result? {
        try await inbound.read(maximumCount: maximumCount, report: reportConsumed, borrowing: body)
    }

    /// Returns read bytes to the sender as window credit (batched by the inbound buffer).
    private func reportConsumed(_ count: Int) {
        let driver = driver
        let channel = channel
        driver.loop.execute { driver.streamConsumed(channel, count: count) }
    }
}

extension ConnectionError {
    /// `error` itself when it is a ``ConnectionError``, else a ``Code/internalFailure`` describing it.
    static func wrapping(_ error: any Error) -> ConnectionError {
        if let error = error as? ConnectionError { return error }
        return ConnectionError(code: .internalFailure, reason: "\(error)")
    }
}
