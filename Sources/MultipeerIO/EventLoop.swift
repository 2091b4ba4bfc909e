import Dispatch
internal import Glibc
import Synchronization

/// One `struct epoll_event`, converted to and from the kernel's layout by hand (see `LinuxConstants`).
struct EpollEvent {
    var events: UInt32
    var token: UInt64

    init(events: UInt32, token: UInt64) {
        self.events = events
        self.token = token
    }

    init(from buffer: UnsafeMutableRawBufferPointer, at index: Int) {
        let base = index * LinuxConstants.epollEventSize
        events = buffer.loadUnaligned(fromByteOffset: base, as: UInt32.self)
        token = buffer.loadUnaligned(fromByteOffset: base + LinuxConstants.epollDataOffset, as: UInt64.self)
    }

    /// Calls `epoll_ctl` with this event.
    func control(_ epollFD: Int32, _ operation: Int32, _ fd: Int32) -> Int32 {
        var raw = [UInt8](repeating: 0, count: LinuxConstants.epollEventSize)
        raw.withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: events, toByteOffset: 0, as: UInt32.self)
            bytes.storeBytes(of: token, toByteOffset: LinuxConstants.epollDataOffset, as: UInt64.self)
        }
        return raw.withUnsafeMutableBytes { LinuxCalls.shared.epollCtl(epollFD, operation, fd, $0.baseAddress) }
    }
}

/// Something the event loop owns and dispatches readiness events to: a socket wrapper.
///
/// Implementations are loop-confined; the loop calls them only on its thread.
protocol EventLoopSelectable: AnyObject {
    /// Handles the `EPOLL*` bits reported for the object's descriptor.
    func handleEvents(_ events: UInt32)
    /// Closes the descriptor silently because the loop is shutting down.
    func closeForLoopShutdown()
}

/// One thread running `epoll_wait`: it owns sockets, runs submitted work in FIFO order and fires timers.
///
/// Sockets (`UDPSocket`, `TCPListener`, `TCPConnection`, `InterfaceMonitor`) are created and used on the loop's
/// thread; other threads hand work to it with `execute(_:)` or `submit(_:)`.
///
/// Each loop iteration waits for readiness, handles socket events, takes the batch of submitted work, fires every
/// timer due at that moment, then runs the batch; work that the batch queued is taken the same way in up to seven
/// more rounds before the loop polls again. Work submitted after `ManualClock.advance(by:)` therefore runs after
/// the timers that advance made due, which makes `submit` a barrier in timer tests.
///
/// Call `shutdown()` when done: the thread keeps the loop alive until then.
public final class EventLoop: @unchecked Sendable {
    // Safety of @unchecked Sendable: `clock`, `name`, `epollFD`, `wakeFD` are immutable; `shared` and `threadID` are
    // synchronized (Lock, Atomic); every other stored property is touched only on the loop thread, which the
    // loop-only methods check with `precondition(inEventLoop)`.

    /// Maximum readiness events taken from the kernel per `epoll_wait`; more stay pending for the next call.
    private static let maximumEventsPerWait = 64

    /// Rounds of queued work one iteration runs before it polls the sockets again.
    private static let maximumTaskRounds = 8

    /// Size of the loop's shared stream read buffer (see `withReadBuffer(_:)`): large enough for line-rate loopback
    /// reads, small enough to hand data over promptly.
    static let readBufferSize = 65_536

    /// The clock the loop's timers read.
    public let clock: any IOClock
    /// Whether `clock` is a `ManualClock` (checked once: a dynamic cast on every iteration costs measurably).
    private let usesManualClock: Bool
    let name: String

    private let epollFD: Int32
    private let wakeFD: Int32
    /// The thread running the loop's work right now: the loop thread while it handles events, timers and
    /// queued work, or a caller of ``runIfIdle(_:)``; 0 while the loop waits in `epoll_wait`.
    private let threadID = Atomic<UInt>(0)
    /// Held while the loop's work runs (by the loop thread, or by a ``runIfIdle(_:)`` caller), so loop-confined
    /// state has one owner at a time; the loop thread releases it only to wait in `epoll_wait`.
    private let ownership = Lock<Void>(())
    /// When the loop's current `epoll_wait` ends at the latest (nil: no timer), so that ``runIfIdle(_:)`` knows
    /// whether a timer it armed needs the loop woken. Guarded by `ownership`.
    private var plannedWakeUp: IOInstant?
    private let finished = DispatchGroup()

    private enum RunState { case running, stopRequested, stopped }

    private struct Shared {
        // Unbounded by design: `execute` is a thread-safe hand-off with no way to push back on callers, and every
        // caller in this package enqueues work proportional to its own bounded state (a send, a socket creation).
        // A queue limit would turn overload into silently lost work; callers that need a bound apply it upstream.
        var tasks: [Work] = []
        var state = RunState.running
        var wakePending = false
    }

    /// One unit of queued work: a closure from `execute`/`submit`, or a job of a task that prefers this loop
    /// (kept as is: wrapping it in a closure would cost an allocation per job).
    private enum Work: @unchecked Sendable {
        // Safety of @unchecked Sendable: an `UnownedJob` is handed to this loop to run exactly once, here.
        case closure(@Sendable () -> Void)
        case job(UnownedJob)
    }

    private let shared = Lock(Shared())
    /// The storage of the last batch run, emptied, handed back to `shared.tasks` by the next `takeTasks()` so
    /// that queueing work does not allocate. Loop-confined.
    private var spareTasks: [Work] = []

    // Loop-thread state.
    private var registrations: [UInt64: any EventLoopSelectable] = [:]
    private var nextToken: UInt64 = 1
    private var timers = TimerQueue()
    private var nextTimerID: UInt64 = 1
    /// One read buffer for every stream socket of the loop, allocated on first use: an idle connection then holds
    /// no buffer of its own. Freed in `deinit`.
    private var readBuffer: UnsafeMutableRawBufferPointer?
    private var readBufferInUse = false

    /// Creates the loop and starts its thread.
    /// - Parameters:
    ///   - name: The thread's name (at most 15 characters are kept by the kernel).
    ///   - clock: The clock timers read; pass a `ManualClock` to drive time in tests.
    /// - Throws: `SystemCallError` if the epoll or eventfd descriptor or the thread cannot be created.
    public init(name: String = "multipeer-io", clock: any IOClock = MonotonicClock()) throws(SystemCallError) {
        self.name = name
        self.clock = clock
        usesManualClock = clock is ManualClock
        let calls = LinuxCalls.shared
        let epollFD = try retryingSystemCall("epoll_create1") { calls.epollCreate1(LinuxConstants.closeOnExec) }
        self.epollFD = epollFD
        let wakeFD: Int32
        do {
            wakeFD = try retryingSystemCall("eventfd") {
                calls.eventfd(0, LinuxConstants.closeOnExec | LinuxConstants.nonBlocking)
            }
        } catch {
            Glibc.close(epollFD)
            throw error
        }
        self.wakeFD = wakeFD
        let event = EpollEvent(events: LinuxConstants.epollIn, token: 0)
        if event.control(epollFD, LinuxConstants.epollCtlAdd, wakeFD) < 0 {
            let error = SystemCallError(call: "epoll_ctl", errno: Glibc.errno)
            Glibc.close(wakeFD)
            Glibc.close(epollFD)
            throw error
        }
        finished.enter()
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let result = pthread_create(
            &thread, nil,
            { argument in
                let loop = Unmanaged<EventLoop>.fromOpaque(argument!).takeRetainedValue()
                loop.run()
                return nil
            }, box.toOpaque())
        if result != 0 {
            box.release()
            Glibc.close(wakeFD)
            Glibc.close(epollFD)
            throw SystemCallError(call: "pthread_create", errno: result)
        }
        pthread_detach(thread)
        if let manual = clock as? ManualClock {
            manual.addObserver(ObjectIdentifier(self)) { [weak self] in self?.wake() }
        }
    }

    deinit {
        readBuffer?.deallocate()
    }

    /// `true` when called where loop-confined code may run: on this loop's thread, or inside ``runIfIdle(_:)``.
    public var inEventLoop: Bool {
        threadID.load(ordering: .acquiring) == UInt(pthread_self())
    }

    /// Runs `work` on the loop thread after all work submitted before it. Safe from any thread.
    ///
    /// Work submitted after `shutdown()` finished is dropped.
    /// - Parameter work: The closure to run.
    /// - Returns: `false` if the loop has shut down and `work` will never run, so a caller waiting for it can
    ///   stop waiting.
    @discardableResult
    public func execute(_ work: @escaping @Sendable () -> Void) -> Bool {
        enqueue(work)
    }

    /// Runs `work` right away on the calling thread, as the loop would run it, if the loop is idle (waiting for
    /// events, nothing queued) and not shut down; otherwise returns `false` and does nothing. On the loop's own
    /// thread it always runs `work`.
    ///
    /// This saves a thread hand-off where latency matters (a send from a task that is not on the loop): the
    /// loop is not woken, unless `work` queued something or armed a timer earlier than the loop's wait ends.
    /// `work` must not block or wait for the loop; while it runs, the loop thread waits for it.
    /// - Parameter work: Loop-confined work.
    /// - Returns: Whether `work` ran.
    public func runIfIdle(_ work: () -> Void) -> Bool {
        if inEventLoop {
            work()
            return true
        }
        let ran = ownership.withLockIfAvailable { _ -> Bool in
            guard shared.withLock({ $0.state == .running && $0.tasks.isEmpty }) else { return false }
            own(work)
            let wakeUp = timers.nextDeadline()
            let timerEarlier = wakeUp.map { deadline in plannedWakeUp.map { deadline < $0 } ?? true } ?? false
            shared.withLock { shared in
                if timerEarlier || !shared.tasks.isEmpty { signalLocked(&shared) }
            }
            return true
        }
        return ran ?? false
    }

    /// Runs `body` as the loop's owner (``inEventLoop`` is true during it). Call with `ownership` held.
    private func own<T>(_ body: () -> T) -> T {
        threadID.store(UInt(pthread_self()), ordering: .releasing)
        defer { threadID.store(0, ordering: .releasing) }
        return body()
    }

    /// Runs `work` on the loop thread and returns its result.
    /// - Parameter work: The closure to run.
    /// - Returns: What `work` returned.
    /// - Throws: What `work` threw, or `SystemCallError` with `ECANCELED` if the loop has shut down.
    public func submit<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let accepted = enqueue {
                continuation.resume(with: Result { try work() })
            }
            if !accepted {
                continuation.resume(throwing: SystemCallError(call: "submit", errno: ECANCELED))
            }
        }
    }

    /// Schedules `work` to run on the loop thread once the clock reaches `deadline`. Loop thread only.
    ///
    /// Timers with equal deadlines fire in the order they were scheduled.
    /// - Parameters:
    ///   - deadline: When to fire.
    ///   - work: The closure to run.
    /// - Returns: An identifier for `cancelTimer(_:)`.
    @discardableResult
    public func scheduleTimer(at deadline: IOInstant, _ work: @escaping () -> Void) -> TimerID {
        precondition(inEventLoop, "EventLoop.scheduleTimer called off the loop thread")
        let id = TimerID(rawValue: nextTimerID)
        nextTimerID += 1
        timers.insert(id, deadline: deadline, work)
        return id
    }

    /// Schedules `work` to run on the loop thread after `delay`. Loop thread only.
    /// - Parameters:
    ///   - delay: How long from now.
    ///   - work: The closure to run.
    /// - Returns: An identifier for `cancelTimer(_:)`.
    @discardableResult
    public func scheduleTimer(after delay: Duration, _ work: @escaping () -> Void) -> TimerID {
        scheduleTimer(at: clock.now() + delay, work)
    }

    /// Cancels a timer that has not fired yet; does nothing for fired or unknown timers. Loop thread only.
    /// - Parameter id: The timer to cancel.
    public func cancelTimer(_ id: TimerID) {
        precondition(inEventLoop, "EventLoop.cancelTimer called off the loop thread")
        timers.cancel(id)
    }

    /// Stops the loop: runs work already submitted, closes every socket the loop owns and ends the thread.
    ///
    /// Idempotent. Waits for the thread to finish unless called on the loop thread itself (then the loop stops
    /// after the current iteration).
    public func shutdown() {
        shared.withLock { shared in
            if shared.state == .running {
                shared.state = .stopRequested
                signalLocked(&shared)
            }
        }
        if let manual = clock as? ManualClock { manual.removeObserver(ObjectIdentifier(self)) }
        if !inEventLoop { finished.wait() }
    }

    // MARK: - Registration (loop thread)

    /// Takes ownership of `object` until `deregister`; the loop closes it on shutdown.
    func register(_ object: any EventLoopSelectable) -> UInt64 {
        precondition(inEventLoop, "socket created off its loop's thread")
        let token = nextToken
        nextToken += 1
        registrations[token] = object
        return token
    }

    /// Releases ownership; the caller removed its descriptor from epoll (or closes it next).
    func deregister(_ token: UInt64) {
        precondition(inEventLoop)
        registrations[token] = nil
    }

    /// Lends the loop's shared read buffer (`readBufferSize` bytes) to `body`. Loop thread only.
    ///
    /// The buffer is scratch space for one `read` and the handling of its bytes: `body` must not keep the pointer,
    /// and nothing it calls may read another socket of this loop into the buffer (a precondition catches nested
    /// use; socket reads only happen when the loop dispatches readiness events, never from handlers).
    /// - Parameter body: Reads into the buffer and handles or copies the bytes.
    /// - Returns: What `body` returned.
    func withReadBuffer<T>(_ body: (UnsafeMutableRawBufferPointer) throws -> T) rethrows -> T {
        precondition(inEventLoop, "EventLoop read buffer used off the loop thread")
        precondition(!readBufferInUse, "EventLoop read buffer used re-entrantly")
        let buffer: UnsafeMutableRawBufferPointer
        if let readBuffer {
            buffer = readBuffer
        } else {
            buffer = .allocate(byteCount: Self.readBufferSize, alignment: 16)
            readBuffer = buffer
        }
        readBufferInUse = true
        defer { readBufferInUse = false }
        return try body(buffer)
    }

    /// Moves `fd`'s epoll interest from `old` to `new`; `nil` means "not in the epoll set".
    func updateInterest(fd: Int32, token: UInt64, from old: UInt32?, to new: UInt32?) throws(SystemCallError) {
        precondition(inEventLoop)
        let event = EpollEvent(events: new ?? 0, token: token)
        switch (old, new) {
        case (nil, nil):
            return
        case (nil, _?):
            _ = try retryingSystemCall("epoll_ctl") { event.control(epollFD, LinuxConstants.epollCtlAdd, fd) }
        case (_?, nil):
            _ = try retryingSystemCall("epoll_ctl") { event.control(epollFD, LinuxConstants.epollCtlDel, fd) }
        case (let old?, let new?):
            guard old != new else { return }
            _ = try retryingSystemCall("epoll_ctl") { event.control(epollFD, LinuxConstants.epollCtlMod, fd) }
        }
    }

    // MARK: - Thread

    private func enqueue(_ work: @escaping @Sendable () -> Void) -> Bool {
        enqueue(work: .closure(work))
    }

    private func enqueue(work: Work) -> Bool {
        // Work queued by the loop thread itself runs before the loop waits again (the wait has no timeout while
        // work is queued), so it needs no wake-up: no eventfd write, no system call.
        let fromLoop = inEventLoop
        return shared.withLock { shared in
            guard shared.state != .stopped else { return false }
            shared.tasks.append(work)
            if !fromLoop { signalLocked(&shared) }
            return true
        }
    }

    private func wake() {
        shared.withLock { signalLocked(&$0) }
    }

    /// Writes the eventfd under the lock, so it never races with the loop closing it.
    private func signalLocked(_ shared: inout Shared) {
        guard shared.state != .stopped, !shared.wakePending else { return }
        shared.wakePending = true
        var one: UInt64 = 1
        _ = Glibc.write(wakeFD, &one, MemoryLayout<UInt64>.size)
    }

    private func run() {
        if let setThreadName = LinuxCalls.shared.setThreadName {
            // The kernel keeps at most 15 bytes of a thread name.
            _ = String(name.utf8.prefix(15))!.withCString { setThreadName(pthread_self(), $0) }
        }
        let eventBuffer = UnsafeMutableRawBufferPointer.allocate(
            byteCount: LinuxConstants.epollEventSize * Self.maximumEventsPerWait, alignment: 8)
        defer { eventBuffer.deallocate() }
        var timeout = ownership.withLock { _ in own { waitTimeout() } }
        while true {
            // The only time the loop thread does not own the loop: `runIfIdle` callers may take it meanwhile.
            let count = LinuxCalls.shared.epollWait(
                epollFD, eventBuffer.baseAddress, Int32(Self.maximumEventsPerWait), timeout)
            let running = ownership.withLock { _ -> Bool in
                own {
                    runIteration(eventCount: Int(count), events: eventBuffer)
                    guard shared.withLock({ $0.state == .running }) else { return false }
                    timeout = waitTimeout()
                    return true
                }
            }
            if !running { break }
        }
        ownership.withLock { _ in own { finishShutdown() } }
        finished.leave()
    }

    /// Handles one `epoll_wait`'s events, then the queued work and due timers.
    private func runIteration(eventCount: Int, events eventBuffer: UnsafeMutableRawBufferPointer) {
        for index in 0..<max(0, eventCount) {
            let event = EpollEvent(from: eventBuffer, at: index)
            if event.token == 0 {
                var value: UInt64 = 0
                _ = Glibc.read(wakeFD, &value, MemoryLayout<UInt64>.size)
            } else if let object = registrations[event.token] {
                object.handleEvents(event.events)
            }
        }
        // Work that the batch queued on this loop (a task resumed by a delivery, then sending) runs in the
        // same iteration, up to a few rounds, instead of costing an `epoll_wait` each.
        var rounds = 0
        repeat {
            var batch = takeTasks()
            fireDueTimers()
            run(batch)
            batch.removeAll(keepingCapacity: batch.capacity <= 1024)
            spareTasks = batch
            rounds += 1
        } while rounds < Self.maximumTaskRounds && shared.withLock({ !$0.tasks.isEmpty && $0.state == .running })
    }

    /// Runs the work still queued (so `submit` callers are resumed), closes every socket and the descriptors.
    private func finishShutdown() {
        while true {
            let batch = shared.withLock { shared -> [Work] in
                if shared.tasks.isEmpty {
                    shared.state = .stopped
                    return []
                }
                defer { shared.tasks.removeAll() }
                return shared.tasks
            }
            if batch.isEmpty { break }
            run(batch)
        }
        let owned = registrations
        registrations.removeAll()
        for object in owned.values { object.closeForLoopShutdown() }
        timers.removeAll()
        Glibc.close(wakeFD)
        Glibc.close(epollFD)
    }

    /// Takes the queued work, leaving the spare (empty) storage in its place.
    private func takeTasks() -> [Work] {
        var batch = spareTasks
        spareTasks = []
        shared.withLock { shared in
            shared.wakePending = false
            swap(&batch, &shared.tasks)
        }
        return batch
    }

    private func run(_ batch: [Work]) {
        for work in batch {
            switch work {
            case .closure(let closure): closure()
            case .job(let job): job.runSynchronously(on: asUnownedTaskExecutor())
            }
        }
    }

    private func fireDueTimers() {
        let now = clock.now()
        // Timers scheduled by a firing timer wait for the next iteration, so a zero-delay re-arm cannot spin here.
        let newest = nextTimerID - 1
        while let work = timers.popDue(now: now, maxID: newest) {
            work()
        }
    }

    private func waitTimeout() -> Int32 {
        plannedWakeUp = timers.nextDeadline()
        if shared.withLock({ !$0.tasks.isEmpty }) { return 0 }
        guard let deadline = plannedWakeUp else { return -1 }
        let now = clock.now()
        if deadline <= now { return 0 }
        // A manual clock only moves through `advance`, which wakes the loop; no point waking on real time.
        if usesManualClock { return -1 }
        let nanoseconds = deadline.nanoseconds - now.nanoseconds
        let milliseconds = (nanoseconds + 999_999) / 1_000_000
        return Int32(clamping: milliseconds)
    }
}

/// An event loop runs Swift tasks too: a task started with `Task(executorPreference: loop)` (or inside
/// `withTaskExecutorPreference(loop)`) runs its jobs on the loop thread, between I/O events. Code that reacts
/// to a connection's messages then runs where the connection lives: a message delivered by the loop resumes
/// the task without waking another thread, and what the task sends is written in the same loop iteration.
/// Such tasks must not block (no blocking system calls, no long computations), or every socket on the loop
/// waits. Jobs enqueued after `shutdown()` never run.
extension EventLoop: TaskExecutor {
    /// Runs `job` on the loop thread after the work already queued.
    public func enqueue(_ job: consuming ExecutorJob) {
        _ = enqueue(work: .job(UnownedJob(job)))
    }
}
