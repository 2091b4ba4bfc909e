import Testing

@testable import Multipeer

extension SplitMix64 {
    /// `count` random bytes.
    mutating func bytes(_ count: Int) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: count)
        result.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let word = next()
                let length = min(8, buffer.count - offset)
                withUnsafeBytes(of: word) {
                    buffer.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: length)
                }
                offset += length
            }
        }
        return result
    }
}

/// What the tests do with one end of a TLS connection, whichever record layer carries its data after the
/// handshake: this package's (``TLSSession``) or OpenSSL's (``OpenSSLRecordSession``).
protocol TLSEndpoint: AnyObject {
    init(context: TLSContext, expectedPeer: PeerFingerprint?) throws(ConnectionError)
    func receivedCiphertext(_ bytes: [UInt8])
    func advanceHandshake() throws(ConnectionError) -> Bool
    func takeCiphertext() -> [UInt8]
    func encrypt(_ plaintext: UnsafeRawBufferPointer) throws(ConnectionError)
    func decrypt(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> TLSReadStatus
    func sendCloseNotify()
    var negotiatedCipherSuite: String { get }
}

extension TLSSession: TLSEndpoint {}

/// Two identities and a client and a server session between them.
struct TLSPair {
    let clientIdentity: PeerIdentity
    let serverIdentity: PeerIdentity
    let client: TLSSession
    let server: TLSSession

    /// A pair on new identities (or the ones given); the client expects `expectedPeer`, by default the
    /// server's fingerprint.
    init(
        clientIdentity: PeerIdentity? = nil, serverIdentity: PeerIdentity? = nil,
        expectedPeer: PeerFingerprint?? = .none, clientHooks: TLSContextTestHooks = TLSContextTestHooks(),
        serverHooks: TLSContextTestHooks = TLSContextTestHooks()
    ) throws {
        let clientIdentity = try clientIdentity ?? PeerIdentity.generate(displayName: "client")
        let serverIdentity = try serverIdentity ?? PeerIdentity.generate(displayName: "server")
        self.clientIdentity = clientIdentity
        self.serverIdentity = serverIdentity
        let clientContext = try TLSContext(identity: clientIdentity, role: .client, testHooks: clientHooks)
        let serverContext = try TLSContext(identity: serverIdentity, role: .server, testHooks: serverHooks)
        client = try TLSSession(context: clientContext, expectedPeer: expectedPeer ?? serverIdentity.fingerprint)
        server = try TLSSession(context: serverContext, expectedPeer: nil)
    }

    /// A pair of sessions from existing contexts, the client expecting `expectedPeer`.
    init(clientContext: TLSContext, serverContext: TLSContext, expectedPeer: PeerFingerprint?) throws {
        clientIdentity = clientContext.identity
        serverIdentity = serverContext.identity
        client = try TLSSession(context: clientContext, expectedPeer: expectedPeer)
        server = try TLSSession(context: serverContext, expectedPeer: nil)
    }
}

/// How one side's handshake ended: completed, failed, or still waiting when the shuttling stopped.
enum HandshakeSide {
    case waiting
    case complete
    case failed(ConnectionError)

    var isComplete: Bool {
        if case .complete = self { return true }
        return false
    }

    var name: String {
        switch self {
        case .waiting: "waiting"
        case .complete: "complete"
        case .failed: "failed"
        }
    }

    var error: ConnectionError? {
        if case .failed(let error) = self { return error }
        return nil
    }
}

/// The end of a handshake run between two sessions.
struct HandshakeRun {
    var client = HandshakeSide.waiting
    var server = HandshakeSide.waiting
    /// The number of rounds (one turn of each side) it took.
    var rounds = 0
}

/// Moves everything `from` has to send into `to`; returns the number of bytes moved.
@discardableResult
func shuttle(from: any TLSEndpoint, to: any TLSEndpoint) -> Int {
    let bytes = from.takeCiphertext()
    to.receivedCiphertext(bytes)
    return bytes.count
}

/// Advances `session`'s handshake once unless it already ended.
private func advance(_ session: any TLSEndpoint, _ side: inout HandshakeSide) {
    guard case .waiting = side else { return }
    do {
        if try session.advanceHandshake() { side = .complete }
    } catch {
        side = .failed(error)
    }
}

/// Runs the handshake by passing bytes back and forth in rounds (the client's turn, then the server's) until
/// a round moves no bytes and changes neither side, or `maximumRounds` rounds.
func runHandshake(_ pair: TLSPair, maximumRounds: Int = 10) -> HandshakeRun {
    runHandshake(client: pair.client, server: pair.server, maximumRounds: maximumRounds)
}

/// ``runHandshake(_:maximumRounds:)`` between any two ends.
func runHandshake(client: any TLSEndpoint, server: any TLSEndpoint, maximumRounds: Int = 10) -> HandshakeRun {
    var run = HandshakeRun()
    while run.rounds < maximumRounds {
        let before = "\(run.client.name) \(run.server.name)"
        run.rounds += 1
        advance(client, &run.client)
        let sent = shuttle(from: client, to: server)
        advance(server, &run.server)
        let answered = shuttle(from: server, to: client)
        if sent == 0, answered == 0, before == "\(run.client.name) \(run.server.name)" { break }
    }
    return run
}

/// A pair whose handshake completed, checked.
func connectedPair() throws -> TLSPair {
    let pair = try TLSPair()
    let run = runHandshake(pair)
    try #require(run.client.isComplete && run.server.isComplete, "handshake: \(run)")
    return pair
}

/// Encrypts `data` on `session` in one call.
func encrypt(_ data: [UInt8], on session: any TLSEndpoint) throws {
    try data.withUnsafeBytes { try session.encrypt($0) }
}

/// Decrypts everything `session` can deliver now into a new array; the status of the last read.
func decryptAll(_ session: any TLSEndpoint, maximum: Int = .max) throws -> (bytes: [UInt8], status: TLSReadStatus) {
    var output: [UInt8] = []
    let status = try session.decrypt(into: &output, maximum: maximum)
    return (output, status)
}
