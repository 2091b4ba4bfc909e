import Glibc
import MultipeerIO
import TestIsolation
import Testing

@testable import Multipeer

@Suite("TLS session: handshake and identity")
struct TLSHandshakeTests {
    @Test("a mutual handshake completes, and each side learns the other's identity")
    func mutualHandshake() throws {
        let pair = try TLSPair()
        let run = runHandshake(pair)
        #expect(run.client.isComplete, "client: \(run.client)")
        #expect(run.server.isComplete, "server: \(run.server)")
        #expect(pair.client.isHandshakeComplete && pair.server.isHandshakeComplete)
        #expect(pair.client.peerFingerprint == pair.serverIdentity.fingerprint)
        #expect(pair.server.peerFingerprint == pair.clientIdentity.fingerprint)
        for session in [pair.client, pair.server] {
            #expect(session.negotiatedProtocol == "TLSv1.3")
            #expect(session.negotiatedCipherSuite == "TLS_AES_128_GCM_SHA256")
            #expect(session.pendingCiphertextByteCount == 0)
            #expect(try session.advanceHandshake())
        }
        // Client hello; server flight; client's certificate and finished; a last round to see nothing moves.
        #expect(run.rounds <= 3)
    }

    @Test("a client that expects no particular identity accepts any server")
    func clientWithoutExpectation() throws {
        let pair = try TLSPair(expectedPeer: .some(nil))
        let run = runHandshake(pair)
        #expect(run.client.isComplete && run.server.isComplete)
        #expect(pair.client.peerFingerprint == pair.serverIdentity.fingerprint)
    }

    @Test("the handshake completes with the ciphertext delivered one byte at a time")
    func byteByByte() throws {
        let pair = try TLSPair()
        var run = HandshakeRun()
        func step(_ session: TLSSession, _ side: inout HandshakeSide) throws {
            if case .waiting = side, try session.advanceHandshake() { side = .complete }
        }
        func trickle(from: TLSSession, to: TLSSession, _ side: inout HandshakeSide) throws -> Int {
            let bytes = from.takeCiphertext()
            for byte in bytes {
                withUnsafeBytes(of: byte) { to.receivedCiphertext($0) }
                try step(to, &side)
            }
            return bytes.count
        }
        while run.rounds < 10 {
            run.rounds += 1
            try step(pair.client, &run.client)
            let moved = try trickle(from: pair.client, to: pair.server, &run.server)
            if try trickle(from: pair.server, to: pair.client, &run.client) + moved == 0 { break }
        }
        #expect(run.client.isComplete && run.server.isComplete)
        #expect(pair.server.peerFingerprint == pair.clientIdentity.fingerprint)
    }

    @Test("contexts are reused: many sessions from one pair of contexts")
    func contextReuse() throws {
        let clientContext = try TLSContext(identity: PeerIdentity.generate(displayName: "c"), role: .client)
        let serverContext = try TLSContext(identity: PeerIdentity.generate(displayName: "s"), role: .server)
        for _ in 0..<5 {
            let pair = try TLSPair(
                clientContext: clientContext, serverContext: serverContext,
                expectedPeer: serverContext.identity.fingerprint)
            let run = runHandshake(pair)
            #expect(run.client.isComplete && run.server.isComplete)
            #expect(pair.server.peerFingerprint == clientContext.identity.fingerprint)
        }
    }

    @Test("a server with another identity than expected: the client reports the mismatch, the server an alert")
    func identityMismatch() throws {
        let third = try PeerIdentity.generate(displayName: "third")
        let pair = try TLSPair(expectedPeer: third.fingerprint)
        let run = runHandshake(pair)
        let clientError = try #require(run.client.error, "client: \(run.client)")
        #expect(
            clientError.code
                == .identityMismatch(expected: third.fingerprint, actual: pair.serverIdentity.fingerprint))
        #expect(clientError.reason.contains(third.fingerprint.description))
        #expect(clientError.reason.contains(pair.serverIdentity.fingerprint.description))
        #expect(clientError.reason.contains("alert sent: bad certificate"))
        let serverError = try #require(run.server.error, "server: \(run.server)")
        #expect(serverError.code == .handshakeFailed)
        #expect(serverError.reason.contains("alert received: bad certificate"))
        // Hello, server flight answered by the alert, and a round to see nothing moves.
        #expect(run.rounds <= 3)
        #expect(pair.client.peerFingerprint == nil && pair.server.peerFingerprint == nil)
        // A failed session stays failed with the same error.
        let again = #expect(throws: ConnectionError.self) { try pair.client.advanceHandshake() }
        #expect(again == clientError)
        #expect(throws: ConnectionError.self) { try encrypt([1, 2, 3], on: pair.client) }
    }

    @Test("a TLS 1.2-only client is refused")
    func tls12ClientRefused() throws {
        var hooks = TLSContextTestHooks()
        hooks.onlyTLS12 = true
        let pair = try TLSPair(clientHooks: hooks)
        let run = runHandshake(pair)
        let serverError = try #require(run.server.error, "server: \(run.server)")
        #expect(serverError.code == .handshakeFailed)
        #expect(serverError.reason.contains("protocol"))
        let clientError = try #require(run.client.error, "client: \(run.client)")
        #expect(clientError.code == .handshakeFailed)
        #expect(clientError.reason.contains("alert received"))
        #expect(run.rounds <= 3)
    }

    @Test("a client presenting no certificate is refused by the server")
    func clientWithoutCertificate() throws {
        var hooks = TLSContextTestHooks()
        hooks.omitsCertificate = true
        let pair = try TLSPair(clientHooks: hooks)
        let run = runHandshake(pair)
        let serverError = try #require(run.server.error, "server: \(run.server)")
        #expect(serverError.code == .handshakeFailed)
        #expect(serverError.reason.contains("certificate"))
        #expect(pair.server.peerFingerprint == nil)
        // In TLS 1.3 the client finishes before the server judges its certificate; it learns of the
        // refusal from the alert on its first read.
        #expect(run.client.isComplete)
        let clientError = #expect(throws: ConnectionError.self) { try decryptAll(pair.client) }
        #expect(clientError?.code == .handshakeFailed)
        #expect(clientError?.reason.contains("alert received: certificate required") == true)
    }

    @Test("a client presenting two certificates is refused by the server")
    func clientWithTwoCertificates() throws {
        var hooks = TLSContextTestHooks()
        hooks.presentsSecondCertificate = true
        let pair = try TLSPair(clientHooks: hooks)
        let run = runHandshake(pair)
        let serverError = try #require(run.server.error, "server: \(run.server)")
        #expect(serverError.code == .handshakeFailed)
        #expect(serverError.reason.contains("2 certificates"))
        #expect(serverError.reason.contains("alert sent: bad certificate"))
        let clientError = #expect(throws: ConnectionError.self) { try decryptAll(pair.client) }
        #expect(clientError?.code == .handshakeFailed)
    }

    @Test("a server presenting two certificates is refused by the client, even with the expected key first")
    func serverWithTwoCertificates() throws {
        var hooks = TLSContextTestHooks()
        hooks.presentsSecondCertificate = true
        let pair = try TLSPair(serverHooks: hooks)
        let run = runHandshake(pair)
        let clientError = try #require(run.client.error, "client: \(run.client)")
        #expect(clientError.code == .handshakeFailed)
        #expect(clientError.reason.contains("2 certificates"))
        let serverError = try #require(run.server.error, "server: \(run.server)")
        #expect(serverError.reason.contains("alert received: bad certificate"))
    }

    @Test("operations before the handshake completes are refused, not run")
    func operationsBeforeHandshake() throws {
        let pair = try TLSPair()
        #expect(throws: ConnectionError.self) { try encrypt([1], on: pair.client) }
        #expect(throws: ConnectionError.self) { try decryptAll(pair.server) }
        #expect(throws: ConnectionError.self) {
            try pair.client.exportKeyingMaterial(label: "x", context: [], length: 32)
        }
        pair.client.sendCloseNotify()
        #expect(pair.client.pendingCiphertextByteCount == 0)
        // And the handshake still works afterwards.
        let run = runHandshake(pair)
        #expect(run.client.isComplete && run.server.isComplete)
    }
}

@Suite("TLS session: garbage and tampering", .ownThread)
struct TLSGarbageTests {
    /// Feeds `garbage` to `session` in pieces of `piece` bytes, advancing after each, and returns the error.
    func handshakeError(_ session: TLSSession, garbage: [UInt8], piece: Int = 1_000) -> ConnectionError? {
        var offset = 0
        while offset < garbage.count {
            let end = min(garbage.count, offset + piece)
            session.receivedCiphertext(Array(garbage[offset..<end]))
            offset = end
            do {
                _ = try session.advanceHandshake()
            } catch {
                return error
            }
        }
        return nil
    }

    static let garbageKinds: [String] = ["http", "ones", "zeros", "random"]

    /// Garbage of a kind: long enough that any record length it claims is satisfied.
    func garbage(_ kind: String, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed: seed)
        switch kind {
        case "http": return Array("GET / HTTP/1.1\r\nHost: example\r\n\r\n".utf8) + random.bytes(40_000)
        case "ones": return [UInt8](repeating: 0xFF, count: 40_000)
        case "zeros": return [UInt8](repeating: 0, count: 40_000)
        default: return random.bytes(40_000)
        }
    }

    @Test("garbage sent to a server fails its handshake", arguments: garbageKinds)
    func garbageToServer(_ kind: String) throws {
        for seed: UInt64 in 1...20 {
            let pair = try TLSPair()
            let error = try #require(handshakeError(pair.server, garbage: garbage(kind, seed: seed)))
            #expect(error.code == .handshakeFailed, "\(error)")
            #expect(throws: ConnectionError.self) { try pair.server.advanceHandshake() }
        }
    }

    @Test("garbage sent to a client in answer to its hello fails its handshake", arguments: garbageKinds)
    func garbageToClient(_ kind: String) throws {
        for seed: UInt64 in 1...20 {
            let pair = try TLSPair()
            #expect(try pair.client.advanceHandshake() == false)
            #expect(pair.client.takeCiphertext().count > 0)
            let error = try #require(handshakeError(pair.client, garbage: garbage(kind, seed: seed + 100)))
            #expect(error.code == .handshakeFailed, "\(error)")
        }
    }

    @Test("a corrupted server flight fails the client's handshake")
    func corruptedServerFlight() throws {
        var random = SplitMix64(seed: 7)
        for _ in 0..<30 {
            let pair = try TLSPair()
            #expect(try pair.client.advanceHandshake() == false)
            shuttle(from: pair.client, to: pair.server)
            #expect(try pair.server.advanceHandshake() == false)
            var flight = pair.server.takeCiphertext()
            let index = Int.random(in: 0..<flight.count, using: &random)
            flight[index] ^= UInt8(1 << Int.random(in: 0..<8, using: &random))
            pair.client.receivedCiphertext(flight)
            // A flipped length may make the client wait for more; it must never succeed.
            do {
                #expect(try pair.client.advanceHandshake() == false)
            } catch {
                #expect(error.code == .handshakeFailed, "\(error)")
            }
        }
    }

    @Test("a bit flipped in an application record makes decrypt throw")
    func bitFlippedRecord() throws {
        var random = SplitMix64(seed: 9)
        for _ in 0..<20 {
            let pair = try connectedPair()
            try encrypt(random.bytes(1_000), on: pair.client)
            var record = pair.client.takeCiphertext()
            // After the 5-byte header, so the record is still read whole.
            let index = Int.random(in: 5..<record.count, using: &random)
            record[index] ^= UInt8(1 << Int.random(in: 0..<8, using: &random))
            pair.server.receivedCiphertext(record)
            let error = #expect(throws: ConnectionError.self) { try decryptAll(pair.server) }
            #expect(error?.code == .protocolViolation)
            #expect(error?.reason.contains("alert sent") == true, "\(String(describing: error))")
            // The session stays failed.
            #expect(throws: ConnectionError.self) { try decryptAll(pair.server) }
            #expect(throws: ConnectionError.self) { try encrypt([1], on: pair.server) }
        }
    }

    @Test("a truncated record followed by the next one makes decrypt throw")
    func truncatedRecord() throws {
        let pair = try connectedPair()
        try encrypt([UInt8](repeating: 1, count: 100), on: pair.client)
        let first = pair.client.takeCiphertext()
        try encrypt([UInt8](repeating: 2, count: 100), on: pair.client)
        let second = pair.client.takeCiphertext()
        pair.server.receivedCiphertext(Array(first.dropLast(10)) + second)
        let error = #expect(throws: ConnectionError.self) { try decryptAll(pair.server) }
        #expect(error?.code == .protocolViolation)
    }

    @Test("a truncated record alone only waits for the rest")
    func incompleteRecordWaits() throws {
        let pair = try connectedPair()
        try encrypt([UInt8](repeating: 3, count: 100), on: pair.client)
        let record = pair.client.takeCiphertext()
        pair.server.receivedCiphertext(Array(record.dropLast(10)))
        var (bytes, status) = try decryptAll(pair.server)
        #expect(bytes.isEmpty && status == .ok)
        pair.server.receivedCiphertext(Array(record.suffix(10)))
        (bytes, status) = try decryptAll(pair.server)
        #expect(bytes == [UInt8](repeating: 3, count: 100) && status == .ok)
    }
}

@Suite("TLS session: application data")
struct TLSDataTests {
    /// Sends `messages` from `sender` to `receiver`, moving the ciphertext in random pieces and decrypting
    /// with random limits, and returns what arrived.
    func transfer(
        _ messages: [[UInt8]], from sender: TLSSession, to receiver: TLSSession, random: inout SplitMix64
    ) throws -> [UInt8] {
        var received: [UInt8] = []
        for message in messages {
            try encrypt(message, on: sender)
            var ciphertext = sender.takeCiphertext()[...]
            while !ciphertext.isEmpty {
                let piece = min(ciphertext.count, Int.random(in: 1...70_000, using: &random))
                receiver.receivedCiphertext(Array(ciphertext.prefix(piece)))
                ciphertext = ciphertext.dropFirst(piece)
                #expect(
                    try receiver.decrypt(into: &received, maximum: Int.random(in: 1...100_000, using: &random)) == .ok)
            }
        }
        while receiver.unreadCiphertextByteCount > 0 || received.count < messages.reduce(0, { $0 + $1.count }) {
            let before = received.count
            #expect(try receiver.decrypt(into: &received, maximum: 65_536) == .ok)
            if received.count == before { break }
        }
        return received
    }

    @Test("data of random sizes arrives byte-exact in both directions")
    func bothDirections() throws {
        let pair = try connectedPair()
        var random = SplitMix64(seed: 42)
        for (sender, receiver) in [(pair.client, pair.server), (pair.server, pair.client)] {
            var messages: [[UInt8]] = []
            // Many small writes, a few medium ones, and some larger than a 16 KB record.
            for _ in 0..<300 { messages.append(random.bytes(Int.random(in: 1...200, using: &random))) }
            for _ in 0..<20 { messages.append(random.bytes(Int.random(in: 1...40_000, using: &random))) }
            messages.append(random.bytes(3 * 1_024 * 1_024 + 17))
            messages.append(random.bytes(16_385))
            let received = try transfer(messages, from: sender, to: receiver, random: &random)
            #expect(received == messages.flatMap { $0 })
            #expect(receiver.unreadCiphertextByteCount == 0)
            #expect(sender.pendingCiphertextByteCount == 0)
        }
    }

    @Test("data piling up on both sides before anyone reads arrives in order")
    func interleaved() throws {
        let pair = try connectedPair()
        var random = SplitMix64(seed: 5)
        let toServer = (0..<50).map { _ in random.bytes(Int.random(in: 1...5_000, using: &random)) }
        let toClient = (0..<50).map { _ in random.bytes(Int.random(in: 1...5_000, using: &random)) }
        for index in 0..<50 {
            try encrypt(toServer[index], on: pair.client)
            try encrypt(toClient[index], on: pair.server)
        }
        shuttle(from: pair.client, to: pair.server)
        shuttle(from: pair.server, to: pair.client)
        #expect(try decryptAll(pair.server).bytes == toServer.flatMap { $0 })
        #expect(try decryptAll(pair.client).bytes == toClient.flatMap { $0 })
    }

    @Test("decrypt appends at most the maximum and keeps the rest for later")
    func maximumIsRespected() throws {
        let pair = try connectedPair()
        var random = SplitMix64(seed: 3)
        let data = random.bytes(50_000)
        try encrypt(data, on: pair.client)
        shuttle(from: pair.client, to: pair.server)
        var output: [UInt8] = [9, 9]
        #expect(try pair.server.decrypt(into: &output, maximum: 10) == .ok)
        #expect(output == [9, 9] + data.prefix(10))
        #expect(try pair.server.decrypt(into: &output, maximum: 0) == .ok)
        #expect(output.count == 12)
        #expect(try pair.server.decrypt(into: &output, maximum: 20_000) == .ok)
        #expect(output.count == 20_012)
        #expect(try pair.server.decrypt(into: &output, maximum: .max) == .ok)
        #expect(output == [9, 9] + data)
    }

    @Test("the raw-buffer receive overload copies the bytes")
    func rawBufferReceive() throws {
        let pair = try connectedPair()
        try encrypt(Array("hello".utf8), on: pair.client)
        var ciphertext = pair.client.takeCiphertext()
        ciphertext.withUnsafeBytes { pair.server.receivedCiphertext($0) }
        for index in ciphertext.indices { ciphertext[index] = 0 }
        #expect(try decryptAll(pair.server).bytes == Array("hello".utf8))
    }

    @Test("close_notify: the peer's decrypt reports it after the data sent before it")
    func closeNotify() throws {
        let pair = try connectedPair()
        try encrypt(Array("last words".utf8), on: pair.client)
        pair.client.sendCloseNotify()
        pair.client.sendCloseNotify()
        shuttle(from: pair.client, to: pair.server)
        var output: [UInt8] = []
        var status = try pair.server.decrypt(into: &output, maximum: .max)
        if status == .ok { status = try pair.server.decrypt(into: &output, maximum: .max) }
        #expect(status == .closeNotify)
        #expect(output == Array("last words".utf8))
        #expect(try decryptAll(pair.server).status == .closeNotify)
        // The closing side cannot send any more; the other side still can, until it closes too.
        let error = #expect(throws: ConnectionError.self) { try encrypt([1], on: pair.client) }
        #expect(error?.code == .closedLocally)
        try encrypt(Array("reply".utf8), on: pair.server)
        pair.server.sendCloseNotify()
        shuttle(from: pair.server, to: pair.client)
        output = []
        status = try pair.client.decrypt(into: &output, maximum: .max)
        if status == .ok { status = try pair.client.decrypt(into: &output, maximum: .max) }
        #expect(output == Array("reply".utf8))
        #expect(status == .closeNotify)
    }
}

@Suite("TLS session: keying material exporter")
struct TLSExporterTests {
    @Test("both sides export the same bytes; another label or another session gives others")
    func exporter() throws {
        let pair = try connectedPair()
        let label = "EXPORTER-swift-multipeer test"
        let context = Array("context".utf8)
        let client = try pair.client.exportKeyingMaterial(label: label, context: context, length: 32)
        let server = try pair.server.exportKeyingMaterial(label: label, context: context, length: 32)
        #expect(client.count == 32)
        #expect(client == server)
        #expect(client != [UInt8](repeating: 0, count: 32))
        let otherLabel = try pair.client.exportKeyingMaterial(label: label + "2", context: context, length: 32)
        #expect(otherLabel != client)
        let otherContext = try pair.client.exportKeyingMaterial(label: label, context: [], length: 32)
        #expect(otherContext != client)
        #expect(try pair.server.exportKeyingMaterial(label: label, context: [], length: 32) == otherContext)
        let other = try connectedPair()
        #expect(try other.client.exportKeyingMaterial(label: label, context: context, length: 32) != client)
        #expect(throws: ConnectionError.self) {
            try pair.client.exportKeyingMaterial(label: label, context: context, length: 0)
        }
    }
}

/// Measurements printed for people, not checked: run with `MULTIPEER_TLS_MEASURE=1 swift test --filter
/// TLSMeasurements` (throughput is only meaningful in release mode: add `-c release -Xswiftc -enable-testing`).
@Suite("TLS session: measurements", .serialized, .enabled(if: getenv("MULTIPEER_TLS_MEASURE") != nil))
struct TLSMeasurements {

    @Test("heap held by 1000 idle session pairs after their handshakes and after traffic", .measuring)
    func idleMemory() throws {
        let pairCount = 1_000
        let clientContext = try TLSContext(identity: PeerIdentity.generate(displayName: "c"), role: .client)
        let serverContext = try TLSContext(identity: PeerIdentity.generate(displayName: "s"), role: .server)
        // Warm up OpenSSL's lazily allocated tables so they are not counted.
        _ = runHandshake(try TLSPair(clientContext: clientContext, serverContext: serverContext, expectedPeer: nil))
        var pairs: [TLSPair] = []
        pairs.reserveCapacity(pairCount)
        var random = SplitMix64(seed: 1)
        let message = random.bytes(100_000)
        var output: [UInt8] = []
        output.reserveCapacity(message.count)
        let before = (heap: ProcessMemory.heapInUse() ?? 0, resident: ProcessMemory.residentBytes())
        for _ in 0..<pairCount {
            let pair = try TLSPair(
                clientContext: clientContext, serverContext: serverContext,
                expectedPeer: serverContext.identity.fingerprint)
            let run = runHandshake(pair)
            try #require(run.client.isComplete && run.server.isComplete)
            pairs.append(pair)
        }
        let handshaken = (heap: ProcessMemory.heapInUse() ?? 0, resident: ProcessMemory.residentBytes())
        for pair in pairs {
            try encrypt(message, on: pair.client)
            try encrypt(message, on: pair.server)
            shuttle(from: pair.client, to: pair.server)
            shuttle(from: pair.server, to: pair.client)
            output.removeAll(keepingCapacity: true)
            _ = try pair.server.decrypt(into: &output, maximum: .max)
            output.removeAll(keepingCapacity: true)
            _ = try pair.client.decrypt(into: &output, maximum: .max)
            #expect(output.count == message.count)
        }
        let trafficked = (heap: ProcessMemory.heapInUse() ?? 0, resident: ProcessMemory.residentBytes())
        for pair in pairs {
            pair.client.releaseHandshakeState()
            pair.server.releaseHandshakeState()
        }
        let released = (heap: ProcessMemory.heapInUse() ?? 0, resident: ProcessMemory.residentBytes())
        let sessions = 2 * pairCount
        print(
            "TLS idle memory per session, \(pairCount) pairs: heap in use (mallinfo2) "
                + "\((handshaken.heap - before.heap) / sessions) bytes after the handshake, "
                + "\((trafficked.heap - before.heap) / sessions) after 100 kB each way, "
                + "\((released.heap - before.heap) / sessions) after releasing the handshake state; resident set "
                + "\((handshaken.resident - before.resident) / sessions), "
                + "\((trafficked.resident - before.resident) / sessions) and "
                + "\((released.resident - before.resident) / sessions)")
        withExtendedLifetime(pairs) {}
    }

    @Test("in-memory throughput of encrypt plus decrypt through one session pair")
    func throughput() throws {
        let pair = try connectedPair()
        let total = 1 << 30
        for chunkSize in [16_384, 65_536, 262_144] {
            var random = SplitMix64(seed: 2)
            let chunk = random.bytes(chunkSize)
            var output: [UInt8] = []
            output.reserveCapacity(chunkSize)
            var sent = 0
            var received = 0
            let clock = ContinuousClock()
            let start = clock.now
            while sent < total {
                try chunk.withUnsafeBytes { try pair.client.encrypt($0) }
                sent += chunkSize
                pair.server.receivedCiphertext(pair.client.takeCiphertext())
                output.removeAll(keepingCapacity: true)
                _ = try pair.server.decrypt(into: &output, maximum: .max)
                received += output.count
            }
            let elapsed = clock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
            #expect(received == sent)
            print(
                "TLS throughput: \(total >> 20) MiB in \(chunkSize)-byte writes, encrypt + decrypt on one thread: "
                    + "\(Int(Double(total) / seconds / 1e6)) MB/s")
        }
    }
}
