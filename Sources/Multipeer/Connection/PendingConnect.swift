internal import MultipeerIO

/// One `PeerConnection.connect(to:expecting:configuration:loop:)` in progress, so that cancelling the task
/// that waits for it closes its socket (while TCP connects) or aborts its handshake, and the caller learns at
/// once. Loop-confined; resumes its continuation exactly once.
final class PendingConnect: @unchecked Sendable {
    // Safety of @unchecked Sendable: every method runs on `loop`'s thread (the connect and the cancellation
    // handler reach it with `loop.execute`). Sendable only so those closures can capture it.

    private let address: SocketAddress
    private var continuation: CheckedContinuation<PeerConnection, any Error>?
    private var cancelled = false
    /// Abandons the socket's opening (a TCP connect, a relay's connect and bind) while it runs.
    var abandonOpen: (() -> Void)?
    /// The connection's driver while the handshake runs.
    var driver: ConnectionDriver?

    init(address: SocketAddress) {
        self.address = address
    }

    /// Takes the continuation to resume later; if the task was cancelled before the loop got here, resumes it
    /// at once with the cancellation and returns false.
    func begin(_ continuation: CheckedContinuation<PeerConnection, any Error>) -> Bool {
        guard !cancelled else {
            continuation.resume(throwing: cancellation)
            return false
        }
        self.continuation = continuation
        return true
    }

    /// Reports the outcome, unless the connect was cancelled first.
    /// Whether the caller still waits (not finished, not cancelled).
    var isWaiting: Bool { continuation != nil }

    func finish(_ result: Result<PeerConnection, ConnectionError>) {
        abandonOpen = nil
        driver = nil
        continuation?.resume(with: result.mapError { $0 })
        continuation = nil
    }

    /// Abandons the connect: the caller gets the cancellation now, the socket is closed at once.
    func cancel() {
        cancelled = true
        guard let continuation else { return }
        self.continuation = nil
        continuation.resume(throwing: cancellation)
        abandonOpen?()
        abandonOpen = nil
        // Aborting reports the end to the driver's setup handler, which finds nothing left to resume.
        driver?.abort()
        driver = nil
    }

    private var cancellation: ConnectionError {
        .closedLocally("the connect to \(address) was cancelled")
    }
}
