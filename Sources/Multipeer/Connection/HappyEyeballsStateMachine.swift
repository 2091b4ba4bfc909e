internal import MultipeerIO

/// The schedule of a dial to a peer with several addresses, in the manner of RFC 8305 (Happy Eyeballs
/// version 2): addresses ordered with the families interleaved, IPv6 first; one attempt started at once, the
/// next one each time an attempt has been pending for the connection attempt delay or as soon as one fails;
/// the first established connection wins and every other attempt is cancelled; a bound on the whole dial.
///
/// Pure: the owner reports attempt results and timer expiry with the current time, and performs the actions
/// returned. An attempt is the whole connection setup (TCP, TLS and hello), so an address that answers with
/// the wrong identity fails like one that refuses, and the next address is tried.
struct HappyEyeballsStateMachine {
    /// What the owner must do.
    enum Action: Equatable {
        /// Start connecting to the address; report the outcome with the attempt's number.
        case startAttempt(Int, SocketAddress)
        /// Abandon a pending attempt: its result is no longer wanted.
        case cancelAttempt(Int)
        /// Hand the attempt's connection to the caller: the dial succeeded.
        case deliver(Int)
        /// Close the connection an attempt made after the dial was already over.
        case closeLateConnection(Int)
        /// The dial failed.
        case fail(ConnectionError)
    }

    private enum AttemptState: Equatable {
        case notStarted
        case pending
        case failed(ConnectionError)
        case won
        /// Cancelled because another attempt won or the caller gave up.
        case abandoned
    }

    /// The addresses in the order they are tried.
    let addresses: [SocketAddress]
    private var attempts: [AttemptState]
    /// The number of attempts started so far: the next attempt uses `addresses[started]`.
    private var started = 0
    private var lastStart: IOInstant?
    private let attemptDelay: Duration
    private let timeout: Duration
    /// When the whole dial gives up.
    let deadline: IOInstant
    /// Whether the dial has an outcome (delivered or failed); later results only close late connections.
    private(set) var isFinished = false

    /// Creates the schedule; nothing starts before ``start(now:)``.
    /// - Parameters:
    ///   - addresses: The peer's addresses in the caller's order of preference within each family; duplicates
    ///     are tried once.
    ///   - configuration: The attempt delay and the dial's timeout.
    ///   - now: The current time.
    /// - Parameter relayed: Addresses that reach the peer through a relay: tried after every direct one, in the
    ///   given order.
    init(
        addresses: [SocketAddress], relayed: Set<SocketAddress> = [], configuration: DialConfiguration,
        now: IOInstant
    ) {
        let direct = addresses.filter { !relayed.contains($0) }
        var seen = Set(direct)
        self.addresses = Self.ordered(direct) + addresses.filter { relayed.contains($0) && seen.insert($0).inserted }
        attempts = Array(repeating: .notStarted, count: self.addresses.count)
        attemptDelay = configuration.connectionAttemptDelay
        timeout = configuration.timeout
        deadline = now + configuration.timeout
    }

    /// RFC 8305 section 4 with a First Address Family Count of 1: IPv6, IPv4, IPv6, IPv4, ..., then the rest
    /// of whichever family has more; within a family the given order, duplicates dropped.
    static func ordered(_ addresses: [SocketAddress]) -> [SocketAddress] {
        var seen = Set<SocketAddress>()
        var v6: [SocketAddress] = []
        var v4: [SocketAddress] = []
        for address in addresses where seen.insert(address).inserted {
            if address.family == .ipv6 { v6.append(address) } else { v4.append(address) }
        }
        var result: [SocketAddress] = []
        result.reserveCapacity(v6.count + v4.count)
        for index in 0..<max(v6.count, v4.count) {
            if index < v6.count { result.append(v6[index]) }
            if index < v4.count { result.append(v4[index]) }
        }
        return result
    }

    /// When the owner must call ``timerFired(now:)`` next, or nil once the dial is over.
    var nextDeadline: IOInstant? {
        guard !isFinished else { return nil }
        if started < addresses.count, let lastStart { return min(lastStart + attemptDelay, deadline) }
        return deadline
    }

    /// Starts the first attempt.
    /// - Parameter now: The current time.
    /// - Returns: The actions to perform.
    mutating func start(now: IOInstant) -> [Action] {
        guard !isFinished, started == 0 else { return [] }
        guard !addresses.isEmpty else {
            isFinished = true
            return [.fail(ConnectionError(code: .unreachable, reason: "the peer has no address to dial"))]
        }
        return [startNext(now: now)]
    }

    /// Time passed: starts the next attempt when the delay has passed, or ends the dial at its deadline.
    /// - Parameter now: The current time.
    /// - Returns: The actions to perform.
    mutating func timerFired(now: IOInstant) -> [Action] {
        guard !isFinished else { return [] }
        if now >= deadline { return timeOut() }
        if started < addresses.count, let lastStart, now >= lastStart + attemptDelay {
            return [startNext(now: now)]
        }
        return []
    }

    /// An attempt established its connection.
    /// - Parameters:
    ///   - attempt: The attempt's number, from ``Action/startAttempt(_:_:)``.
    ///   - now: The current time.
    /// - Returns: ``Action/deliver(_:)`` and the cancellation of every other pending attempt, or
    ///   ``Action/closeLateConnection(_:)`` when the dial is already over.
    mutating func attemptSucceeded(_ attempt: Int, now: IOInstant) -> [Action] {
        guard !isFinished, attempts[attempt] == .pending else {
            if attempts[attempt] == .pending { attempts[attempt] = .abandoned }
            return [.closeLateConnection(attempt)]
        }
        attempts[attempt] = .won
        isFinished = true
        return [.deliver(attempt)] + abandonPending()
    }

    /// An attempt failed.
    /// - Parameters:
    ///   - attempt: The attempt's number.
    ///   - error: Why it failed.
    ///   - now: The current time.
    /// - Returns: The next attempt at once if an address is left; the dial's failure if this was the last
    ///   pending attempt; nothing otherwise.
    mutating func attemptFailed(_ attempt: Int, error: ConnectionError, now: IOInstant) -> [Action] {
        guard !isFinished, attempts[attempt] == .pending else { return [] }
        attempts[attempt] = .failed(error)
        if started < addresses.count { return [startNext(now: now)] }
        guard attempts.contains(.pending) else {
            isFinished = true
            return [.fail(failure(timedOut: false))]
        }
        return []
    }

    /// The caller no longer wants the connection: every pending attempt is cancelled and the dial fails.
    /// - Returns: The actions to perform.
    mutating func cancel() -> [Action] {
        guard !isFinished else { return [] }
        isFinished = true
        let actions = abandonPending()
        return actions + [.fail(.closedLocally("the dial was cancelled"))]
    }

    private mutating func startNext(now: IOInstant) -> Action {
        let attempt = started
        started += 1
        lastStart = now
        attempts[attempt] = .pending
        return .startAttempt(attempt, addresses[attempt])
    }

    private mutating func abandonPending() -> [Action] {
        var actions: [Action] = []
        for attempt in attempts.indices where attempts[attempt] == .pending {
            attempts[attempt] = .abandoned
            actions.append(.cancelAttempt(attempt))
        }
        return actions
    }

    private mutating func timeOut() -> [Action] {
        isFinished = true
        var actions: [Action] = []
        for attempt in attempts.indices where attempts[attempt] == .pending {
            attempts[attempt] = .failed(
                ConnectionError(
                    code: .handshakeTimedOut(limit: timeout),
                    reason: "no connection within the dial's limit of \(timeout)"))
            actions.append(.cancelAttempt(attempt))
        }
        return actions + [.fail(failure(timedOut: true))]
    }

    /// The dial's error. A security refusal (the peer at some address proved another identity, the two sides
    /// disagree on the group secret or on encryption, or plaintext was offered where TLS is needed) is the
    /// error's code, so it is not lost among the
    /// addresses that did not answer; otherwise the code is ``ConnectionError/Code/unreachable``. Either way
    /// ``ConnectionError/attempts`` lists every attempt.
    private func failure(timedOut: Bool) -> ConnectionError {
        var failed: [ConnectionAttempt] = []
        for (attempt, state) in attempts.enumerated() {
            if case .failed(let error) = state {
                failed.append(ConnectionAttempt(address: addresses[attempt], error: error))
            }
        }
        let untried = addresses[started...].map(\.description)
        var summary = failed.map(\.description).joined(separator: "; ")
        if !untried.isEmpty { summary += "; not tried: " + untried.joined(separator: ", ") }
        var error: ConnectionError
        if let refused = failed.first(where: { $0.error.code.isSecurityRefusal }) {
            error = ConnectionError(
                code: refused.error.code,
                reason: "the peer at \(refused.address) failed a security check (\(refused.error.reason)); "
                    + "all attempts: \(summary)")
        } else {
            let cause = timedOut ? "within the dial's limit of \(timeout)" : "at any of its addresses"
            error = ConnectionError(code: .unreachable, reason: "no connection to the peer \(cause): \(summary)")
        }
        error.attempts = failed
        return error
    }
}

extension ConnectionError.Code {
    /// Whether the far side was reached and the connection refused because identities, group secrets or
    /// encryption preferences did not fit (or plaintext was offered where only TLS proves the peer): something
    /// a user must see, unlike an address that did not answer.
    var isSecurityRefusal: Bool {
        switch self {
        case .identityMismatch, .groupSecretMismatch, .encryptionMismatch, .plaintextRefused: true
        default: false
        }
    }
}
