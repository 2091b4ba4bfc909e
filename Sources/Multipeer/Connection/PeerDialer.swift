internal import MultipeerIO

/// Runs one dial to a peer with several addresses: performs what a ``HappyEyeballsStateMachine`` asks (an
/// attempt is a task running the single-address connect, abandoned through task cancellation), keeps one loop
/// timer armed for the machine's next deadline, and resumes the caller once, with the winner or the failure.
///
/// Loop-confined, except for the caller's continuation: it sits behind a lock, so that an attempt that finds
/// the loop stopped can still end the dial from its own thread.
final class PeerDialer: @unchecked Sendable {
    // Safety of @unchecked Sendable: `machine`, `tasks`, `timer` and `cancelled` are touched only on `loop`'s
    // thread (everything reaches it through `loop.execute` or a loop timer); `continuation` is behind a Lock.

    /// The most addresses one dial accepts.
    ///
    /// 32: a dual-stack host on a few links has a handful of addresses (IPv4, link-local, ULA and global IPv6
    /// on each); 32 leaves room for many links while bounding what one advertisement, which any host on the
    /// link can send, can make a dial start (a task and a socket per address).
    static let maximumAddresses = 32

    private let loop: EventLoop
    private let expecting: PeerFingerprint?
    private let configuration: ConnectionConfiguration
    private var machine: HappyEyeballsStateMachine
    /// The running attempts by number; an attempt leaves when it ends or is abandoned.
    private var tasks: [Int: Task<Void, Never>] = [:]
    private var timer: TimerID?
    private var cancelled = false
    private let continuation = Lock<CheckedContinuation<PeerConnection, any Error>?>(nil)

    private init(
        addresses: [SocketAddress], expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        dial: DialConfiguration, loop: EventLoop
    ) {
        self.loop = loop
        self.expecting = expecting
        self.configuration = configuration
        relayed = configuration.relayRoutes?.relayed(among: addresses) ?? []
        machine = HappyEyeballsStateMachine(
            addresses: addresses, relayed: relayed, configuration: dial, now: loop.clock.now())
    }

    /// The addresses reached through a relay (tried after the direct ones).
    private let relayed: Set<SocketAddress>

    /// Dials `addresses` and returns the first connection established (see ``PeerConnection``'s
    /// `connect(to:expecting:configuration:dial:loop:)` for the rules).
    static func dial(
        _ addresses: [SocketAddress], expecting: PeerFingerprint?, configuration: ConnectionConfiguration,
        dial: DialConfiguration, loop: EventLoop
    ) async throws(ConnectionError) -> PeerConnection {
        try dial.validate()
        guard addresses.count <= maximumAddresses else {
            throw ConnectionError.invalidConfiguration(
                "\(addresses.count) addresses to dial; at most \(maximumAddresses) are tried for one peer")
        }
        let dialer = PeerDialer(
            addresses: addresses, expecting: expecting, configuration: configuration, dial: dial, loop: loop)
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation {
                    (continuation: CheckedContinuation<PeerConnection, any Error>) in
                    if !loop.execute({ dialer.begin(continuation) }) {
                        continuation.resume(throwing: ConnectionError.closedLocally("the loop stopped"))
                    }
                }
            } onCancel: {
                // Runs before `begin` when the task was cancelled already; the loop keeps that order.
                _ = loop.execute { dialer.cancel() }
            }
        } catch {
            throw ConnectionError.wrapping(error)
        }
    }

    private func begin(_ continuation: CheckedContinuation<PeerConnection, any Error>) {
        guard !cancelled else {
            continuation.resume(throwing: ConnectionError.closedLocally("the dial was cancelled"))
            return
        }
        self.continuation.withLock { $0 = continuation }
        perform(machine.start(now: loop.clock.now()))
    }

    private func cancel() {
        cancelled = true
        perform(machine.cancel())
    }

    private func perform(_ actions: [HappyEyeballsStateMachine.Action], connection: PeerConnection? = nil) {
        for action in actions {
            switch action {
            case .startAttempt(let attempt, let address):
                startAttempt(attempt, address: address)
            case .cancelAttempt(let attempt):
                tasks.removeValue(forKey: attempt)?.cancel()
            case .deliver:
                if let connection, !resume(.success(connection)) { Self.closeUnwanted(connection) }
            case .closeLateConnection:
                if let connection { Self.closeUnwanted(connection) }
            case .fail(let error):
                resume(.failure(error))
            }
        }
        rearmTimer()
    }

    private func startAttempt(_ attempt: Int, address: SocketAddress) {
        let (loop, expecting, configuration) = (loop, expecting, configuration)
        let relay =
            relayed.contains(address) ? configuration.relayRoutes?.client(for: configuration.identity.fingerprint) : nil
        tasks[attempt] = Task {
            let result: Result<PeerConnection, ConnectionError>
            do throws(ConnectionError) {
                if let relay {
                    result = .success(
                        try await PeerConnection.connect(
                            relayedTo: address, through: relay, expecting: expecting, configuration: configuration,
                            loop: loop))
                } else {
                    result = .success(
                        try await PeerConnection.connect(
                            to: address, expecting: expecting, configuration: configuration, loop: loop))
                }
            } catch {
                result = .failure(error)
            }
            if !loop.execute({ self.attemptEnded(attempt, result) }) {
                if case .success(let connection) = result { Self.closeUnwanted(connection) }
                self.resume(.failure(.closedLocally("the loop stopped")))
            }
        }
    }

    private func attemptEnded(_ attempt: Int, _ result: Result<PeerConnection, ConnectionError>) {
        tasks[attempt] = nil
        let now = loop.clock.now()
        switch result {
        case .success(let connection):
            perform(machine.attemptSucceeded(attempt, now: now), connection: connection)
        case .failure(let error):
            perform(machine.attemptFailed(attempt, error: error, now: now))
        }
    }

    private func rearmTimer() {
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        guard let deadline = machine.nextDeadline else { return }
        timer = loop.scheduleTimer(at: deadline) { [self] in
            timer = nil
            perform(machine.timerFired(now: loop.clock.now()))
        }
    }

    /// Resumes the caller unless it was resumed already; returns whether this call did.
    @discardableResult
    private func resume(_ result: Result<PeerConnection, ConnectionError>) -> Bool {
        guard let continuation = continuation.withLock({ $0.take() }) else { return false }
        continuation.resume(with: result.mapError { $0 })
        return true
    }

    /// A connection the dial no longer wants: another address won, or the caller is gone. It is closed
    /// gracefully, so the peer learns why, without anyone waiting for the goodbye.
    private static func closeUnwanted(_ connection: PeerConnection) {
        connection.driver.requestClose(code: 0, text: "another address of this peer connected first")
    }
}
