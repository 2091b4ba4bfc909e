import COpenSSL
import Testing

@testable import Multipeer

/// Dropping OpenSSL's state once the record layer has taken over, and the check that OpenSSL wrote nothing the
/// record layer could not follow before it did.
@Suite("TLS session: releasing the handshake state")
struct TLSHandshakeReleaseTests {
    /// Sends `data` from `sender` to `receiver` and returns what arrived.
    func send(_ data: [UInt8], from sender: any TLSEndpoint, to receiver: any TLSEndpoint) throws -> [UInt8] {
        try encrypt(data, on: sender)
        shuttle(from: sender, to: receiver)
        return try decryptAll(receiver).bytes
    }

    @Test("release frees the SSL; data, key updates and close_notify go on; the session facts stay")
    func dataFlowsAfterRelease() throws {
        let pair = try connectedPair()
        let label = "EXPORTER-swift-multipeer test"
        let exported = try pair.client.exportKeyingMaterial(label: label, context: [], length: 32)
        #expect(try pair.server.exportKeyingMaterial(label: label, context: [], length: 32) == exported)
        weak let clientHandshake = pair.client.handshake
        weak let serverHandshake = pair.server.handshake
        #expect(clientHandshake != nil && serverHandshake != nil)
        pair.client.releaseHandshakeState()
        pair.server.releaseHandshakeState()
        pair.server.releaseHandshakeState()  // idempotent
        // Nothing else holds the handshake objects, so their SSL (and its BIO and secrets) is freed.
        #expect(clientHandshake == nil && serverHandshake == nil)

        #expect(pair.client.peerFingerprint == pair.serverIdentity.fingerprint)
        #expect(pair.server.peerFingerprint == pair.clientIdentity.fingerprint)
        #expect(pair.client.negotiatedCipherSuite == "TLS_AES_128_GCM_SHA256")
        #expect(pair.server.negotiatedProtocol == "TLSv1.3")

        var random = SplitMix64(seed: 0x7265_6c65_6173)
        let data = random.bytes(100_000)
        #expect(try send(data, from: pair.client, to: pair.server) == data)
        #expect(try send(data, from: pair.server, to: pair.client) == data)
        // Our key updates, every three records, each way: each side follows the other's.
        pair.client.setKeyUpdateInterval(3)
        pair.server.setKeyUpdateInterval(3)
        for _ in 0..<3 {
            #expect(try send(data, from: pair.client, to: pair.server) == data)
            #expect(try send(data, from: pair.server, to: pair.client) == data)
        }
        pair.client.sendCloseNotify()
        shuttle(from: pair.client, to: pair.server)
        #expect(try decryptAll(pair.server).status == .closeNotify)
    }

    @Test("after release, a KeyUpdate that asks for ours is followed and answered")
    func peerRequestedKeyUpdateAfterRelease() throws {
        let clientIdentity = try PeerIdentity.generate(displayName: "client")
        let serverIdentity = try PeerIdentity.generate(displayName: "server")
        let client = try OpenSSLRecordSession(
            context: TLSContext(identity: clientIdentity, role: .client), expectedPeer: serverIdentity.fingerprint)
        let server = try TLSSession(context: TLSContext(identity: serverIdentity, role: .server), expectedPeer: nil)
        let run = runHandshake(client: client, server: server)
        try #require(run.client.isComplete && run.server.isComplete)
        server.releaseHandshakeState()
        #expect(server.handshake == nil)
        #expect(client.requestKeyUpdate())
        let hello = Array("after the update".utf8)
        #expect(try send(hello, from: client, to: server) == hello)
        let reply = Array("answered with new keys".utf8)
        #expect(try send(reply, from: server, to: client) == reply)
        #expect(try send(hello, from: client, to: server) == hello)
    }

    @Test("exporting after release fails with an internal failure that says the state was released")
    func exportAfterReleaseFails() throws {
        let pair = try connectedPair()
        pair.client.releaseHandshakeState()
        let error = try #require(throws: ConnectionError.self) {
            try pair.client.exportKeyingMaterial(label: "EXPORTER-x", context: [], length: 32)
        }
        #expect(error.code == .internalFailure)
        #expect(error.reason.contains("handshake state was released"), "\(error.reason)")
        // The other side still has its state, and the session itself is unharmed.
        #expect(try pair.server.exportKeyingMaterial(label: "EXPORTER-x", context: [], length: 32).count == 32)
        #expect(try send([1, 2, 3], from: pair.client, to: pair.server) == [1, 2, 3])
    }

    @Test("the record layer exports until it releases, then refuses; plaintext has nothing to release")
    func recordLayerRelease() throws {
        let pair = try connectedPair()
        let client = TLSRecordLayer(session: pair.client)
        let server = TLSRecordLayer(session: pair.server)
        let exported = try client.exportKeyingMaterial(
            label: DatagramKeys.exporterLabel, length: DatagramKeys.exportedLength)
        #expect(exported?.count == DatagramKeys.exportedLength)
        #expect(
            try server.exportKeyingMaterial(label: DatagramKeys.exporterLabel, length: DatagramKeys.exportedLength)
                == exported)
        client.releaseHandshakeState()
        #expect(throws: ConnectionError.self) {
            try client.exportKeyingMaterial(label: DatagramKeys.exporterLabel, length: DatagramKeys.exportedLength)
        }
        #expect(client.protectionDescription == "TLSv1.3 TLS_AES_128_GCM_SHA256")
        #expect(client.authenticatedPeer == pair.serverIdentity.fingerprint)
        try client.seal(Array("sealed after release".utf8))
        var decoder = FrameDecoder()
        client.drainNetworkOutput { bytes in try? server.receivedFromNetwork(bytes, into: &decoder) }
        #expect(decoder.bufferedByteCount == "sealed after release".utf8.count)

        let plaintext = PlaintextRecordLayer()
        plaintext.releaseHandshakeState()
        #expect(try plaintext.exportKeyingMaterial(label: "EXPORTER-x", length: 8) == nil)
    }

    @Test("releasing before the handshake completes ends it with an internal failure")
    func releaseBeforeCompletion() throws {
        let pair = try TLSPair()
        _ = try pair.client.advanceHandshake()
        shuttle(from: pair.client, to: pair.server)
        pair.server.releaseHandshakeState()
        let error = try #require(throws: ConnectionError.self) { try pair.server.advanceHandshake() }
        #expect(error.code == .internalFailure)
        #expect(error.reason.contains("released before the handshake completed"), "\(error.reason)")
    }

    // MARK: What OpenSSL wrote before the takeover

    @Test("application data OpenSSL wrote before our record layer took over fails the handshake")
    func openSSLApplicationDataBeforeTakeover() throws {
        let pair = try TLSPair()
        #expect(try !pair.client.advanceHandshake())
        shuttle(from: pair.client, to: pair.server)
        #expect(try !pair.server.advanceHandshake())
        shuttle(from: pair.server, to: pair.client)
        // The server's flight is in; an SSL_write now finishes the client's handshake and writes a record with
        // the application keys, before the session would have taken over.
        let ssl = try #require(pair.client.handshake?.ssl)
        var written = 0
        let early = Array("early".utf8)
        #expect(SSL_write_ex(ssl, early, early.count, &written) == 1 && written == early.count)
        let error = try #require(throws: ConnectionError.self) { try pair.client.advanceHandshake() }
        #expect(error.code == .internalFailure)
        #expect(error.reason.contains("OpenSSL wrote an application data record before"), "\(error.reason)")
        // The failure sticks.
        #expect(throws: ConnectionError.self) { try pair.client.advanceHandshake() }
    }

    @Test("a session ticket OpenSSL wrote after the handshake fails the server's handshake")
    func openSSLSessionTicketBeforeTakeover() throws {
        var hooks = TLSContextTestHooks()
        hooks.sendsSessionTicket = true
        let pair = try TLSPair(serverHooks: hooks)
        let run = runHandshake(pair)
        let error = try #require(run.server.error)
        #expect(error.code == .internalFailure)
        #expect(error.reason.contains("OpenSSL wrote a NewSessionTicket message before"), "\(error.reason)")
    }

    @Test("a normal handshake writes nothing past the handshake on either side")
    func nothingWrittenPastTheHandshake() throws {
        let pair = try TLSPair()
        let run = runHandshake(pair)
        #expect(run.client.isComplete && run.server.isComplete)
        #expect(pair.client.handshake?.writtenPastHandshake == nil)
        #expect(pair.server.handshake?.writtenPastHandshake == nil)
    }
}
