internal import MultipeerIO
internal import Synchronization

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
    let inbound = StreamInbound()

    init(driver: ConnectionDriver, channel: UInt32, name: String) {
        self.driver = driver
        self.channel = channel
        self.name = name
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

    /// The next bytes the peer wrote, or nil at the end of the stream.
    /// - Throws: ``ConnectionError`` if the stream was reset or the connection ended first.
    public func read() async throws(ConnectionError) -> [UInt8]? {
        let chunk = try await inbound.next()
        if let chunk {
            let driver = driver
            let channel = channel
            driver.loop.execute { driver.streamConsumed(channel, count: chunk.count) }
        }
        return chunk
    }
}

/// Received stream bytes waiting for the reader.
final class StreamInbound: Sendable {
    private struct State {
        var chunks: [[UInt8]] = []
        var end: ConnectionError?? = nil
        var readers: [CheckedContinuation<[UInt8]?, any Error>] = []
    }

    private let state = Mutex(State())

    /// Adds received bytes (loop side).
    func deliver(_ bytes: [UInt8]) {
        let reader = state.withLock { state -> CheckedContinuation<[UInt8]?, any Error>? in
            if !state.readers.isEmpty { return state.readers.removeFirst() }
            state.chunks.append(bytes)
            return nil
        }
        reader?.resume(returning: bytes)
    }

    /// Ends the stream: normally with nil, or with an error.
    func finish(_ error: ConnectionError?) {
        let readers = state.withLock { state -> [CheckedContinuation<[UInt8]?, any Error>] in
            if state.end == nil { state.end = .some(error) }
            defer { state.readers = [] }
            return state.readers
        }
        for reader in readers {
            if let error { reader.resume(throwing: error) } else { reader.resume(returning: nil) }
        }
    }

    func next() async throws(ConnectionError) -> [UInt8]? {
        do {
            return try await withCheckedThrowingContinuation {
                (continuation: CheckedContinuation<[UInt8]?, any Error>) in
                let result = state.withLock { state -> Result<[UInt8]?, ConnectionError>? in
                    if !state.chunks.isEmpty { return .success(state.chunks.removeFirst()) }
                    if let end = state.end { return end.map { .failure($0) } ?? .success(nil) }
                    state.readers.append(continuation)
                    return nil
                }
                if let result { continuation.resume(with: result) }
            }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }
}

extension ConnectionError {
    /// `error` itself when it is a ``ConnectionError``, else a ``Code/internalFailure`` describing it.
    static func wrapping(_ error: any Error) -> ConnectionError {
        if let error = error as? ConnectionError { return error }
        return ConnectionError(code: .internalFailure, reason: "\(error)")
    }
}
