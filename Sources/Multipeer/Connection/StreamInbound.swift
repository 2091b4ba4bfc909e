internal import MultipeerIO

/// Received stream bytes waiting for the reader, in one contiguous buffer that is reused while the stream is
/// busy (a new array per frame cost a page fault per 4 KiB once glibc trimmed the freed arrays).
///
/// One producer (the connection, on its loop) and readers (application tasks). Neither copies under the lock:
/// the producer reserves room at the end (``reserve(upTo:)``), fills it (with `memcpy`, or the kernel fills it
/// straight from the socket), then commits it (``commit(_:)``); a reader borrows the bytes at the front, copies
/// them out, then gives them back. While a reader copies, the producer never moves the bytes: it appends after
/// them, or moves everything to new memory and leaves the old for the reader to free. The buffer never holds
/// more than the channel's receive window of unread bytes (the connection refuses data beyond the credit it
/// granted), and its memory grows to at most the window (twice that for a moment, while a reader copies from
/// the old memory); the memory stays while the stream is busy and is freed on a keepalive tick that finds it
/// empty.
final class StreamInbound: Sendable {
    /// Memory shared by the producer and a reader. Safety of @unchecked Sendable: the regions each side
    /// touches outside the lock never overlap (see the type's description), and the bookkeeping is under it.
    private struct Storage: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer
    }

    private struct State: ~Copyable, Sendable {
        var storage: Storage?
        /// Unread bytes are `storage[head..<tail]`.
        var head = 0
        var tail = 0
        /// A reader is copying bytes from the front (they stay unread until it is done).
        var copying = false
        /// The producer is filling `storage[tail..<tail + reserved]`.
        var writing = false
        var reserved = 0
        /// Memory replaced while a reader copied from it; freed when that reader is done.
        var retired: Storage?
        /// Set once the stream ended: nil inside for the normal end, else the error.
        var end: ConnectionError?? = nil
        /// The stream was reset: its unread bytes are dropped (their credit went back to the peer).
        var discarded = false
        /// Readers waiting for bytes or the end; woken to look again.
        var readers: [UnsafeContinuation<Void, Never>] = []
        /// Bytes read and not yet reported to the connection (which turns them into window updates).
        var unreported = 0

        var unread: Int { discarded ? 0 : tail - head }
        var capacity: Int { storage?.bytes.count ?? 0 }

        deinit {
            storage?.bytes.deallocate()
            retired?.bytes.deallocate()
        }

        /// Makes room for `count` bytes after the unread ones: moves the unread bytes to the front if that is
        /// enough and no reader is copying them, else moves them to new memory (at least `count` more, doubling
        /// up to `limit`).
        mutating func makeRoom(_ count: Int, limit: Int) {
            guard tail + count > capacity else { return }
            let needed = unread + count
            if needed <= capacity, !copying, let storage {
                if unread > 0 {
                    storage.bytes.baseAddress!.copyMemory(from: storage.bytes.baseAddress! + head, byteCount: unread)
                }
            } else {
                // The first buffer is sized by what arrives (a peer opening many streams and sending a byte on
                // each makes this side hold little more than those bytes); later ones double, up to the window.
                let size =
                    capacity == 0
                    ? max(needed, StreamInbound.minimumCapacity) : max(needed, min(2 * capacity, limit))
                let grown = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
                if let storage {
                    if unread > 0 {
                        grown.baseAddress!.copyMemory(from: storage.bytes.baseAddress! + head, byteCount: unread)
                    }
                    if copying && retired == nil {
                        retired = storage  // the reader is copying from it
                    } else {
                        storage.bytes.deallocate()
                    }
                }
                storage = Storage(bytes: grown)
            }
            tail = unread
            head = 0
        }

        /// Frees the memory of a discarded stream, unless a reader is copying from it or the producer filling
        /// it (whichever of them finishes last calls this again).
        mutating func freeDiscarded() {
            guard discarded, !copying, !writing else { return }
            storage?.bytes.deallocate()
            retired?.bytes.deallocate()
            storage = nil
            retired = nil
            head = 0
            tail = 0
        }

        /// Counts `count` bytes as read; returns what to report to the connection now (0: not yet).
        mutating func consumed(_ count: Int, batch: Int) -> Int {
            unreported += count
            // Reported in batches, and whenever the reader has taken everything (it may not read again for a
            // while, or ever: the credit must not stay here, the connection window is shared by all streams).
            guard unreported >= batch || unread == 0 else { return 0 }
            defer { unreported = 0 }
            return unreported
        }
    }

    /// The smallest buffer allocated: 256 bytes, so tiny writes do not reallocate at every byte, while a
    /// stream that receives little holds little.
    static let minimumCapacity = 256

    private let state = Lock(State())
    /// Held by a reader while it borrows and copies, so concurrent readers take turns (the producer never
    /// takes it).
    private let readTurn = Lock(())
    /// Read bytes reported together, so a reader taking small pieces does not wake the loop for each.
    private let reportBatch: Int
    /// The channel's receive window: the most bytes the connection lets wait here.
    private let window: Int

    /// Creates an empty inbound buffer.
    /// - Parameters:
    ///   - window: The channel's receive window.
    ///   - connectionWindow: The connection's receive window, shared by all channels.
    ///
    /// Consumption is reported in batches of at most 64 KiB (less for small windows: a quarter of the channel
    /// window, a sixteenth of the connection's), whenever the reader has taken everything, and before it waits.
    init(window: Int, connectionWindow: Int = Int.max) {
        reportBatch = max(1, min(65_536, window / 4, connectionWindow / 16))
        self.window = window
    }

    /// Unread bytes held.
    var bufferedByteCount: Int { state.withLock { $0.unread } }
    /// The bytes of memory held (for tests of the bound).
    var capacity: Int { state.withLock { $0.capacity } }
    /// Readers waiting for bytes (for tests).
    var waitingReaders: Int { state.withLock { $0.readers.count } }

    // MARK: - Producer (the connection's loop)

    /// Reserves room for up to `count` bytes at the end, for the caller to fill and then ``commit(_:)``
    /// (always, even with 0). Nothing is reserved once the stream ended.
    /// - Parameters:
    ///   - count: The most bytes wanted.
    ///   - exactly: Whether anything less than `count` is useless (then the memory grows if it must).
    /// - Returns: The room, or nil.
    func reserve(upTo count: Int, exactly: Bool = false) -> UnsafeMutableRawBufferPointer? {
        state.withLock { state -> UnsafeMutableRawBufferPointer? in
            precondition(!state.writing, "StreamInbound.reserve before the previous reservation was committed")
            guard state.end == nil, count > 0 else { return nil }
            if state.tail + count > state.capacity {
                // With a reader copying, take what is left at the end rather than moving everything.
                let left = state.capacity - state.tail
                if exactly || !state.copying || left < 4096 { state.makeRoom(count, limit: window) }
            }
            let room = min(count, state.capacity - state.tail)
            state.writing = true
            state.reserved = room
            return UnsafeMutableRawBufferPointer(rebasing: state.storage!.bytes[state.tail..<state.tail + room])
        }
    }

    /// Makes the first `count` reserved bytes readable and wakes waiting readers.
    func commit(_ count: Int) {
        let woken = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
            guard state.writing else { return [] }
            precondition(count >= 0 && count <= state.reserved, "StreamInbound.commit of more than was reserved")
            state.writing = false
            guard !state.discarded else {
                state.freeDiscarded()
                return []
            }
            state.tail += count
            guard count > 0 else { return [] }
            defer { state.readers = [] }
            return state.readers
        }
        for reader in woken { reader.resume() }
    }

    /// Adds received bytes (a copy); dropped once the stream ended.
    func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty, let room = reserve(upTo: bytes.count, exactly: true) else { return }
        room.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        commit(bytes.count)
    }

    /// Ends the stream: normally with nil, or with an error. Unread bytes stay readable first.
    func finish(_ error: ConnectionError?) {
        let woken = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
            if state.end == nil { state.end = .some(error) }
            defer { state.readers = [] }
            return state.readers
        }
        for reader in woken { reader.resume() }
    }

    /// Ends the stream with `error` (also after a normal end, which the dropped bytes would make a lie) and drops
    /// its unread bytes and their memory: the stream was reset, and the connection gave their credit back to the
    /// peer, so keeping them would let a peer that fills and resets streams make this side hold a stream window
    /// per reset stream, beyond the connection window.
    func discard(_ error: ConnectionError) {
        let woken = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
            state.end = .some(error)
            state.discarded = true
            state.freeDiscarded()
            defer { state.readers = [] }
            return state.readers
        }
        for reader in woken { reader.resume() }
    }

    /// Frees the memory if it holds nothing and nobody is using it (an idle stream keeps none; called on
    /// keepalive ticks).
    func releaseIfEmpty() {
        state.withLock { state in
            guard state.unread == 0, !state.copying, !state.writing, let storage = state.storage else { return }
            storage.bytes.deallocate()
            state.storage = nil
            state.head = 0
            state.tail = 0
        }
    }

    // MARK: - Readers

    /// The next bytes (at most 65,536), or nil at the end of the stream.
    /// - Parameter report: Called with a count of read bytes to return to the sender as window credit.
    func next(report: (Int) -> Void) async throws(ConnectionError) -> [UInt8]? {
        var chunk: [UInt8] = []
        let count = try await read(into: &chunk, maximumCount: 65_536, report: report)
        return count == 0 ? nil : chunk
    }

    /// Replaces the contents of `buffer` with the next bytes (at most `maximumCount`), reusing its memory.
    /// - Returns: The number of bytes now in `buffer`; 0 at the end of the stream.
    func read(into buffer: inout [UInt8], maximumCount: Int, report: (Int) -> Void) async throws(ConnectionError)
        -> Int
    {
        precondition(maximumCount > 0, "a read must be allowed at least one byte")
        buffer.removeAll(keepingCapacity: true)
        while true {
            switch take(upTo: maximumCount, { buffer.append(contentsOf: $0) }) {
            case .took(let count):
                consumed(count, report: report)
                return count
            case .ended(nil):
                flushReports(report)
                return 0
            case .ended(let error?):
                flushReports(report)
                throw error
            case .empty:
                await waitForBytes(report: report)
            }
        }
    }

    /// Lends the next bytes (at most `maximumCount`) to `body` in place, without copying them, and counts them
    /// as read once `body` returns (also when it throws).
    /// - Returns: What `body` returned; nil at the end of the stream.
    func read<R>(
        maximumCount: Int, report: (Int) -> Void, borrowing body: (UnsafeRawBufferPointer) throws -> R
    ) async throws -> R? {
        precondition(maximumCount > 0, "a read must be allowed at least one byte")
        while true {
            var result: Result<R, any Error>?
            switch take(upTo: maximumCount, { bytes in result = Result { try body(bytes) } }) {
            case .took(let count):
                consumed(count, report: report)
                return try result!.get()
            case .ended(nil):
                flushReports(report)
                return nil
            case .ended(let error?):
                flushReports(report)
                throw error
            case .empty:
                await waitForBytes(report: report)
            }
        }
    }

    enum Taken: Equatable {
        case took(Int)
        case ended(ConnectionError?)
        case empty
    }

    /// Lends up to `maximum` unread bytes to `body` without holding the lock, then drops them (internal for
    /// tests, which run the producer inside `body`).
    func take(upTo maximum: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Taken {
        readTurn.withLock { _ -> Taken in
            let borrowed = state.withLock { state -> Result<UnsafeRawBufferPointer, EndOrEmpty> in
                guard state.unread > 0, let storage = state.storage else {
                    return .failure(state.end.map { .ended($0) } ?? .empty)
                }
                state.copying = true
                let count = min(state.unread, maximum)
                return .success(UnsafeRawBufferPointer(rebasing: storage.bytes[state.head..<state.head + count]))
            }
            switch borrowed {
            case .failure(.ended(let error)): return .ended(error)
            case .failure(.empty): return .empty
            case .success(let bytes):
                body(bytes)
                state.withLock { state in
                    state.copying = false
                    guard !state.discarded else {
                        state.freeDiscarded()
                        return
                    }
                    state.head += bytes.count
                    if state.head == state.tail && !state.writing {
                        state.head = 0
                        state.tail = 0
                    }
                    state.retired?.bytes.deallocate()
                    state.retired = nil
                }
                return .took(bytes.count)
            }
        }
    }

    private enum EndOrEmpty: Error {
        case ended(ConnectionError?)
        case empty
    }

    /// Waits until bytes or the end arrive (returns at once if they already did). Before waiting, everything
    /// read so far is reported, so the sender is never kept waiting for credit held back here.
    private func waitForBytes(report: (Int) -> Void) async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            var flush = 0
            let waiting = state.withLock { state -> Bool in
                guard state.unread == 0, state.end == nil else { return false }
                state.readers.append(continuation)
                flush = state.unreported
                state.unreported = 0
                return true
            }
            if flush > 0 { report(flush) }
            if !waiting { continuation.resume() }
        }
    }

    /// Reports whatever was read and not reported yet.
    private func flushReports(_ report: (Int) -> Void) {
        let due = state.withLock { state in
            defer { state.unreported = 0 }
            return state.unreported
        }
        if due > 0 { report(due) }
    }

    private func consumed(_ count: Int, report: (Int) -> Void) {
        guard count > 0 else { return }
        let due = state.withLock { $0.consumed(count, batch: reportBatch) }
        if due > 0 { report(due) }
    }
}
