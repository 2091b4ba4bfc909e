internal import MultipeerIO

/// The TLS contexts of one identity: the dialer's (client) and the acceptor's (server), made on first use and
/// shared by every connection of that identity.
///
/// Safety of @unchecked Sendable: the contexts are made and stored under a lock; an `SSL_CTX` is not changed
/// after ``TLSContext`` configured it, and OpenSSL allows sessions to be made from one context on any thread;
/// each session then belongs to one loop.
final class TLSContexts: @unchecked Sendable {
    /// Weak: the identity owns this object (``PeerIdentity/tlsContexts``).
    private weak var identity: PeerIdentity?
    private let contexts = Lock<[TLSRole: TLSContext]>([:])

    /// The contexts of `identity`, made once per identity and role when first needed: a context holds the
    /// identity's certificate and costs about a millisecond and several kilobytes to make.
    static func of(_ identity: PeerIdentity) -> TLSContexts {
        identity.tlsContexts.withLock { cached in
            if let cached { return cached }
            let contexts = TLSContexts(identity: identity)
            cached = contexts
            return contexts
        }
    }

    private init(identity: PeerIdentity) {
        self.identity = identity
    }

    /// The context for `role`, made on first use.
    func context(_ role: TLSRole) throws(ConnectionError) -> TLSContext {
        let result = contexts.withLock { contexts -> Result<TLSContext, ConnectionError> in
            if let context = contexts[role] { return .success(context) }
            guard let identity else {
                return .failure(ConnectionError(code: .internalFailure, reason: "the identity no longer exists"))
            }
            do throws(ConnectionError) {
                let context = try TLSContext(identity: identity, role: role)
                contexts[role] = context
                return .success(context)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// The record-layer factory a ``ConnectionCore`` calls once the preamble chose TLS.
    func makeRecordLayer(expecting: PeerFingerprint?) -> (ConnectionCore.Role) throws(ConnectionError) ->
        any RecordLayer
    {
        { [self] (role) throws(ConnectionError) -> any RecordLayer in
            let context = try context(role == .dialer ? .client : .server)
            return TLSRecordLayer(
                session: try TLSSession(context: context, expectedPeer: role == .dialer ? expecting : nil))
        }
    }
}

/// The record layer of an encrypted connection: a ``TLSSession``.
final class TLSRecordLayer: RecordLayer {
    let session: TLSSession
    /// Frames are encoded here before encryption; kept between seals while the connection is busy.
    private var plaintext: [UInt8] = []

    init(session: TLSSession) {
        self.session = session
    }

    func receivedFromNetwork(_ bytes: UnsafeRawBufferPointer, into decoder: inout FrameDecoder)
        throws(ConnectionError)
    {
        guard session.canDecryptDirectly else {
            session.receivedCiphertext(bytes)
            return
        }
        _ = try decoder.fill { (buffer) throws(ConnectionError) in
            try session.receivedCiphertext(bytes, decryptingInto: &buffer)
        }
    }

    func advanceHandshake() throws(ConnectionError) -> Bool {
        try session.advanceHandshake()
    }

    func drainNetworkOutput(_ body: (UnsafeRawBufferPointer) -> Void) {
        session.drainCiphertext(body)
    }

    var pendingNetworkOutput: Int { session.pendingCiphertextByteCount }

    func seal(_ encode: (inout [UInt8]) -> Void) throws(ConnectionError) {
        plaintext.removeAll(keepingCapacity: true)
        encode(&plaintext)
        var failure: ConnectionError?
        plaintext.withUnsafeBytes { bytes in
            do throws(ConnectionError) {
                try session.encrypt(bytes)
            } catch {
                failure = error
            }
        }
        plaintext.removeAll(keepingCapacity: true)
        if let failure { throw failure }
    }

    func open(into decoder: inout FrameDecoder, maximum: Int) throws(ConnectionError) -> (count: Int, closeNotify: Bool)
    {
        guard session.isHandshakeComplete else { return (0, false) }
        var status = TLSReadStatus.ok
        let count = try decoder.fill { (buffer) throws(ConnectionError) in
            status = try session.decrypt(into: &buffer, maximum: maximum)
        }
        return (count, status == .closeNotify)
    }

    func closeOutput() {
        session.sendCloseNotify()
    }

    func releaseIdleBuffers() {
        if plaintext.isEmpty { plaintext = [] }
        session.releaseIdleBuffers()
    }

    var authenticatedPeer: PeerFingerprint? { session.peerFingerprint }

    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]? {
        try session.exportKeyingMaterial(label: label, context: [], length: length)
    }

    func releaseHandshakeState() {
        session.releaseHandshakeState()
    }

    var protectionDescription: String { "\(session.negotiatedProtocol) \(session.negotiatedCipherSuite)" }
}
