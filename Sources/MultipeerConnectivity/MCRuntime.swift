internal import Foundation
package import Logging
public import Multipeer
internal import MultipeerIO

/// Where this module's advertisers, browsers and sessions meet the network (an addition to Apple's API, which
/// has no such knob): one ``PeerNetwork`` per process, made on first use from ``configuration``.
public enum MCNetwork {
    private static let state = Lock<(configuration: PeerNetwork.Configuration?, network: PeerNetwork?)>((nil, nil))

    /// The interfaces and addresses to use. Read once, when the first advertiser, browser or session starts;
    /// by default what the environment says (`MULTIPEER_LOOPBACK=1`, `MULTIPEER_INTERFACE=eth0,...`, see
    /// ``PeerNetwork/Configuration/fromEnvironment(_:)``), else every interface. Setting it later has no effect.
    public static var configuration: PeerNetwork.Configuration {
        get { state.withLock { $0.configuration ?? .fromEnvironment() } }
        set { state.withLock { $0.configuration = newValue } }
    }

    /// Where the compatibility modules log: the configuration's logger (``PeerNetwork/Configuration/logger``;
    /// nothing unless the application gives one or `MULTIPEER_LOG` names a level), with the metadata `area` =
    /// `facade`.
    package static var logger: Logger { configuration.logger.area(.facade) }

    /// The process's network, made on first use (under the lock: two first callers must not both make one, as
    /// the loser's event loop thread would never stop).
    static func shared() throws(SessionError) -> PeerNetwork {
        try state.withLock { state throws(SessionError) -> PeerNetwork in
            if let network = state.network { return network }
            let made = try PeerNetwork(configuration: state.configuration ?? .fromEnvironment())
            state.network = made
            return made
        }
    }
}

/// A closure to keep behind a lock: `Lock<Boxed<F>>`, never `Lock<F>`. Reading a closure out of a generic
/// container through `inout` (`mutex.withLock { $0 }`) wraps it in two more reabstraction thunks on every read, so
/// each call through it gets slower without bound (20,000 reads: 0.3 ms boxed; 1.5 s, then 6 s, then 10 s
/// unboxed); a class reference is read as it is.
final class Boxed<F: Sendable>: Sendable {
    let value: F

    init(_ value: F) {
        self.value = value
    }
}

/// A weak reference behind a lock, for delegates set and read from any thread.
final class WeakDelegate<Value>: @unchecked Sendable {
    // Safety: `value` is only touched under `lock`.
    private let lock = NSLock()
    private weak var object: AnyObject?

    var value: Value? {
        get { lock.withLock { object as? Value } }
        set { lock.withLock { object = newValue.map { $0 as AnyObject } } }
    }
}

/// A private serial queue for delegate calls (as Apple documents), with a bound on what waits in it (calls and
/// bytes of data): a producer that gets ahead of a slow delegate waits in ``deliver(bytes:_:)`` instead of
/// queueing without limit, and the wait holds the sending peer back through flow control.
final class DelegateQueue: Sendable {
    let queue: DispatchQueue
    /// Runs tasks on ``queue`` (between its other calls, one job at a time): a task preferring it calls the
    /// delegate directly, in order with everything else queued.
    let executor: QueueExecutor
    private let waiting = Lock<(count: Int, bytes: Int, resume: [CheckedContinuation<Void, Never>])>((0, 0, []))
    /// The most calls queued before ``deliver(bytes:_:)`` waits.
    let limit: Int
    /// The most bytes of data queued before it waits (a call with more than this still goes alone).
    let byteLimit: Int

    init(label: String, limit: Int = 256, byteLimit: Int = 16 << 20) {
        queue = DispatchQueue(label: label)
        executor = QueueExecutor(queue)
        self.limit = limit
        self.byteLimit = byteLimit
    }

    /// Queues `call`, which carries `bytes` of data; returns once it is queued, waiting first while the queue is
    /// full.
    func deliver(bytes: Int = 0, _ call: @escaping @Sendable () -> Void) async {
        func full(_ state: (count: Int, bytes: Int, resume: [CheckedContinuation<Void, Never>])) -> Bool {
            state.count > 0 && (state.count >= limit || state.bytes + bytes > byteLimit)
        }
        while waiting.withLock({ full($0) }) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let queued = waiting.withLock { state -> Bool in
                    guard full(state) else { return false }
                    state.resume.append(continuation)
                    return true
                }
                if !queued { continuation.resume() }
            }
        }
        waiting.withLock {
            $0.count += 1
            $0.bytes += bytes
        }
        queue.async { [self] in
            call()
            let woken = waiting.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.count -= 1
                state.bytes -= bytes
                defer { state.resume = [] }
                return state.resume
            }
            for continuation in woken { continuation.resume() }
        }
    }

    /// Queues `call` without waiting (state changes and other calls that are few; never data).
    func post(_ call: @escaping @Sendable () -> Void) {
        queue.async(execute: call)
    }
}

/// A task executor that runs its jobs on a serial dispatch queue.
final class QueueExecutor: TaskExecutor {
    private let queue: DispatchQueue

    init(_ queue: DispatchQueue) {
        self.queue = queue
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Stops the process with a message naming the rule broken, where Apple's framework raises an exception.
func invalidArgument(_ message: String) -> Never {
    fatalError("MultipeerConnectivity: \(message)")
}
