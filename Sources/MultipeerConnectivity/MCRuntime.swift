internal import Foundation
public import Multipeer
internal import Synchronization

/// Where this module's advertisers, browsers and sessions meet the network (an addition to Apple's API, which
/// has no such knob): one ``PeerNetwork`` per process, made on first use from ``configuration``.
public enum MCNetwork {
    private static let state = Mutex<(configuration: PeerNetwork.Configuration?, network: PeerNetwork?)>((nil, nil))

    /// The interfaces and addresses to use. Read once, when the first advertiser, browser or session starts;
    /// by default what the environment says (`MULTIPEER_LOOPBACK=1`, `MULTIPEER_INTERFACE=eth0,...`, see
    /// ``PeerNetwork/Configuration/fromEnvironment(_:)``), else every interface. Setting it later has no effect.
    public static var configuration: PeerNetwork.Configuration {
        get { state.withLock { $0.configuration ?? .fromEnvironment() } }
        set { state.withLock { $0.configuration = newValue } }
    }

    /// The process's network, made on first use.
    static func shared() throws(SessionError) -> PeerNetwork {
        let existing = state.withLock { $0.network }
        if let existing { return existing }
        let made = try PeerNetwork(configuration: configuration)
        return state.withLock { state in
            if let network = state.network { return network }  // another thread made one first
            state.network = made
            return made
        }
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

/// A private serial queue for delegate calls (as Apple documents), with a bound on the calls waiting: a producer
/// that gets ahead of a slow delegate waits in ``deliver(_:)`` instead of queueing without limit.
final class DelegateQueue: Sendable {
    let queue: DispatchQueue
    private let waiting = Mutex<(count: Int, resume: [CheckedContinuation<Void, Never>])>((0, []))
    /// The most calls queued before ``deliver(_:)`` waits.
    let limit: Int

    init(label: String, limit: Int = 256) {
        queue = DispatchQueue(label: label)
        self.limit = limit
    }

    /// Queues `call`; returns once it is queued, waiting first while `limit` calls are queued.
    func deliver(_ call: @escaping @Sendable () -> Void) async {
        while true {
            let full = waiting.withLock { $0.count >= limit }
            if !full { break }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let queued = waiting.withLock { state -> Bool in
                    guard state.count >= limit else { return false }
                    state.resume.append(continuation)
                    return true
                }
                if !queued { continuation.resume() }
            }
        }
        waiting.withLock { $0.count += 1 }
        queue.async { [self] in
            call()
            let woken = waiting.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.count -= 1
                defer { state.resume = [] }
                return state.resume
            }
            for continuation in woken { continuation.resume() }
        }
    }

    /// Queues `call` without waiting (for calls made from synchronous code; they are few).
    func post(_ call: @escaping @Sendable () -> Void) {
        queue.async(execute: call)
    }
}

/// Stops the process with a message naming the rule broken, where Apple's framework raises an exception.
func invalidArgument(_ message: String) -> Never {
    fatalError("MultipeerConnectivity: \(message)")
}
