internal import Synchronization

/// Received stream bytes waiting for the reader, in one contiguous buffer that is reused while the stream is
/// busy (a new array per frame cost a page fault per 4 KiB once glibc trimmed the freed arrays).
///
/// The loop appends straight from the frame decoder (``append(_:)``). A reader waiting in
/// ``read(into:maximumCount:report:)`` hands its array over while it waits, and the loop copies the bytes
/// straight into it (outside the lock), so a reader that keeps up costs one copy and no allocation.
/// The buffer never holds more than the channel's receive window: the connection refuses data beyond the
/// credit it granted before appending it.
final class StreamInbound: Sendable {
    /// A reader waiting for bytes.
    private struct Reader: Sendable {
        enum Kind: Sendable {
            /// `read()`: wants the next bytes as a new array.
            case chunk(UnsafeContinuation<Result<[UInt8]?, ConnectionError>, Never>)
            /// `read(into:)`: lent `array` (emptied, capacity kept) for at most `maximum` bytes.
            case fill(UnsafeContinuation<Filled, Never>, maximum: Int)
        }

        let kind: Kind
        /// The lent array; always moved in and out with `swap`, so it stays uniquely referenced and appending
        /// to it never copies it.
        var array: [UInt8] = []
    }

    /// How a waiting `read(into:)` resumes: always with its array back.
    private enum Filled: Sendable {
        /// The loop put bytes in it.
        case bytes([UInt8])
        /// Nothing was put in: look again (bytes arrived meanwhile, or the stream ended).
        case retry([UInt8])
    }

    /// Safety of @unchecked Sendable: the memory is only touched under the mutex.
    private struct Storage: @unchecked Sendable {
        let bytes: UnsafeMutableRawBufferPointer
    }

    private struct State: ~Copyable, Sendable {
        private var memory: Storage?
        var storage: UnsafeMutableRawBufferPointer? {
            get { memory?.bytes }
            set { memory = newValue.map(Storage.init) }
        }
        /// Unread bytes are `storage[head..<tail]`.
        var head = 0
        var tail = 0
        /// Set once the stream ended: nil inside for the normal end, else the error.
        var end: ConnectionError?? = nil
        var readers: [Reader] = []
        /// Bytes read and not yet reported to the connection (which turns them into window updates).
        var unreported = 0

        var unread: Int { tail - head }

        deinit { storage?.deallocate() }

        /// Copies `bytes` after the unread ones, moving those to the front or growing the storage as needed.
        /// - Parameter limit: The size doubling stops at (the window: the connection never lets more in).
        mutating func store(_ bytes: UnsafeRawBufferPointer, limit: Int) {
            guard !bytes.isEmpty else { return }
            let capacity = storage?.count ?? 0
            if tail + bytes.count > capacity {
                let needed = unread + bytes.count
                if needed <= capacity, let storage {
                    // Moves at most what the reader is behind by; cheaper than growing.
                    if unread > 0 {
                        storage.baseAddress!.copyMemory(from: storage.baseAddress! + head, byteCount: unread)
                    }
                } else {
                    let grown = UnsafeMutableRawBufferPointer.allocate(
                        byteCount: max(needed, min(2 * capacity, limit), StreamInbound.minimumCapacity),
                        alignment: 16)
                    if let storage {
                        if unread > 0 {
                            grown.baseAddress!.copyMemory(from: storage.baseAddress! + head, byteCount: unread)
                        }
                        storage.deallocate()
                    }
                    storage = grown
                }
                tail = unread
                head = 0
            }
            storage!.baseAddress!.advanced(by: tail).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            tail += bytes.count
        }

        /// Lends up to `maximum` unread bytes to `body`, then drops them.
        /// - Returns: How many bytes were lent.
        mutating func take(upTo maximum: Int, _ body: (UnsafeRawBufferPointer) -> Void) -> Int {
            let count = min(unread, maximum)
            guard count > 0, let storage else { return 0 }
            body(UnsafeRawBufferPointer(rebasing: storage[head..<head + count]))
            head += count
            if head == tail {
                head = 0
                tail = 0
            }
            return count
        }

        /// Counts `count` bytes as read; returns what to report to the connection now (0: not yet).
        mutating func consumed(_ count: Int, batch: Int) -> Int {
            unreported += count
            // Reported in batches, and always before the reader waits (see `waitOrReport`).
            guard unreported >= batch else { return 0 }
            defer { unreported = 0 }
            return unreported
        }
    }

    /// The smallest buffer allocated: one frame.
    static let minimumCapacity = 65_536

    private let state = Mutex(State())
    /// Read bytes reported together, so a reader taking small pieces does not wake the loop for each.
    private let reportBatch: Int
    /// The channel's receive window: the most bytes the connection lets wait here.
    private let window: Int

    /// Creates an empty inbound buffer.
    /// - Parameter window: The channel's receive window: consumption is reported in batches of a quarter of it
    ///   (at most 256 KiB), and whenever the reader is about to wait.
    init(window: Int) {
        reportBatch = max(1, min(262_144, window / 4))
        self.window = window
    }

    /// Unread bytes held.
    var bufferedByteCount: Int { state.withLock { $0.unread } }
    /// The bytes of memory held (for tests of the bound).
    var capacity: Int { state.withLock { $0.storage?.count ?? 0 } }
    /// Readers waiting for bytes (for tests).
    var waitingReaders: Int { state.withLock { $0.readers.count } }

    /// Adds received bytes (loop side); waiting readers get them at once.
    func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        var chunks: [(UnsafeContinuation<Result<[UInt8]?, ConnectionError>, Never>, [UInt8])] = []
        var fills: [(continuation: UnsafeContinuation<Filled, Never>, array: [UInt8], bytes: UnsafeRawBufferPointer)] =
            []
        state.withLock { state in
            guard state.end == nil else { return }
            var rest = bytes
            // Only an empty buffer can have readers waiting; they take the bytes in the order they asked.
            while !rest.isEmpty, state.unread == 0, !state.readers.isEmpty {
                var reader = state.readers.removeFirst()
                switch reader.kind {
                case .chunk(let continuation):
                    let count = min(rest.count, 65_536)
                    chunks.append((continuation, Array(rest[..<count])))
                    rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                case .fill(let continuation, let maximum):
                    // Copied below, outside the lock: these bytes are that reader's alone now.
                    let count = min(rest.count, maximum)
                    fills.append((continuation, [], UnsafeRawBufferPointer(rebasing: rest[..<count])))
                    swap(&fills[fills.count - 1].array, &reader.array)
                    rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                }
            }
            state.store(rest, limit: window)
        }
        for (continuation, chunk) in chunks { continuation.resume(returning: .success(chunk)) }
        for index in fills.indices {
            var array: [UInt8] = []
            swap(&array, &fills[index].array)
            array.append(contentsOf: fills[index].bytes)
            fills[index].continuation.resume(returning: .bytes(consume array))
        }
    }

    /// Ends the stream: normally with nil, or with an error. Unread bytes stay readable first.
    func finish(_ error: ConnectionError?) {
        let readers = state.withLock { state -> [Reader] in
            if state.end == nil { state.end = .some(error) }
            defer { state.readers = [] }
            return state.readers
        }
        for var reader in readers {
            switch reader.kind {
            case .chunk(let continuation): continuation.resume(returning: error.map { .failure($0) } ?? .success(nil))
            case .fill(let continuation, _):
                var array: [UInt8] = []
                swap(&array, &reader.array)
                continuation.resume(returning: .retry(consume array))
            }
        }
    }

    /// Frees the buffer if it holds nothing (an idle stream keeps no memory; called on keepalive ticks).
    func releaseIfEmpty() {
        state.withLock { state in
            guard state.unread == 0, let storage = state.storage else { return }
            storage.deallocate()
            state.storage = nil
            state.head = 0
            state.tail = 0
        }
    }

    /// The next bytes (at most 65,536), or nil at the end of the stream.
    /// - Parameter report: Called with a count of read bytes to return to the sender as window credit.
    func next(report: (Int) -> Void) async throws(ConnectionError) -> [UInt8]? {
        let result = await withUnsafeContinuation {
            (continuation: UnsafeContinuation<Result<[UInt8]?, ConnectionError>, Never>) in
            var flush = 0
            let now = state.withLock { state -> Result<[UInt8]?, ConnectionError>? in
                if state.unread > 0 {
                    var chunk: [UInt8] = []
                    _ = state.take(upTo: 65_536) { chunk = Array($0) }
                    return .success(chunk)
                }
                if let end = state.end { return end.map { .failure($0) } ?? .success(nil) }
                flush = Self.wait(&state, Reader(kind: .chunk(continuation)))
                return nil
            }
            if flush > 0 { report(flush) }
            if let now { continuation.resume(returning: now) }
        }
        let chunk = try result.get()
        if let chunk { consumed(chunk.count, report: report) }
        return chunk
    }

    /// Replaces the contents of `buffer` with the next bytes (at most `maximumCount`), reusing its memory.
    /// - Returns: The number of bytes now in `buffer`; 0 at the end of the stream.
    func read(into buffer: inout [UInt8], maximumCount: Int, report: (Int) -> Void) async throws(ConnectionError)
        -> Int
    {
        buffer.removeAll(keepingCapacity: true)
        guard maximumCount > 0 else { return 0 }
        while true {
            var flush = 0
            let taken = state.withLock { state -> Result<Int, ConnectionError>? in
                if state.unread > 0 {
                    return .success(state.take(upTo: maximumCount) { buffer.append(contentsOf: $0) })
                }
                if let end = state.end { return end.map { .failure($0) } ?? .success(0) }
                return nil
            }
            if let taken {
                let count = try taken.get()
                consumed(count, report: report)
                return count
            }
            // Nothing yet: lend the array to the loop while waiting for bytes (or the end).
            var lent: [UInt8] = []
            swap(&lent, &buffer)
            let filled = await withUnsafeContinuation { (continuation: UnsafeContinuation<Filled, Never>) in
                let waiting = state.withLock { state -> Bool in
                    guard state.unread == 0, state.end == nil else { return false }
                    flush = Self.wait(&state, Reader(kind: .fill(continuation, maximum: maximumCount)))
                    swap(&state.readers[state.readers.count - 1].array, &lent)
                    return true
                }
                if flush > 0 { report(flush) }
                if !waiting {
                    var back: [UInt8] = []
                    swap(&back, &lent)
                    continuation.resume(returning: .retry(consume back))
                }
            }
            switch filled {
            case .bytes(let array):
                buffer = array
                consumed(buffer.count, report: report)
                return buffer.count
            case .retry(let array):
                buffer = array
            }
        }
    }

    /// Registers `reader`. Before a reader waits, everything read so far is reported (the returned count), so
    /// the sender is never kept waiting for credit held back here.
    private static func wait(_ state: inout State, _ reader: Reader) -> Int {
        state.readers.append(reader)
        defer { state.unreported = 0 }
        return state.unreported
    }

    private func consumed(_ count: Int, report: (Int) -> Void) {
        guard count > 0 else { return }
        let due = state.withLock { $0.consumed(count, batch: reportBatch) }
        if due > 0 { report(due) }
    }
}
