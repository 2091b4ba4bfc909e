internal import Foundation
internal import Multipeer
internal import MultipeerIO

/// Delivers `Stream` events to a stream's delegate: on the run loop it was scheduled in, else on a private
/// serial queue (Foundation on Linux has no bound stream pair to do this for us).
///
/// An open stream that is scheduled on a run loop or has a delegate is kept alive here until it ends, fails, is
/// closed or is removed from its run loop, as Apple's run loop keeps a scheduled stream: an application that
/// opens a received stream in its delegate call and does not store it still gets its events and its data.
final class StreamEvents: @unchecked Sendable {
    // Safety: the fields are only touched under `lock`; the stream and delegate are used on one queue at a time.
    private let lock = NSLock()
    private weak var stream: Stream?
    /// The stream while something will still deliver it events (see the type's description).
    private var kept: Stream?
    private var opened = false
    private var finished = false
    private weak var delegateObject: AnyObject?
    private var runLoop: RunLoop?
    private var mode: RunLoop.Mode = .default
    private let queue = DispatchQueue(label: "MCSession.stream")

    func attach(_ stream: Stream) { lock.withLock { self.stream = stream } }

    var delegate: (any StreamDelegate)? {
        get { lock.withLock { delegateObject as? any StreamDelegate } }
        set {
            lock.withLock {
                delegateObject = newValue.map { $0 as AnyObject }
                keepIfListened()
            }
        }
    }

    /// Whether the stream is kept alive now (for tests).
    var isKept: Bool { lock.withLock { kept != nil } }

    func schedule(in runLoop: RunLoop, forMode mode: RunLoop.Mode) {
        lock.withLock {
            self.runLoop = runLoop
            self.mode = mode
            keepIfListened()
        }
    }

    func remove(from runLoop: RunLoop) {
        lock.withLock {
            if self.runLoop === runLoop { self.runLoop = nil }
            keepIfListened()
        }
    }

    /// The stream was opened: from now on it is kept while it is listened to.
    func open() {
        lock.withLock {
            opened = true
            keepIfListened()
        }
    }

    /// The stream was closed (or ended, or failed): nothing keeps it any more.
    func finish() {
        let released = lock.withLock { () -> Stream? in
            finished = true
            defer { kept = nil }
            return kept
        }
        _ = released  // released outside the lock: the stream's deinit may come back here
    }

    /// Called with the lock held.
    private func keepIfListened() {
        if opened, !finished, runLoop != nil || delegateObject != nil {
            if kept == nil { kept = stream }
        } else {
            kept = nil
        }
    }

    func post(_ event: Stream.Event) {
        post { event }
    }

    /// Queues a delivery whose event is chosen when it runs (nil: none is due by then).
    func post(choosing choose: @escaping @Sendable () -> Stream.Event?) {
        let (runLoop, mode) = lock.withLock { (self.runLoop, self.mode) }
        let deliver: @Sendable () -> Void = { [weak self] in
            guard let self, let event = choose() else { return }
            let (stream, delegate) = self.lock.withLock { (self.stream, self.delegateObject as? any StreamDelegate) }
            if let stream, let delegate { delegate.stream(stream, handle: event) }
            if event == .endEncountered || event == .errorOccurred { self.finish() }
        }
        if let runLoop {
            // A timer, not `perform`: adding a timer wakes a sleeping run loop, `perform` only queues the block.
            runLoop.add(Timer(timeInterval: 0, repeats: false) { _ in deliver() }, forMode: mode)
        } else {
            queue.async(execute: deliver)
        }
    }
}

/// The bytes between an application's blocking stream calls and a native ``PeerStream``, bounded.
final class StreamPipe: @unchecked Sendable {
    // Safety: every field is only touched while `condition` is locked.
    private let condition = NSCondition()
    private var bytes: [UInt8] = []
    private var start = 0
    private var ended = false
    private(set) var failure: MCError?
    private var waiter: CheckedContinuation<Void, Never>?
    /// The most bytes held.
    let capacity: Int

    init(capacity: Int = 1 << 20) {
        self.capacity = capacity
    }

    var count: Int { condition.withLock { bytes.count - start } }
    var isEnded: Bool { condition.withLock { ended } }
    var error: MCError? { condition.withLock { failure } }

    /// Adds up to `count` bytes, blocking while the pipe is full; nil once it ended or failed.
    func write(_ pointer: UnsafePointer<UInt8>, count: Int) -> Int? {
        condition.lock()
        defer { condition.unlock() }
        while bytes.count - start >= capacity, !ended, failure == nil { condition.wait() }
        guard !ended, failure == nil else { return nil }
        let taken = min(count, capacity - (bytes.count - start))
        bytes.append(contentsOf: UnsafeBufferPointer(start: pointer, count: taken))
        wake()
        return taken
    }

    /// Adds bytes without blocking (the producer already bounds itself by ``count``).
    func append(_ chunk: [UInt8]) {
        condition.withLock {
            bytes.append(contentsOf: chunk)
            wake()
        }
    }

    /// Takes up to `count` bytes into `pointer`, blocking until some arrive; 0 at the end, nil on failure.
    func read(_ pointer: UnsafeMutablePointer<UInt8>, count: Int) -> Int? {
        condition.lock()
        defer { condition.unlock() }
        while bytes.count == start, !ended, failure == nil { condition.wait() }
        if bytes.count == start { return failure == nil ? 0 : nil }
        let taken = min(count, bytes.count - start)
        bytes.withUnsafeBufferPointer { pointer.update(from: $0.baseAddress! + start, count: taken) }
        start += taken
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        }
        wake()
        return taken
    }

    /// Takes everything held, waiting (async) until there is something or the pipe ended; nil at the end.
    func takeAll() async -> [UInt8]? {
        await waitUntil { () -> [UInt8]?? in
            if bytes.count > start {
                let chunk = Array(bytes[start...])
                bytes.removeAll(keepingCapacity: true)
                start = 0
                condition.broadcast()
                return .some(chunk)
            }
            return ended || failure != nil ? .some(nil) : nil
        }
    }

    /// Waits until the count drops below `level` or the pipe ended; false once it ended.
    func waitForRoom(below level: Int) async -> Bool {
        await waitUntil { () -> Bool? in
            if ended || failure != nil { return false }
            return bytes.count - start < level ? true : nil
        }
    }

    /// Evaluates `check` with the condition locked until it gives a value; between tries, waits for a change. The
    /// check and the registration of the waiter happen in one critical section, so no change is missed.
    private func waitUntil<T>(_ check: () -> T?) async -> T {
        while true {
            var result: T?
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                condition.lock()
                if let value = check() {
                    result = value
                    condition.unlock()
                    continuation.resume()
                } else {
                    if let old = waiter { old.resume() }
                    waiter = continuation
                    condition.unlock()
                }
            }
            if let result { return result }
        }
    }

    /// Called with the condition locked.
    private func wake() {
        condition.broadcast()
        waiter?.resume()
        waiter = nil
    }

    /// No more bytes will be added (what is held stays readable).
    func end() {
        condition.withLock {
            ended = true; wake()
        }
    }

    func fail(_ error: MCError) {
        condition.withLock {
            if failure == nil { failure = error }
            wake()
        }
    }
}

/// The stream ``MCSession/startStream(withName:toPeer:)`` returns: writes go, in order and flow-controlled,
/// to the peer's `InputStream`. `write` blocks while 1 MiB is waiting to be sent.
final class MCOutputStream: OutputStream {
    private let pipe = StreamPipe()
    private let events = StreamEvents()
    private let status = Lock(Stream.Status.notOpen)

    init(opening: Task<PeerStream, any Error>) {
        super.init(toMemory: ())
        events.attach(self)
        let pipe = pipe
        let events = events
        let status = status
        Task {
            do {
                let stream = try await opening.value
                while let chunk = await pipe.takeAll() {
                    try await stream.write(chunk)
                    events.post(.hasSpaceAvailable)
                }
                if let error = pipe.error {
                    stream.reset()
                    throw error
                }
                try await stream.finish()
            } catch {
                pipe.fail(
                    error as? MCError
                        ?? MCError(.notConnected, reason: "the stream to the peer ended: \(error)"))
                status.withLock { $0 = .error }
                events.post(.errorOccurred)
            }
        }
    }

    required init(toMemory: ()) {
        invalidArgument("MCOutputStream is made by MCSession.startStream(withName:toPeer:)")
    }

    override func open() {
        let opened = status.withLock { status -> Bool in
            guard status == .notOpen else { return false }
            status = .open
            return true
        }
        if opened {
            events.open()
            events.post(.openCompleted)
            events.post(.hasSpaceAvailable)
        }
    }

    override func close() {
        status.withLock { if $0 != .error { $0 = .closed } }
        pipe.end()
        events.finish()
    }

    override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        guard len > 0 else { return 0 }
        guard status.withLock({ $0 == .open }) else { return -1 }
        return pipe.write(buffer, count: len) ?? -1
    }

    override var hasSpaceAvailable: Bool { pipe.count < pipe.capacity && pipe.error == nil }
    override var streamStatus: Stream.Status { status.withLock { $0 } }
    override var streamError: (any Error)? { pipe.error }
    override var delegate: (any StreamDelegate)? {
        get { events.delegate }
        set { events.delegate = newValue }
    }
    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        events.schedule(in: aRunLoop, forMode: mode)
    }
    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.remove(from: aRunLoop) }

    deinit { pipe.end() }
}

/// Signals an input stream's events level-triggered: one delivery queued at a time, whose event is chosen when it
/// runs from what is then true (bytes to read, else the end or the failure, once).
final class InputSignals: Sendable {
    private let events: StreamEvents
    private let pipe: StreamPipe
    private let status: Lock<Stream.Status>
    /// Whether a delivery is queued, and whether the last event (end or error) went out.
    private let state = Lock((pending: false, final: false))

    init(events: StreamEvents, pipe: StreamPipe, status: Lock<Stream.Status>) {
        self.events = events
        self.pipe = pipe
        self.status = status
    }

    /// Queues the delivery of whatever event is due when it runs, unless one is queued already.
    func signal() {
        let post = state.withLock { state -> Bool in
            guard !state.pending, !state.final else { return false }
            state.pending = true
            return true
        }
        guard post else { return }
        let (state, pipe, status) = (state, pipe, status)
        events.post {
            // After the application closed the stream, nothing more is reported.
            let closed = status.withLock { $0 == .closed }
            return state.withLock { state -> Stream.Event? in
                state.pending = false
                guard !closed, !state.final else { return nil }
                if pipe.count > 0 { return .hasBytesAvailable }
                if pipe.error != nil {
                    state.final = true
                    return .errorOccurred
                }
                if pipe.isEnded {
                    state.final = true
                    return .endEncountered
                }
                return nil
            }
        }
    }
}

/// The stream a session's delegate receives for a peer's stream. Open it, then read: `read` blocks until
/// bytes arrive and returns 0 at the end; at most 1 MiB is read ahead of the application.
///
/// Its events are level-triggered, as Apple's: `hasBytesAvailable` comes again after a `read` that left bytes
/// (an application that reads a fixed amount per event gets everything), and `endEncountered` only once every
/// byte was read.
final class MCInputStream: InputStream {
    private let pipe = StreamPipe()
    private let events = StreamEvents()
    private let status = Lock(Stream.Status.notOpen)
    private let signals: InputSignals
    private let stream: PeerStream

    init(_ stream: PeerStream) {
        self.stream = stream
        signals = InputSignals(events: events, pipe: pipe, status: status)
        super.init(data: Data())
        events.attach(self)
    }

    override func open() {
        let opened = status.withLock { status -> Bool in
            guard status == .notOpen else { return false }
            status = .open
            return true
        }
        guard opened else { return }
        events.open()
        events.post(.openCompleted)
        let pipe = pipe
        let status = status
        let signals = signals
        let stream = stream
        Task {
            var chunk: [UInt8] = []
            do {
                while await pipe.waitForRoom(below: pipe.capacity / 2) {
                    guard try await stream.read(into: &chunk, maximumCount: pipe.capacity / 2) > 0 else { break }
                    pipe.append(chunk)
                    signals.signal()
                }
                pipe.end()
            } catch {
                let closed = status.withLock { status -> Bool in
                    if status == .closed { return true }
                    status = .error
                    return false
                }
                guard !closed else { return }
                pipe.fail(MCError(.notConnected, reason: "the peer's stream ended: \(error)"))
            }
            signals.signal()
        }
    }

    override func close() {
        status.withLock { if $0 != .error { $0 = .closed } }
        if !pipe.isEnded { stream.reset() }
        pipe.end()
        events.finish()
    }

    /// Whether something keeps this stream alive now (for tests).
    var isKeptAlive: Bool { events.isKept }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        guard len > 0 else { return 0 }
        guard status.withLock({ $0 == .open || $0 == .atEnd }) else { return -1 }
        guard let count = pipe.read(buffer, count: len) else { return -1 }
        if count == 0 { status.withLock { if $0 == .open { $0 = .atEnd } } }
        // Level-triggered: what is left (or the end, once all is read) is signalled again.
        if count > 0 { signals.signal() }
        return count
    }

    override var hasBytesAvailable: Bool { pipe.count > 0 }
    override var streamStatus: Stream.Status { status.withLock { $0 } }
    override var streamError: (any Error)? { pipe.error }
    override var delegate: (any StreamDelegate)? {
        get { events.delegate }
        set { events.delegate = newValue }
    }
    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        events.schedule(in: aRunLoop, forMode: mode)
    }
    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) { events.remove(from: aRunLoop) }
    override func getBuffer(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>
    ) -> Bool { false }

    deinit {
        if !pipe.isEnded { stream.reset() }
        pipe.end()
    }
}
