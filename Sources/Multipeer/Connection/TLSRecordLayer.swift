/// The TLS contexts of one configuration: the dialer's (client) and the acceptor's (server).
///
/// Safety of @unchecked Sendable: an `SSL_CTX` is not changed after ``TLSContext`` configured it, and OpenSSL
/// allows sessions to be made from one context on any thread; each session then belongs to one loop.
final class TLSContexts: @unchecked Sendable {
    private let client: TLSContext?
    private let server: TLSContext?

    /// Makes both contexts when the configuration allows encryption, none otherwise.
    init(configuration: ConnectionConfiguration) throws(ConnectionError) {
        if configuration.encryption.allowsEncryption {
            client = try TLSContext(identity: configuration.identity, role: .client)
            server = try TLSContext(identity: configuration.identity, role: .server)
        } else {
            client = nil
            server = nil
        }
    }

    /// The record-layer factory a ``ConnectionCore`` calls once the preamble chose TLS.
    func makeRecordLayer(expecting: PeerFingerprint?) -> (ConnectionCore.Role) throws(ConnectionError) ->
        any RecordLayer
    {
        { [client, server] (role) throws(ConnectionError) -> any RecordLayer in
            guard let context = role == .dialer ? client : server else {
                throw ConnectionError(code: .internalFailure, reason: "TLS was chosen but this side has no TLS context")
            }
            return TLSRecordLayer(
                session: try TLSSession(context: context, expectedPeer: role == .dialer ? expecting : nil))
        }
    }
}

/// The record layer of an encrypted connection: a ``TLSSession``.
final class TLSRecordLayer: RecordLayer {
    let session: TLSSession

    init(session: TLSSession) {
        self.session = session
    }

    func receivedFromNetwork(_ bytes: [UInt8]) {
        session.receivedCiphertext(bytes)
    }

    func advanceHandshake() throws(ConnectionError) -> Bool {
        try session.advanceHandshake()
    }

    func takeNetworkOutput() -> [UInt8] {
        session.takeCiphertext()
    }

    var pendingNetworkOutput: Int { session.pendingCiphertextByteCount }

    func seal(_ plaintext: [UInt8]) throws(ConnectionError) {
        var failure: ConnectionError?
        plaintext.withUnsafeBytes { bytes in
            do throws(ConnectionError) {
                try session.encrypt(bytes)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    func open(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> Bool {
        guard session.isHandshakeComplete else { return false }
        return try session.decrypt(into: &output, maximum: maximum) == .closeNotify
    }

    func closeOutput() {
        session.sendCloseNotify()
    }

    var authenticatedPeer: PeerFingerprint? { session.peerFingerprint }

    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]? {
        try session.exportKeyingMaterial(label: label, context: [], length: length)
    }

    var protectionDescription: String { "\(session.negotiatedProtocol) \(session.negotiatedCipherSuite)" }
}
