internal import MultipeerIO

/// One TCP allocation on a TURN server (RFC 8656 with RFC 6062 TCP relaying), as the rules of its control
/// connection: allocate with long-term credentials (the first request unauthenticated, answered 401 with the
/// realm and a nonce; a stale nonce, 438, renewed), refresh the allocation at half its lifetime and the
/// permissions every two minutes (they last five), ask the relay to connect out (Connect), and tell the owner
/// when the relay has a connection for us (ConnectionAttempt) or when one of ours is ready to be bound.
///
/// Pure: the owner feeds it received messages and timer expiries with the current time, and performs the
/// actions. Every response is matched to its request by transaction ID; responses to authenticated requests
/// must carry a MESSAGE-INTEGRITY that verifies, or they are ignored (and their request times out).
package struct TURNClientStateMachine {
    /// The user name and password the relay's administrator gave.
    package struct Credentials: Sendable, Hashable {
        package var username: String
        package var password: String

        package init(username: String, password: String) {
            self.username = username
            self.password = password
        }
    }

    /// What the owner must do.
    enum Action: Sendable, Equatable {
        /// Write these bytes on the control connection.
        case send([UInt8])
        /// The allocation exists: its relayed address, and this side's address as the relay sees it.
        case allocated(relayed: SocketAddress, mapped: SocketAddress?)
        /// The relay has a connection from `peer` for us: open a data connection to the relay and send `bind` on
        /// it (RFC 6062 section 5.4).
        case incoming(peer: SocketAddress, bind: [UInt8], connectionID: UInt32)
        /// The relay connected out for the Connect numbered `token`: open a data connection and send `bind`.
        case connected(token: Int, bind: [UInt8], connectionID: UInt32)
        /// The Connect numbered `token` failed.
        case connectFailed(token: Int, RelayError)
        /// The allocation failed or ended; close the control connection (the owner may start over).
        case failed(RelayError)
    }

    private enum Request: Equatable {
        case allocate
        case refresh
        case permission([IPAddress])
        case connect(token: Int, peer: SocketAddress)

        var method: STUNMessage.Method {
            switch self {
            case .allocate: .allocate
            case .refresh: .refresh
            case .permission: .createPermission
            case .connect: .connect
            }
        }

        /// The request's own attributes (XOR addresses are encoded against its transaction ID).
        func attributes(transactionID id: [UInt8]) -> [STUNMessage.Attribute] {
            switch self {
            case .allocate:
                // REQUESTED-TRANSPORT: TCP (protocol 6), RFC 6062 section 5.1.
                [
                    STUNMessage.Attribute(type: STUNMessage.AttributeType.requestedTransport, value: [6, 0, 0, 0]),
                    STUNMessage.numberAttribute(STUNMessage.AttributeType.lifetime, requestedLifetime),
                ]
            case .refresh:
                [STUNMessage.numberAttribute(STUNMessage.AttributeType.lifetime, requestedLifetime)]
            case .permission(let addresses):
                addresses.map {
                    STUNMessage.xorAddress(
                        STUNMessage.AttributeType.xorPeerAddress, SocketAddress($0, port: 0), transactionID: id)
                }
            case .connect(_, let peer):
                [STUNMessage.xorAddress(STUNMessage.AttributeType.xorPeerAddress, peer, transactionID: id)]
            }
        }
    }

    private struct Pending {
        var request: Request
        var sent: IOInstant
        var authenticated: Bool
        var retriedAuthentication = false
        var method: STUNMessage.Method { request.method }
    }

    /// How long a request waits for its answer on the control connection.
    static let requestTimeout: Duration = .seconds(10)
    /// How often permissions are renewed (they last 300 s, RFC 8656 section 9).
    static let permissionRefresh: Duration = .seconds(120)
    /// The allocation lifetime asked for (the relay may give less).
    static let requestedLifetime: UInt32 = 600
    /// The most permissions kept.
    static let maximumPermissions = 64
    /// The most Connects waiting for their answers.
    static let maximumConnects = 32

    let credentials: Credentials
    private var realm: String?
    private var nonce: String?
    private var key: [UInt8]?
    private var pending: [[UInt8]: Pending] = [:]
    private var permissions: [IPAddress] = []
    private var permissionsDue: IOInstant?
    private(set) var relayed: SocketAddress?
    /// Whether the allocation exists and was reported (`.allocated`): connects wait for it.
    var isReported: Bool { relayed != nil && unreported == nil && !isFailed }
    /// Whether connections relayed from the relay's own address (its other allocations: how a peer that dials
    /// through the same relay reaches us) are permitted from the allocation on.
    let permitsRelay: Bool
    /// An allocation not yet reported: it waits for the permissions asked for with it (`needs`) to hold, so a
    /// peer told the relayed address at once is not refused by the relay (RFC 8656 section 9).
    private var unreported: (relayed: SocketAddress, mapped: SocketAddress?, needs: [IPAddress])?
    private(set) var mapped: SocketAddress?
    private var refreshDue: IOInstant?
    private(set) var isFailed = false
    private let makeTransactionID: () -> [UInt8]

    /// - Parameters:
    ///   - permitsRelay: Permit the relay's own relayed address as soon as the allocation exists (see
    ///     ``permitsRelay``).
    init(
        credentials: Credentials, permitsRelay: Bool = false,
        makeTransactionID: @escaping () -> [UInt8] = { SecureRandom.bytes(12) }
    ) {
        self.credentials = credentials
        self.permitsRelay = permitsRelay
        self.makeTransactionID = makeTransactionID
    }

    /// The earliest time ``timerFired(now:)`` must be called.
    var nextDeadline: IOInstant? {
        guard !isFailed else { return nil }
        var deadlines = pending.values.map { $0.sent + Self.requestTimeout }
        if let refreshDue { deadlines.append(refreshDue) }
        if let permissionsDue { deadlines.append(permissionsDue) }
        return deadlines.min()
    }

    /// Asks for the allocation (unauthenticated: the relay answers with its realm and nonce).
    mutating func start(now: IOInstant) -> [Action] { send(.allocate, now: now) }

    /// Lets connections from these addresses reach the allocation (adds to those already permitted). Those given
    /// before the allocation exists are asked for with it, and `.allocated` waits until the relay granted them.
    mutating func permit(_ addresses: [IPAddress], now: IOInstant) -> [Action] {
        var added: [IPAddress] = []
        for address in addresses where !permissions.contains(address) && permissions.count < Self.maximumPermissions {
            permissions.append(address)
            added.append(address)
        }
        guard !added.isEmpty, relayed != nil else { return [] }
        return requestPermissions(added, now: now)
    }

    /// Asks the relay to connect out to `peer` (RFC 6062 section 5.2); the answer comes as `.connected` or
    /// `.connectFailed` with `token`.
    mutating func connect(to peer: SocketAddress, token: Int, now: IOInstant) -> [Action] {
        guard relayed != nil, !isFailed else {
            return [.connectFailed(token: token, RelayError(.unreachable, "the relay has no allocation for us now"))]
        }
        guard
            pending.values.filter({ if case .connect = $0.request { true } else { false } }).count
                < Self.maximumConnects
        else {
            return [.connectFailed(token: token, RelayError(.unreachable, "too many connects wait for the relay"))]
        }
        return send(.connect(token: token, peer: peer), now: now)
    }

    /// A message arrived on the control connection.
    mutating func received(_ bytes: [UInt8], now: IOInstant) -> [Action] {
        guard !isFailed else { return [] }
        let message: STUNMessage
        do {
            message = try STUNMessage(decoding: bytes)
        } catch {
            return fail(RelayError(.badResponse, "the relay sent a malformed message: \(error)"))
        }
        if message.messageClass == .indication {
            return indication(message)
        }
        guard let entry = pending[message.transactionID] else { return [] }  // not ours (or answered already)
        // A challenge (401) or a stale nonce (438) comes unsigned: the relay asks for (new) credentials, and
        // answering it costs only a resend of our own signed request. Anything else must verify under our key.
        let challenge = message.messageClass == .error && [401, 438].contains(message.errorCode?.code ?? 0)
        if entry.authenticated, let key, !challenge, !STUNMessage.verifiesIntegrity(bytes, key: key) {
            return []  // not from the relay that holds our key: the request times out
        }
        pending[message.transactionID] = nil
        if message.messageClass == .success { return succeeded(entry, message, now: now) }
        return failed(entry, message, now: now)
    }

    /// Time passed: refreshes what is due, times out requests.
    mutating func timerFired(now: IOInstant) -> [Action] {
        guard !isFailed else { return [] }
        var actions: [Action] = []
        for (id, entry) in pending where now >= entry.sent + Self.requestTimeout {
            pending[id] = nil
            let error = RelayError(
                .unreachable, "the relay did not answer \(entry.method) within \(Self.requestTimeout)")
            switch entry.request {
            case .connect(let token, _): actions.append(.connectFailed(token: token, error))
            case .allocate, .refresh: return actions + fail(error)
            case .permission: actions += fail(error)
            }
        }
        if let refreshDue, now >= refreshDue {
            self.refreshDue = nil
            actions += send(.refresh, now: now)
        }
        if let permissionsDue, now >= permissionsDue, !permissions.isEmpty {
            self.permissionsDue = nil
            actions += requestPermissions(permissions, now: now)
        }
        return actions
    }

    /// A ConnectionBind request for a data connection (RFC 6062 section 5.4), authenticated.
    func bindRequest(connectionID: UInt32) -> (bytes: [UInt8], transactionID: [UInt8]) {
        let id = makeTransactionID()
        var message = STUNMessage(
            method: .connectionBind, messageClass: .request, transactionID: id,
            attributes: [STUNMessage.numberAttribute(STUNMessage.AttributeType.connectionID, connectionID)])
        message.attributes += authentication
        return (message.encoded(integrityKey: key, fingerprint: true), id)
    }

    /// Whether `bytes`, read on a data connection, are the relay's yes to our ConnectionBind `transactionID`; the
    /// error when it said no.
    func bindAnswer(_ bytes: [UInt8], transactionID: [UInt8]) -> Result<Void, RelayError> {
        guard let message = try? STUNMessage(decoding: bytes), message.transactionID == transactionID,
            message.method == .connectionBind
        else {
            return .failure(RelayError(.badResponse, "the relay answered the connection bind with another message"))
        }
        guard message.messageClass == .success else {
            let error = message.errorCode
            return .failure(
                RelayError(
                    .refused(status: error?.code ?? 0),
                    "the relay refused to bind the connection: \(error.map { "\($0.code) \($0.reason)" } ?? "no reason")"
                ))
        }
        if let key, !STUNMessage.verifiesIntegrity(bytes, key: key) {
            return .failure(RelayError(.badResponse, "the relay's connection bind answer does not verify"))
        }
        return .success(())
    }

    // MARK: Internals

    private var authentication: [STUNMessage.Attribute] {
        guard let realm, let nonce else { return [] }
        return [
            STUNMessage.textAttribute(STUNMessage.AttributeType.username, credentials.username),
            STUNMessage.textAttribute(STUNMessage.AttributeType.realm, realm),
            STUNMessage.textAttribute(STUNMessage.AttributeType.nonce, nonce),
        ]
    }

    private mutating func send(_ request: Request, now: IOInstant, retriedAuthentication: Bool = false) -> [Action] {
        let id = makeTransactionID()
        let message = STUNMessage(
            method: request.method, messageClass: .request, transactionID: id,
            attributes: request.attributes(transactionID: id) + authentication)
        pending[id] = Pending(
            request: request, sent: now, authenticated: key != nil, retriedAuthentication: retriedAuthentication)
        return [.send(message.encoded(integrityKey: key, fingerprint: true))]
    }

    private mutating func requestPermissions(_ addresses: [IPAddress], now: IOInstant) -> [Action] {
        permissionsDue = now + Self.permissionRefresh
        return send(.permission(addresses), now: now)
    }

    private mutating func succeeded(_ entry: Pending, _ message: STUNMessage, now: IOInstant) -> [Action] {
        switch entry.request {
        case .allocate:
            guard let relayed = message.address(STUNMessage.AttributeType.xorRelayedAddress) else {
                return fail(RelayError(.badResponse, "the relay's allocation has no relayed address"))
            }
            self.relayed = relayed
            mapped = message.address(STUNMessage.AttributeType.xorMappedAddress)
            scheduleRefresh(message, now: now)
            if permitsRelay, !permissions.contains(relayed.address), permissions.count < Self.maximumPermissions {
                permissions.append(relayed.address)
            }
            guard !permissions.isEmpty else { return [.allocated(relayed: relayed, mapped: mapped)] }
            unreported = (relayed, mapped, permissions)
            return requestPermissions(permissions, now: now)
        case .refresh:
            scheduleRefresh(message, now: now)
            return []
        case .permission(let granted):
            guard let allocation = unreported, allocation.needs.allSatisfy(granted.contains) else { return [] }
            unreported = nil
            return [.allocated(relayed: allocation.relayed, mapped: allocation.mapped)]
        case .connect(let token, _):
            guard let id = message.number(STUNMessage.AttributeType.connectionID) else {
                return [
                    .connectFailed(token: token, RelayError(.badResponse, "the relay's connect has no connection ID"))
                ]
            }
            return [.connected(token: token, bind: bindRequest(connectionID: id).bytes, connectionID: id)]
        }
    }

    private mutating func scheduleRefresh(_ message: STUNMessage, now: IOInstant) {
        let lifetime = max(30, min(Self.requestedLifetime, message.number(STUNMessage.AttributeType.lifetime) ?? 600))
        refreshDue = now + .seconds(Int64(lifetime / 2))
    }

    private mutating func failed(_ entry: Pending, _ message: STUNMessage, now: IOInstant) -> [Action] {
        let error = message.errorCode ?? (0, "no reason given")
        // 401 with a realm and nonce: authenticate (once); 438: a fresh nonce.
        if error.code == 401 || error.code == 438, let realm = message.text(STUNMessage.AttributeType.realm),
            let nonce = message.text(STUNMessage.AttributeType.nonce), !(error.code == 401 && entry.authenticated)
        {
            self.realm = realm
            self.nonce = nonce
            key = STUNCrypto.longTermKey(
                username: credentials.username, realm: realm, password: credentials.password)
            guard !entry.retriedAuthentication else {
                return outcome(
                    entry, RelayError(.refused(status: error.code), "the relay keeps refusing: \(error.code)"))
            }
            return send(entry.request, now: now, retriedAuthentication: true)
        }
        var reason = "the relay refused \(entry.method): \(error.code) \(error.reason)"
        switch error.code {
        case 401, 441: reason += " (the user name or password is wrong)"
        case 403: reason += " (forbidden for this address or user)"
        case 437: reason += " (the relay holds no such allocation)"
        case 486: reason += " (this user has as many allocations as the relay allows)"
        case 508: reason += " (the relay is out of capacity)"
        default: break
        }
        return outcome(entry, RelayError(.refused(status: error.code), reason))
    }

    private mutating func outcome(_ entry: Pending, _ error: RelayError) -> [Action] {
        switch entry.request {
        case .connect(let token, _): [.connectFailed(token: token, error)]
        case .allocate, .permission: fail(error)
        case .refresh:
            fail(RelayError(.allocationLost, "the relay refused to refresh the allocation: \(error.reason)"))
        }
    }

    private mutating func indication(_ message: STUNMessage) -> [Action] {
        guard message.method == .connectionAttempt, relayed != nil,
            let id = message.number(STUNMessage.AttributeType.connectionID),
            let peer = message.address(STUNMessage.AttributeType.xorPeerAddress)
        else { return [] }
        return [.incoming(peer: peer, bind: bindRequest(connectionID: id).bytes, connectionID: id)]
    }

    private mutating func fail(_ error: RelayError) -> [Action] {
        guard !isFailed else { return [] }
        isFailed = true
        var actions: [Action] = []
        for entry in pending.values {
            if case .connect(let token, _) = entry.request { actions.append(.connectFailed(token: token, error)) }
        }
        pending = [:]
        return actions + [.failed(error)]
    }
}
