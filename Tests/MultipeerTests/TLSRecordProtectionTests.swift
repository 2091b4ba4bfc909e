import Testing

@testable import Multipeer

/// This package's TLS 1.3 record layer (``TLSRecordProtection``) against OpenSSL's own: a session of each kind
/// on either side must understand the other byte for byte, for every cipher suite we offer, including
/// close_notify and the refusal of tampered records.
@Suite("TLS record layer: ours against OpenSSL's")
struct TLSRecordProtectionTests {
    static let suites = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]

    /// A client and a server of the given kinds after a completed handshake on `suite`.
    func pair<Client: TLSEndpoint, Server: TLSEndpoint>(
        _: Client.Type, _: Server.Type, suite: String = "TLS_AES_128_GCM_SHA256"
    ) throws -> (client: Client, server: Server) {
        var hooks = TLSContextTestHooks()
        hooks.cipherSuites = suite
        let serverIdentity = try PeerIdentity.generate(displayName: "server")
        let client = try Client(
            context: TLSContext(
                identity: PeerIdentity.generate(displayName: "client"), role: .client, testHooks: hooks),
            expectedPeer: serverIdentity.fingerprint)
        let server = try Server(
            context: TLSContext(identity: serverIdentity, role: .server, testHooks: hooks), expectedPeer: nil)
        let run = runHandshake(client: client, server: server)
        try #require(run.client.isComplete && run.server.isComplete, "handshake: \(run)")
        #expect(client.negotiatedCipherSuite == suite)
        return (client, server)
    }

    /// Our record layer against OpenSSL's on either side, and ours on both, with a name for messages.
    func mixes(suite: String = "TLS_AES_128_GCM_SHA256") throws -> [(
        client: any TLSEndpoint, server: any TLSEndpoint, name: String
    )] {
        let ours = try pair(TLSSession.self, OpenSSLRecordSession.self, suite: suite)
        let theirs = try pair(OpenSSLRecordSession.self, TLSSession.self, suite: suite)
        let both = try pair(TLSSession.self, TLSSession.self, suite: suite)
        return [
            (ours.client, ours.server, "\(suite): client ours, server OpenSSL's"),
            (theirs.client, theirs.server, "\(suite): client OpenSSL's, server ours"),
            (both.client, both.server, "\(suite): ours on both sides"),
        ]
    }

    /// Moves `data` from `sender` to `receiver` in pieces of up to `piece` bytes, decrypting with `maximum`.
    func send(_ data: [UInt8], from sender: any TLSEndpoint, to receiver: any TLSEndpoint, piece: Int, maximum: Int)
        throws -> [UInt8]
    {
        try encrypt(data, on: sender)
        var ciphertext = sender.takeCiphertext()[...]
        var received: [UInt8] = []
        while !ciphertext.isEmpty {
            let count = min(piece, ciphertext.count)
            receiver.receivedCiphertext(Array(ciphertext.prefix(count)))
            ciphertext = ciphertext.dropFirst(count)
            #expect(try receiver.decrypt(into: &received, maximum: maximum) == .ok)
        }
        while received.count < data.count {
            let before = received.count
            #expect(try receiver.decrypt(into: &received, maximum: maximum) == .ok)
            if received.count == before { break }
        }
        return received
    }

    @Test("records interoperate both ways, for every suite and either record layer on either side")
    func interoperates() throws {
        var random = SplitMix64(seed: 0x7265_636f_7264)
        for suite in Self.suites {
            for pair in try mixes(suite: suite) {
                for size in [1, 63, 16_383, 16_384, 16_385, 100_000] {
                    let data = random.bytes(size)
                    let piece = Int.random(in: 1...40_000, using: &random)
                    let maximum = Int.random(in: 1...70_000, using: &random)
                    let there = try send(data, from: pair.client, to: pair.server, piece: piece, maximum: maximum)
                    #expect(there == data, "\(pair.name), client to server, \(size) B")
                    let back = try send(data, from: pair.server, to: pair.client, piece: piece, maximum: maximum)
                    #expect(back == data, "\(pair.name), server to client, \(size) B")
                }
            }
        }
    }

    @Test("a record is sealed as OpenSSL seals it: same length, 22 bytes of overhead per record")
    func recordSizes() throws {
        let ours = try pair(TLSSession.self, TLSSession.self)
        let theirs = try pair(OpenSSLRecordSession.self, OpenSSLRecordSession.self)
        for size in [1, 16_384, 40_000] {
            try encrypt([UInt8](repeating: 9, count: size), on: ours.client)
            try encrypt([UInt8](repeating: 9, count: size), on: theirs.client)
            let sealed = ours.client.takeCiphertext()
            #expect(sealed.count == theirs.client.takeCiphertext().count)
            #expect(sealed.count == size + ((size + 16_383) / 16_384) * 22)
            #expect(Array(sealed.prefix(3)) == [23, 3, 3])
        }
    }

    @Test("reads are opened straight from the socket's bytes in any split, partial records kept for the next")
    func directDecryption() throws {
        var random = SplitMix64(seed: 0x6469_7265_6374)
        let pair = try pair(OpenSSLRecordSession.self, TLSSession.self)
        let data = random.bytes(300_000)
        try encrypt(data, on: pair.client)
        pair.client.sendCloseNotify()
        var ciphertext = pair.client.takeCiphertext()[...]
        var received: [UInt8] = []
        var direct = 0
        while !ciphertext.isEmpty {
            let count = min(ciphertext.count, Int.random(in: 1...70_000, using: &random))
            if pair.server.canDecryptDirectly { direct += 1 }
            try Array(ciphertext.prefix(count)).withUnsafeBytes {
                try pair.server.receivedCiphertext($0, decryptingInto: &received)
            }
            ciphertext = ciphertext.dropFirst(count)
            // What could not be opened directly comes out of the usual path, sometimes in small steps so that
            // whole records are still waiting when the next read arrives.
            _ = try pair.server.decrypt(into: &received, maximum: Int.random(in: 1...40_000, using: &random))
        }
        while try pair.server.decrypt(into: &received, maximum: .max) == .ok && received.count < data.count {}
        #expect(received == data)
        #expect(direct > 0)
        #expect(try pair.server.decrypt(into: &received, maximum: .max) == .closeNotify)
    }

    @Test("our key updates (every few records here) are followed by OpenSSL's record layer and by ours")
    func ourKeyUpdates() throws {
        var random = SplitMix64(seed: 0x6b65_7975)
        for receiverOwn in [false, true] {
            let pair =
                receiverOwn
                ? try pair(TLSSession.self, TLSSession.self, suite: "TLS_AES_256_GCM_SHA384")
                    as (client: TLSSession, server: any TLSEndpoint)
                : try pair(TLSSession.self, OpenSSLRecordSession.self, suite: "TLS_AES_256_GCM_SHA384")
            pair.client.setKeyUpdateInterval(3)
            let data = random.bytes(200_000)  // 13 records: four key updates on the way
            let received = try send(data, from: pair.client, to: pair.server, piece: 30_000, maximum: 70_000)
            #expect(received == data, "server own record layer: \(receiverOwn)")
            // The other direction is unaffected.
            let back = try send(Array(data.prefix(1000)), from: pair.server, to: pair.client, piece: 500, maximum: 800)
            #expect(back == Array(data.prefix(1000)))
        }
    }

    @Test("a KeyUpdate from OpenSSL that asks for ours is followed and answered")
    func peerRequestedKeyUpdate() throws {
        let pair = try pair(OpenSSLRecordSession.self, TLSSession.self)
        #expect(pair.client.requestKeyUpdate())
        let hello = Array("after the update".utf8)
        #expect(try send(hello, from: pair.client, to: pair.server, piece: 1000, maximum: 1000) == hello)
        // Our answer (our own KeyUpdate) goes out before our next data; OpenSSL must follow it.
        let reply = Array("answered with new keys".utf8)
        #expect(try send(reply, from: pair.server, to: pair.client, piece: 1000, maximum: 1000) == reply)
        #expect(try send(hello, from: pair.client, to: pair.server, piece: 7, maximum: 5) == hello)
    }

    @Test("handshake messages other than a whole KeyUpdate are refused after the handshake")
    func otherHandshakeMessagesRefused() throws {
        let secret = [UInt8](repeating: 0x42, count: 32)
        for message: [UInt8] in [[24, 0, 0, 1, 2], [4, 0, 0, 1, 0], [24, 0, 0, 2, 0, 0], [24, 0, 0]] {
            let sender = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
            let receiver = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
            var record: [UInt8] = []
            try message.withUnsafeBytes {
                try sender.seal($0, contentType: TLSRecordProtection.handshakeType, into: &record)
            }
            var output: [UInt8] = []
            let error = try #require(throws: ConnectionError.self) {
                try record.withUnsafeBytes { try receiver.open(record: $0, into: &output) }
            }
            #expect(error.reason.contains("KeyUpdate"), "\(error.reason)")
            #expect(output.isEmpty)
        }
    }

    @Test("a peer cannot make us derive keys back to back: the ninth quick KeyUpdate in a row is refused")
    func keyUpdateFlood() throws {
        let secret = [UInt8](repeating: 0x17, count: 32)
        let sender = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
        let receiver = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
        var output: [UInt8] = []
        for update in 1...9 {
            var record: [UInt8] = []
            try sender.sealKeyUpdate(into: &record)
            if update <= TLSRecordProtection.rapidKeyUpdateLimit {
                #expect(try record.withUnsafeBytes { try receiver.open(record: $0, into: &output) } == .keyUpdate)
            } else {
                let error = try #require(throws: ConnectionError.self) {
                    try record.withUnsafeBytes { try receiver.open(record: $0, into: &output) }
                }
                #expect(error.reason.contains("KeyUpdates within"), "\(error.reason)")
                #expect(receiver.refusalAlert == 10)
            }
        }
        #expect(output.isEmpty)
    }

    @Test("a refused record names its reason in the alert: record_overflow, bad_record_mac")
    func refusalAlerts() throws {
        let secret = [UInt8](repeating: 0x18, count: 32)
        let receiver = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
        let oversized: [UInt8] = [23, 3, 3, 0x41, 0x01]
        #expect(throws: ConnectionError.self) {
            try oversized.withUnsafeBytes { _ = try receiver.recordBodyLength(header: $0) }
        }
        #expect(receiver.refusalAlert == 22)
        let sender = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
        var record: [UInt8] = []
        try [UInt8](repeating: 1, count: 40).withUnsafeBytes {
            try sender.seal($0, contentType: TLSRecordProtection.applicationDataType, into: &record)
        }
        record[20] ^= 0x80
        var output: [UInt8] = []
        #expect(throws: ConnectionError.self) {
            try record.withUnsafeBytes { _ = try receiver.open(record: $0, into: &output) }
        }
        #expect(receiver.refusalAlert == 20)
    }

    @Test(
        "a record whose inner plaintext (content, type, padding) exceeds 2^14 + 1 bytes is refused: record_overflow",
        arguments: [
            (16_384, 0, true), (16_383, 1, true), (100, 16_284, true), (0, 16_384, true),
            (16_384, 1, false), (16_000, 500, false), (16_000, 1_000, false), (0, 16_385, false),
        ])
    func innerPlaintextLimit(content: Int, padding: Int, accepted: Bool) throws {
        let secret = [UInt8](repeating: 0x19, count: 32)
        var random = SplitMix64(seed: UInt64(content * 100_000 + padding))
        let data = random.bytes(content)
        // TLSInnerPlaintext: content, the content type, then zeros. The AEAD appends its `contentType` argument
        // last, so the inner plaintext goes in whole but for its last byte (the type, or the last zero).
        let inner = data + [TLSRecordProtection.applicationDataType] + [UInt8](repeating: 0, count: padding)
        let length = inner.count + TLSRecordProtection.tagLength
        var record: [UInt8] = [23, 3, 3, UInt8(length >> 8), UInt8(length & 0xFF)]
        record += [UInt8](repeating: 0, count: length)
        let sealing = try TLSRecordProtection.AEAD(suite: .aes128GCM, secret: secret, encrypt: true)
        let sealed = record.withUnsafeMutableBytes { bytes in
            inner.dropLast().withUnsafeBytes { content in
                sealing.seal(
                    sequence: 0, header: UnsafeRawBufferPointer(rebasing: bytes[0..<5]), content: content,
                    contentType: inner.last!, into: UnsafeMutableRawBufferPointer(rebasing: bytes[5...]))
            }
        }
        try #require(sealed)
        // Through the header check (as a connection reads) and through open(record:) alone.
        for headerFirst in [true, false] {
            let receiver = try TLSRecordProtection(suite: .aes128GCM, sendingSecret: secret, receivingSecret: secret)
            var output: [UInt8] = []
            func open() throws -> TLSRecordProtection.Opened? {
                try record.withUnsafeBytes {
                    headerFirst
                        ? try receiver.openNext(in: $0, into: &output)?.opened
                        : try receiver.open(record: $0, into: &output)
                }
            }
            if accepted {
                #expect(try open() == .data, "\(content) + \(padding)")
                #expect(output == data)
            } else {
                let error = try #require(throws: ConnectionError.self, "\(content) + \(padding)") { try open() }
                #expect(error.code == .protocolViolation)
                #expect(error.reason.contains("record_overflow"), "\(error.reason)")
                #expect(receiver.refusalAlert == 22)
                #expect(output.isEmpty)
            }
        }
    }

    @Test("close_notify from either record layer is understood by the other")
    func closeNotify() throws {
        for pair in try mixes() {
            try encrypt([1, 2, 3], on: pair.client)
            pair.client.sendCloseNotify()
            _ = shuttle(from: pair.client, to: pair.server)
            var (bytes, status) = try decryptAll(pair.server)
            #expect(bytes == [1, 2, 3] && status == .closeNotify)
            pair.server.sendCloseNotify()
            _ = shuttle(from: pair.server, to: pair.client)
            (bytes, status) = try decryptAll(pair.client)
            #expect(bytes.isEmpty && status == .closeNotify)
        }
    }

    @Test("a tampered record is refused, and the sender learns why from a bad_record_mac alert")
    func tamperedRecord() throws {
        for senderOwn in [true, false] {
            let pair =
                senderOwn
                ? try pair(TLSSession.self, TLSSession.self) as (client: any TLSEndpoint, server: TLSSession)
                : try pair(OpenSSLRecordSession.self, TLSSession.self)
            try encrypt([UInt8](repeating: 5, count: 200), on: pair.client)
            var record = pair.client.takeCiphertext()
            record[50] ^= 0x01
            pair.server.receivedCiphertext(record)
            let error = try #require(throws: ConnectionError.self) { try decryptAll(pair.server) }
            #expect(error.code == .protocolViolation)
            #expect(error.reason.contains("bad_record_mac"), "\(error.reason)")
            // The session stays failed, and its alert reaches the sender.
            #expect(throws: ConnectionError.self) { try decryptAll(pair.server) }
            _ = shuttle(from: pair.server, to: pair.client)
            let senderError = try #require(throws: ConnectionError.self) { try decryptAll(pair.client) }
            #expect(senderError.reason.contains("bad record mac"), "\(senderError.reason)")
        }
    }

    @Test("records with a wrong outer type, version or length are refused before decryption")
    func malformedHeaders() throws {
        let cases: [([UInt8], String)] = [
            ([22, 3, 3, 0, 40], "type 22"), ([23, 3, 1, 0, 40], "version"),
            ([23, 3, 3, 0x41, 0x01], "record_overflow"),
            ([23, 3, 3, 0, 16], "too short"),
        ]
        for (header, expected) in cases {
            let pair = try pair(TLSSession.self, TLSSession.self)
            pair.server.receivedCiphertext(header)
            let error = try #require(throws: ConnectionError.self) { try decryptAll(pair.server) }
            #expect(error.code == .protocolViolation && error.reason.contains(expected), "\(error.reason)")
        }
    }

    @Test("a record cut anywhere waits for the rest; nothing is delivered twice")
    func truncatedAtEveryOffset() throws {
        let pair = try pair(TLSSession.self, TLSSession.self)
        let data = Array(0..<100).map { UInt8($0) }
        for cut in 0...(data.count + 22) {
            try encrypt(data, on: pair.client)
            let record = pair.client.takeCiphertext()
            pair.server.receivedCiphertext(Array(record.prefix(cut)))
            var received: [UInt8] = []
            #expect(try pair.server.decrypt(into: &received, maximum: .max) == .ok)
            if cut < record.count { #expect(received.isEmpty) }
            pair.server.receivedCiphertext(Array(record.dropFirst(cut)))
            #expect(try pair.server.decrypt(into: &received, maximum: .max) == .ok)
            #expect(received == data, "cut at \(cut)")
        }
    }
}
