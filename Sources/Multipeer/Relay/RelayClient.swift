package import Logging
package import MultipeerIO

/// One TCP allocation on a TURN relay (RFC 8656, RFC 6062), kept for as long as the client runs: the control
/// connection and its ``TURNClientStateMachine``, data connections bound for incoming and outgoing relayed
/// connections, and a new allocation (after 1, 2, 4 ... 60 s) whenever the relay drops the one it gave.
///
/// Loop-confined but for the public methods, which go through the loop. What a relayed connection carries is
/// the peers' TLS, end to end: the relay sees ciphertext.
package final class RelayClient: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread; the public
    // methods reach it with `loop.execute`.

    /// The relay and the credentials it takes.
    package struct Configuration: Sendable, Hashable {
        package var server: SocketAddress
        package var credentials: TURNClientStateMachine.Credentials

        package init(server: SocketAddress, credentials: TURNClientStateMachine.Credentials) {
            self.server = server
            self.credentials = credentials
        }
    }

    /// What happens to the allocation, for the owner.
    package enum Event: Sendable {
        /// An allocation exists (the first, or a new one after a loss): its relayed address. Reported once the
        /// permissions asked for with it (those given before it, and the relay's own addresses with `permitsRelay`)
        /// hold on it, so a peer told the address at once gets through.
        case allocated(SocketAddress)
        /// The allocation failed or was lost; a new one is tried after `retry`.
        case failed(RelayError, retry: Duration)
    }

    /// How long a data connection may take to be bound.
    static let bindTimeout: Duration = .seconds(10)
    /// The longest wait between allocation attempts.
    static let maximumRetryDelay: Duration = .seconds(60)

    let loop: EventLoop
    let configuration: Configuration
    /// Connections relayed from the relay's own address (a peer dialing through the same relay) are let in.
    let permitsRelay: Bool
    private let logger: Logger
    /// Called on the loop with what happens to the allocation.
    private let onEvent: @Sendable (Event) -> Void
    /// Called on the loop with each incoming relayed connection: the socket (raw after the bind), the bytes read
    /// past the bind's answer, and the peer the relay says it comes from.
    private let onIncoming: (TCPConnection, [UInt8], SocketAddress) -> Void
    private var machine: TURNClientStateMachine?
    private var control: TCPConnection?
    private var received: [UInt8] = []
    private var timer: TimerID?
    private var retryDelay: Duration = .seconds(1)
    private var retryTimer: TimerID?
    private var stopped = false
    private var nextToken = 0
    private var connects: [Int: (Result<(TCPConnection, [UInt8]), RelayError>) -> Void] = [:]
    /// Connects asked for while there was no allocation, sent once there is one.
    private var waitingConnects: [(token: Int, peer: SocketAddress)] = []
    /// Where each connect goes, and when the relay first said a connection to there still exists (446).
    private var connectTargets: [Int: (peer: SocketAddress, firstBusy: IOInstant?)] = [:]
    /// How long a connect the relay answers 446 (a connection from this allocation to that peer still exists,
    /// typically the one just closed, which the relay has not yet torn down) is asked again, every
    /// ``busyInterval``: the default handshake timeout, after which the connect fails with the relay's answer (a
    /// relay's teardown time is not ours to promise; a redial waiting 2 s and failing would cost the session
    /// more than one waiting longer).
    static let busyPatience: Duration = .seconds(10)
    /// The wait between two connects the relay found busy.
    static let busyInterval: Duration = .milliseconds(250)
    /// Addresses to permit once an allocation exists (kept across allocations).
    private var permitted: [IPAddress] = []
    /// Data connections being bound, closed if the client stops first.
    private var binding: [ObjectIdentifier: TCPConnection] = [:]

    /// The relayed address of the current allocation.
    private let currentRelayed = Lock<SocketAddress?>(nil)

    /// - Parameters:
    ///   - permitsRelay: Let connections relayed from the relay's own addresses (the one it is reached at and the
    ///     relayed one) in from the allocation on: how a peer that dials through the same relay (from an
    ///     allocation of its own) reaches this one.
    ///   - onEvent: Called on the loop with what happens to the allocation.
    ///   - onIncoming: Called on the loop with each incoming relayed connection.
    package init(
        configuration: Configuration, loop: EventLoop, logger: Logger, permitsRelay: Bool = false,
        onEvent: @escaping @Sendable (Event) -> Void,
        onIncoming: @escaping (TCPConnection, [UInt8], SocketAddress) -> Void
    ) {
        self.configuration = configuration
        self.permitsRelay = permitsRelay
        // The address the relay is reached at; the machine adds the relayed one once it is known.
        if permitsRelay { permitted = [configuration.server.address] }
        self.loop = loop
        self.logger = logger
        self.onEvent = onEvent
        self.onIncoming = onIncoming
    }

    /// The relayed address now, if there is an allocation.
    package var relayedAddress: SocketAddress? { currentRelayed.withLock { $0 } }

    /// Starts allocating (from any thread).
    package func start() { _ = loop.execute { [self] in allocate() } }

    /// Lets connections relayed from these addresses reach us (from any thread).
    package func permit(_ addresses: [IPAddress]) {
        _ = loop.execute { [self] in
            for address in addresses where !permitted.contains(address) { permitted.append(address) }
            guard var machine else { return }
            let actions = machine.permit(addresses, now: loop.clock.now())
            self.machine = machine
            perform(actions)
        }
    }

    /// Asks the relay to connect to `peer` and binds the connection (on the loop); `completion` gets the raw
    /// socket and any bytes read past the bind's answer. Returns a function that abandons it.
    func connect(
        to peer: SocketAddress, completion: @escaping (Result<(TCPConnection, [UInt8]), RelayError>) -> Void
    ) -> () -> Void {
        precondition(loop.inEventLoop, "RelayClient.connect is called on its loop")
        nextToken += 1
        let token = nextToken
        guard !stopped else {
            loop.scheduleTimer(after: .zero) {
                completion(.failure(RelayError(.unreachable, "the relay client stopped")))
            }
            return {}
        }
        connects[token] = completion
        connectTargets[token] = (peer, nil)
        if var machine, machine.isReported {
            let actions = machine.connect(to: peer, token: token, now: loop.clock.now())
            self.machine = machine
            perform(actions)
        } else {
            // Asked for once the allocation is reported (being made, or made again after a loss).
            waitingConnects.append((token, peer))
        }
        return { [self] in
            connects[token] = nil
            connectTargets[token] = nil
            waitingConnects.removeAll { $0.token == token }
        }
    }

    /// Closes the allocation's control connection (the relay frees it) and every bind under way.
    package func stop() {
        _ = loop.execute { [self] in
            stopped = true
            tearDown()
            if let retryTimer { loop.cancelTimer(retryTimer) }
            retryTimer = nil
            for connection in binding.values { connection.close() }
            binding = [:]
            let waiting = connects
            connects = [:]
            connectTargets = [:]
            waitingConnects = []
            for completion in waiting.values {
                completion(.failure(RelayError(.unreachable, "the relay client stopped")))
            }
        }
    }

    // MARK: The control connection

    private func allocate() {
        guard !stopped, control == nil else { return }
        let server = configuration.server
        TCPConnection.connect(to: server, loop: loop) { [self] result in
            guard !stopped else {
                if case .success(let connection) = result { connection.close() }
                return
            }
            switch result {
            case .failure(let error):
                lost(RelayError(.unreachable, "cannot reach the relay \(server): \(error)"))
            case .success(let connection):
                control = connection
                received = []
                var machine = TURNClientStateMachine(
                    credentials: configuration.credentials, permitsRelay: permitsRelay)
                // Asked for with the allocation, which is reported once they hold.
                _ = machine.permit(permitted, now: loop.clock.now())
                let actions = machine.start(now: loop.clock.now())
                self.machine = machine
                connection.setHandlers(
                    onData: { [self] bytes in controlReceived(bytes) },
                    onClose: { [self] error in
                        lost(
                            RelayError(
                                .allocationLost,
                                "the relay \(server) closed the control connection"
                                    + (error.map { ": \($0)" } ?? "")))
                    })
                perform(actions)
            }
        }
    }

    private func controlReceived(_ bytes: [UInt8]) {
        received += bytes
        while true {
            let length: Int?
            do {
                length = try STUNMessage.frameLength(received)
            } catch {
                return lost(RelayError(.badResponse, "the relay sent something that is not STUN: \(error)"))
            }
            guard let length, received.count >= length else { return }
            let message = Array(received[0..<length])
            received.removeFirst(length)
            guard var machine else { return }
            let actions = machine.received(message, now: loop.clock.now())
            self.machine = machine
            perform(actions)
            guard control != nil else { return }
        }
    }

    private func perform(_ actions: [TURNClientStateMachine.Action]) {
        for action in actions {
            switch action {
            case .send(let bytes):
                control?.write(bytes)
            case .allocated(let relayed, let mapped):
                retryDelay = .seconds(1)
                currentRelayed.withLock { $0 = relayed }
                logger.info(
                    "relay \(configuration.server): allocated \(relayed) (we are \(mapped.map { "\($0)" } ?? "?") to it)"
                )
                if var machine {
                    var more: [TURNClientStateMachine.Action] = []
                    for (token, peer) in waitingConnects where connects[token] != nil {
                        more += machine.connect(to: peer, token: token, now: loop.clock.now())
                    }
                    waitingConnects = []
                    self.machine = machine
                    perform(more)
                }
                onEvent(.allocated(relayed))
            case .incoming(let peer, let bind, _):
                bindData(bind) { [self] result in
                    switch result {
                    case .success(let (connection, rest)):
                        logger.info("relay \(configuration.server): a connection from \(peer) came through the relay")
                        onIncoming(connection, rest, peer)
                    case .failure(let error):
                        logger.warning("relay: an incoming connection from \(peer) could not be bound: \(error.reason)")
                    }
                }
            case .connected(let token, let bind, _):
                guard connects[token] != nil else { continue }
                bindData(bind) { [self] result in
                    connectTargets[token] = nil
                    guard let completion = connects.removeValue(forKey: token) else {
                        if case .success(let (connection, _)) = result { connection.close() }
                        return
                    }
                    completion(result)
                }
            case .connectFailed(let token, let error):
                let now = loop.clock.now()
                if error.code == .refused(status: 446), let target = connectTargets[token],
                    now - (target.firstBusy ?? now) < Self.busyPatience, connects[token] != nil
                {
                    if target.firstBusy == nil { connectTargets[token]?.firstBusy = now }
                    loop.scheduleTimer(after: Self.busyInterval) { [self] in
                        guard connects[token] != nil, var machine, machine.relayed != nil else { return }
                        let again = machine.connect(to: target.peer, token: token, now: loop.clock.now())
                        self.machine = machine
                        perform(again)
                    }
                    continue
                }
                connectTargets[token] = nil
                connects.removeValue(forKey: token)?(.failure(error))
            case .failed(let error):
                lost(error)
            }
        }
        rearm()
    }

    private func rearm() {
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        guard let deadline = machine?.nextDeadline else { return }
        timer = loop.scheduleTimer(at: deadline) { [self] in
            timer = nil
            guard var machine else { return }
            let actions = machine.timerFired(now: loop.clock.now())
            self.machine = machine
            perform(actions)
        }
    }

    /// The allocation is gone: report it, and allocate again after the current delay (doubling to a minute).
    private func lost(_ error: RelayError) {
        guard retryTimer == nil else { return }  // already lost, and a new allocation is scheduled
        tearDown()
        guard !stopped else { return }
        let delay = retryDelay
        retryDelay = min(retryDelay * 2, Self.maximumRetryDelay)
        logger.warning("relay \(configuration.server): \(error.reason); allocating again in \(delay)")
        onEvent(.failed(error, retry: delay))
        if let retryTimer { loop.cancelTimer(retryTimer) }
        retryTimer = loop.scheduleTimer(after: delay) { [self] in
            retryTimer = nil
            allocate()
        }
    }

    private func tearDown() {
        control?.close()
        control = nil
        machine = nil
        received = []
        if let timer { loop.cancelTimer(timer) }
        timer = nil
        currentRelayed.withLock { $0 = nil }
        // Connects sent on this allocation end with it; those still waiting for one wait for the next.
        let waiting = Set(waitingConnects.map(\.token))
        for (token, completion) in connects where !waiting.contains(token) {
            connects[token] = nil
            connectTargets[token] = nil
            completion(.failure(RelayError(.allocationLost, "the relay allocation ended before the connect")))
        }
    }

    // MARK: Data connections

    /// Opens a data connection to the relay, sends the ConnectionBind and waits for its answer.
    private func bindData(
        _ bind: [UInt8], completion: @escaping (Result<(TCPConnection, [UInt8]), RelayError>) -> Void
    ) {
        guard let machine, bind.count >= 20 else {
            return completion(.failure(RelayError(.allocationLost, "the relay allocation ended")))
        }
        let transactionID = Array(bind[8..<20])
        let server = configuration.server
        var done = false
        var buffer: [UInt8] = []
        var deadline: TimerID?
        var socket: TCPConnection?
        let finish: (Result<(TCPConnection, [UInt8]), RelayError>) -> Void = { [self] result in
            guard !done else { return }
            done = true
            if let deadline { loop.cancelTimer(deadline) }
            if let socket { binding[ObjectIdentifier(socket)] = nil }
            if case .failure = result { socket?.close() }
            completion(result)
        }
        deadline = loop.scheduleTimer(after: Self.bindTimeout) {
            finish(
                .failure(
                    RelayError(.unreachable, "the relay did not bind a data connection within \(Self.bindTimeout)")))
        }
        socket = TCPConnection.beginConnect(to: server, loop: loop) { [self] result in
            switch result {
            case .failure(let error):
                finish(
                    .failure(RelayError(.unreachable, "cannot open a data connection to the relay \(server): \(error)"))
                )
            case .success(let connection):
                guard !done else { return connection.close() }
                socket = connection
                binding[ObjectIdentifier(connection)] = connection
                connection.setHandlers(
                    onData: { bytes in
                        guard !done else { return }
                        buffer += bytes
                        let length: Int?
                        do {
                            length = try STUNMessage.frameLength(buffer)
                        } catch {
                            return finish(.failure(RelayError(.badResponse, "the relay's bind answer: \(error)")))
                        }
                        guard let length, buffer.count >= length else { return }
                        switch machine.bindAnswer(Array(buffer[0..<length]), transactionID: transactionID) {
                        case .success: finish(.success((connection, Array(buffer[length...]))))
                        case .failure(let error): finish(.failure(error))
                        }
                    },
                    onClose: { _ in
                        finish(
                            .failure(RelayError(.unreachable, "the relay closed a data connection before binding it")))
                    })
                connection.write(bind)
            }
        }
        if let socket { binding[ObjectIdentifier(socket)] = socket }
    }
}
