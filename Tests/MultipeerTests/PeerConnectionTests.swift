import Foundation
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// A listener and a loop on 127.0.0.1, torn down afterwards.
struct LoopbackPeers {
    let loop: EventLoop
    let listener: PeerListener

    init(_ configuration: ConnectionConfiguration, clock: (any IOClock)? = nil) async throws {
        loop = try EventLoop(name: "connection-test", clock: clock ?? MonotonicClock())
        listener = try await PeerListener(
            configuration: configuration, address: SocketAddress(.v4(IPv4Address(127, 0, 0, 1)), port: 0), loop: loop)
    }

    func connect(_ configuration: ConnectionConfiguration, expecting: PeerFingerprint?) async throws(ConnectionError)
        -> PeerConnection
    {
        try await PeerConnection.connect(
            to: listener.localAddress, expecting: expecting, configuration: configuration, loop: loop)
    }

    /// The next connection the listener established.
    func accepted() async throws -> PeerConnection {
        var iterator = listener.connections.makeAsyncIterator()
        return try #require(await iterator.next())
    }

    func shutdown() {
        listener.close()
        loop.shutdown()
    }
}

@Suite("Peer connections over loopback", .serialized)
struct PeerConnectionTests {
    @Test(arguments: [EncryptionPreference.required, .none])
    func connectExchangeAndCloseGracefully(encryption: EncryptionPreference) async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, encryption))
        defer { peers.shutdown() }
        // Only TLS can prove an expected identity: a plaintext dialer expects nobody.
        let expected = encryption == .required ? TestPeers.bob.fingerprint : nil
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, encryption), expecting: expected)
        let acceptor = try await peers.accepted()
        #expect(dialer.peer.claimedFingerprint == TestPeers.bob.fingerprint)
        #expect(acceptor.peer.claimedFingerprint == TestPeers.ada.fingerprint)
        #expect(dialer.peer.isAuthenticated == (encryption == .required))
        if encryption == .required {
            #expect(dialer.peer.fingerprint == TestPeers.bob.fingerprint)
            #expect(acceptor.peer.fingerprint == TestPeers.ada.fingerprint)
            #expect(dialer.peer.protection == "TLSv1.3 TLS_AES_128_GCM_SHA256")
            #expect(dialer.verificationCode != nil && dialer.verificationCode == acceptor.verificationCode)
        } else {
            #expect(dialer.peer.fingerprint == nil && acceptor.peer.fingerprint == nil)
            #expect(dialer.verificationCode == nil)
        }
        let sent = (0..<500).map { index in [UInt8](repeating: UInt8(index % 256), count: (index * 131) % 5000) }
        async let received: [[UInt8]] = {
            var messages: [[UInt8]] = []
            for await message in acceptor.messages {
                messages.append(message)
                if messages.count == sent.count { break }
            }
            return messages
        }()
        for message in sent { try await dialer.send(message) }
        #expect(await received == sent)
        try await acceptor.send(Array("reply".utf8))
        var replies = dialer.messages.makeAsyncIterator()
        #expect(await replies.next() == Array("reply".utf8))
        let roundTrip = try await dialer.ping()
        #expect(roundTrip > .zero && roundTrip < .seconds(5))
        let dialerEnd = await dialer.close(code: 3, reason: "done")
        #expect(dialerEnd.code == .closedLocally)
        #expect(await acceptor.closed().code == .closedByPeer(code: 3, text: "done"))
        await #expect(throws: ConnectionError.self) { try await dialer.send([1]) }
    }

    @Test func aStreamCarriesMegabytesWhileMessagesStillFlow() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        let payload = (0..<(8 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let stream = try await dialer.openStream(name: "big.bin")
        async let readBack: ([UInt8], String) = {
            var streams = acceptor.incomingStreams.makeAsyncIterator()
            guard let incoming = await streams.next() else { return ([], "") }
            var bytes: [UInt8] = []
            while let chunk = try await incoming.read() { bytes += chunk }
            return (bytes, incoming.name)
        }()
        var offset = 0
        while offset < payload.count {
            let end = min(payload.count, offset + 100_000)
            try await stream.write(Array(payload[offset..<end]))
            offset = end
        }
        try await dialer.send([7])
        try await stream.finish()
        var messages = acceptor.messages.makeAsyncIterator()
        #expect(await messages.next() == [7])
        let (bytes, name) = try await readBack
        #expect(name == "big.bin")
        #expect(byteDifference(bytes, payload) == nil)
        await dialer.close()
    }

    @Test(arguments: [EncryptionPreference.required, .none])
    func aSlowReaderIntoItsOwnBufferGetsEveryByteAndHoldsAtMostTheWindow(encryption: EncryptionPreference)
        async throws
    {
        var configuration = TestPeers.configuration(TestPeers.bob, encryption)
        configuration.streamWindow = 1 << 20
        let peers = try await LoopbackPeers(configuration)
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, encryption), expecting: nil)
        let acceptor = try await peers.accepted()
        let payload = (0..<(6 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 12) }
        let stream = try await dialer.openStream(name: "slow")
        let writer = Task {
            var offset = 0
            while offset < payload.count {
                let end = min(payload.count, offset + 1 << 20)
                try await stream.write(Array(payload[offset..<end]))
                offset = end
            }
            try await stream.finish()
        }
        var streams = acceptor.incomingStreams.makeAsyncIterator()
        let incoming = try #require(await streams.next())
        var received: [UInt8] = []
        var buffer: [UInt8] = []
        var largestBacklog = 0
        var reads = 0
        while true {
            let want = [1, 7, 4096, 65_536, 100_000][reads % 5]
            // Copying reads and borrowing reads (the bytes looked at in place) take turns.
            let count: Int
            if reads % 2 == 0 {
                count = try await incoming.read(into: &buffer, maximumCount: want)
                received += buffer
            } else {
                count =
                    try await incoming.read(maximumCount: want) { bytes in
                        received.append(contentsOf: bytes)
                        return bytes.count
                    } ?? 0
            }
            if count == 0 { break }
            #expect(count <= want)
            reads += 1
            largestBacklog = max(largestBacklog, incoming.inbound.capacity)
            // Falls behind now and then, so the window fills and the sender must wait for credit.
            if reads % 50 == 0 { try await Task.sleep(for: .milliseconds(5)) }
        }
        try await writer.value
        #expect(byteDifference(received, payload) == nil)
        #expect(largestBacklog <= 1 << 20)
        await dialer.close()
    }

    @Test func messagesAnIteratorTookButDidNotHandOutAreNotLost() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        for index in 0..<10 { try await dialer.send([UInt8(index)]) }
        try await dialer.send([0xEE])
        // Wait until everything is queued at the acceptor, so the first iterator takes a batch of several.
        var waited = 0
        while acceptor.driver.shared.unreadBytes < 11 && waited < 500 {
            try await Task.sleep(for: .milliseconds(10))
            waited += 1
        }
        for await message in acceptor.messages {
            #expect(message == [0])
            break  // the rest of the batch this iterator took must go back to the connection
        }
        // Closing ends the messages after whatever is still queued, so a lost batch cannot hang the test.
        await dialer.close()
        var rest: [[UInt8]] = []
        for await message in acceptor.messages { rest.append(message) }
        #expect(rest == (1..<10).map { [UInt8($0)] } + [[0xEE]])
        #expect(acceptor.driver.shared.unreadBytes == 0)
    }

    @Test func unreliableMessagesTravelAsDatagramsAndLargeOnesReliably() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        #expect(dialer.datagramPayloadLimit == 1216)
        #expect(acceptor.datagramPayloadLimit == 1216)
        #expect(dialer.peer.capabilities.contains(.unreliableDatagrams))
        let small = (0..<50).map { [UInt8](repeating: UInt8($0), count: 1 + $0 * 20) }
        let large = [UInt8](repeating: 0xAB, count: 5000)
        for message in small { try await dialer.sendUnreliable(message) }
        try await dialer.sendUnreliable(large)
        // Loopback rarely loses a datagram, but may when the receive buffer overflows: wait for the reliable
        // one, then check that whatever datagrams arrived are intact ones that were sent.
        try await dialer.send([0xFF, 0xFF])
        var received: [[UInt8]] = []
        var messages = acceptor.messages.makeAsyncIterator()
        var reliableSeen = 0
        while reliableSeen < 2, let message = await messages.next() {
            if message == large || message == [0xFF, 0xFF] { reliableSeen += 1 } else { received.append(message) }
        }
        // Datagrams still on their way arrive within 50 ms on loopback; a reliable marker sent after that
        // comes after all of them (the iterator may already hold some in the batch it took).
        try await Task.sleep(for: .milliseconds(50))
        try await dialer.send([0xEE])
        while let message = await messages.next(), message != [0xEE] { received.append(message) }
        #expect(Set(received).isSubset(of: Set(small)))
        #expect(received.count >= small.count * 9 / 10, "\(received.count) of \(small.count) datagrams arrived")
        try await acceptor.sendUnreliable([1, 2, 3])
        var back = dialer.messages.makeAsyncIterator()
        #expect(await back.next() == [1, 2, 3])
        await dialer.close()
    }

    @Test(.measuring) func finishedConnectionsReleaseEverything() async throws {
        // Thousands of connect/exchange/close cycles; afterwards no connection object and no descriptor is left
        // over (other suites run in this process at the same time, hence a little slack).
        for encryption in [EncryptionPreference.none, .required] {
            let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, encryption))
            // Fewer under a sanitizer (each cycle costs ten times as much there; the run never ended with these).
            let cycles = (encryption == .none ? 2_000 : 300) / (TestTime.sanitized ? 10 : 1)
            try await Task.sleep(for: .milliseconds(50))
            let before = (LiveObjects.connectionCount, LiveObjects.driverCount, LiveObjects.coreCount)
            let descriptorsBefore = openSockets()
            var accepted = peers.listener.connections.makeAsyncIterator()
            for index in 0..<cycles {
                let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, encryption), expecting: nil)
                let acceptor = try #require(await accepted.next())
                try await dialer.send([UInt8(index % 256)])
                var messages = acceptor.messages.makeAsyncIterator()
                #expect(await messages.next() == [UInt8(index % 256)])
                await dialer.close()
                _ = await acceptor.closed()
            }
            // The last connections' sockets close on the loop after their close returned.
            var after = (0, 0, 0)
            for _ in 0..<100 {
                try await Task.sleep(for: .milliseconds(20))
                after = (LiveObjects.connectionCount, LiveObjects.driverCount, LiveObjects.coreCount)
                if after.1 <= before.1 && after.2 <= before.2 { break }
            }
            // Sockets only: the end-to-end suites in this process open pipes to their lab processes meanwhile.
            var descriptorsAfter = openSockets()
            for _ in 0..<50 where descriptorsAfter > descriptorsBefore + 8 {
                try await Task.sleep(for: .milliseconds(20))
                descriptorsAfter = openSockets()
            }
            #expect(
                after.0 <= before.0 + 8, "\(encryption): connections \(before.0) -> \(after.0) after \(cycles) cycles")
            #expect(after.1 <= before.1 + 8, "\(encryption): drivers \(before.1) -> \(after.1)")
            #expect(after.2 <= before.2 + 8, "\(encryption): cores \(before.2) -> \(after.2)")
            #expect(
                descriptorsAfter <= descriptorsBefore + 8, "sockets \(descriptorsBefore) -> \(descriptorsAfter)")
            peers.shutdown()
        }
    }

    @Test func sessionMessagesArriveInOrderAheadOfBulkData() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        // 8 MiB of messages nobody reads fill the acceptor's message window; session messages still get through.
        let filler = Task {
            for _ in 0..<32 { try await dialer.send([UInt8](repeating: 1, count: 1 << 20)) }
        }
        try await Task.sleep(for: .milliseconds(50))
        for kind in UInt16(1)...200 {
            try dialer.sendSessionMessage(
                SessionMessage(kind: kind, isCritical: kind % 2 == 0, body: [UInt8(kind % 256)]))
        }
        var received: [SessionMessage] = []
        for await message in acceptor.sessionMessages {
            received.append(message)
            if received.count == 200 { break }
        }
        #expect(received.map(\.kind) == Array(1...200))
        #expect(received.allSatisfy { $0.isCritical == ($0.kind % 2 == 0) && $0.body == [UInt8($0.kind % 256)] })
        #expect(acceptor.driver.shared.unreadCount > 0)  // the bulk messages were still waiting behind them
        filler.cancel()
        dialer.abort()
    }

    @Test func aPeerFloodingSessionMessagesIsDisconnectedWithAReason() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        // Nobody on the acceptor reads them: beyond 256 waiting, the acceptor closes.
        for index in 0..<300 {
            guard (try? dialer.sendSessionMessage(SessionMessage(kind: 9, body: [UInt8(index % 256)]))) != nil else {
                break
            }
        }
        #expect(await acceptor.closed().code == .resourceLimit)
        #expect(await dialer.closed().code == .peerReportedError(code: 7, text: await acceptor.closed().reason))
    }

    @Test func trySendFailsAtOnceWhenThePeerIsBehindAndSendRefusesWhatThePeerWillNotTake() async throws {
        var acceptorConfiguration = TestPeers.configuration(TestPeers.bob, .required)
        acceptorConfiguration.maximumMessageLength = 256 << 10
        let peers = try await LoopbackPeers(acceptorConfiguration)
        defer { peers.shutdown() }
        var configuration = TestPeers.configuration(TestPeers.ada, .required)
        configuration.sendBufferLimit = 512 << 10
        let dialer = try await peers.connect(configuration, expecting: nil)
        let acceptor = try await peers.accepted()
        #expect(dialer.peer.maximumMessageLength == 256 << 10)
        let tooLong = await #expect(throws: ConnectionError.self) {
            try await dialer.send([UInt8](repeating: 0, count: (256 << 10) + 1))
        }
        #expect(tooLong?.code == .messageTooLarge(length: (256 << 10) + 1, limit: 256 << 10))
        // The acceptor does not read: its window fills, then our send buffer, then trySend refuses at once.
        var accepted = 0
        var refusal: ConnectionError?
        let started = ContinuousClock.now
        while refusal == nil && ContinuousClock.now - started < .seconds(10) {
            do {
                try dialer.trySend([UInt8](repeating: 2, count: 64 << 10))
                accepted += 1
            } catch {
                refusal = error
                if error.code != .sendBufferFull(limit: 512 << 10) { break }
            }
            if accepted % 16 == 0 { await Task.yield() }
        }
        #expect(refusal?.code == .sendBufferFull(limit: 512 << 10))
        #expect(accepted > 0)
        // Once the acceptor reads, everything accepted arrives.
        var count = 0
        for await _ in acceptor.messages {
            count += 1
            if count == accepted { break }
        }
        #expect(count == accepted)
        await dialer.close()
    }

    @Test func plaintextConnectionsSendUnreliableMessagesReliably() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .none))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .none), expecting: nil)
        let acceptor = try await peers.accepted()
        #expect(dialer.datagramPayloadLimit == nil)
        try await dialer.sendUnreliable([9])
        var messages = acceptor.messages.makeAsyncIterator()
        #expect(await messages.next() == [9])
        await dialer.close()
    }

    @Test func datagramsAreDroppedNotBufferedWhenTheReaderIsBehind() async throws {
        var configuration = TestPeers.configuration(TestPeers.bob, .required)
        configuration.unreliableBufferLimit = 64 * 1024
        let peers = try await LoopbackPeers(configuration)
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        let datagram = [UInt8](repeating: 1, count: 1000)
        for round in 0..<20 {
            for _ in 0..<25 { try await dialer.sendUnreliable(datagram) }
            if round % 4 == 3 { try await Task.sleep(for: .milliseconds(5)) }
        }
        _ = try await dialer.ping()
        try await Task.sleep(for: .milliseconds(100))
        // 500 KB sent, nobody read: at most the 64 KiB limit is held, the rest counted as dropped.
        #expect(acceptor.droppedDatagrams > 0)
        #expect(acceptor.driver.shared.unreadBytes <= 64 * 1024)
        await dialer.close()
    }

    @Test func closeSendsWhatWasAcceptedAndRefusesNewSendsAtOnce() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        let sent = (0..<40).map { [UInt8](repeating: UInt8($0), count: 64 * 1024) }
        for message in sent { try await dialer.send(message) }
        async let ended = dialer.close(code: 1, reason: "done")
        try await Task.sleep(for: .milliseconds(1))
        await #expect(throws: ConnectionError.self) { try await dialer.send([1, 2, 3]) }
        var received = 0
        var matches = true
        for await message in acceptor.messages {
            matches = matches && message == sent[received]
            received += 1
        }
        #expect(received == sent.count && matches, "\(received) of \(sent.count) accepted messages arrived")
        #expect(await ended.code == .closedLocally)
        #expect(await acceptor.closed().code == .closedByPeer(code: 1, text: "done"))
    }

    @Test func aResetStreamDoesNotWedgeTheConnection() async throws {
        var configuration = TestPeers.configuration(TestPeers.ada, .required)
        configuration.sendBufferLimit = 256 * 1024
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(configuration, expecting: nil)
        let acceptor = try await peers.accepted()
        let stream = try await dialer.openStream(name: "big")
        // Queue more than the send buffer on the stream, without the peer reading.
        let writer = Task {
            for _ in 0..<200 { try await stream.write([UInt8](repeating: 5, count: 64 * 1024)) }
        }
        var streams = acceptor.incomingStreams.makeAsyncIterator()
        let incoming = try #require(await streams.next())
        try await Task.sleep(for: .milliseconds(50))
        incoming.reset()
        await #expect(throws: ConnectionError.self) { try await writer.value }
        await #expect(throws: ConnectionError.self) { try await stream.write([1]) }
        // Messages still flow, and a graceful close still says goodbye.
        try await dialer.send([42])
        var messages = acceptor.messages.makeAsyncIterator()
        #expect(await messages.next() == [42])
        #expect(await dialer.close().code == .closedLocally)
        #expect(await acceptor.closed().code == .closedByPeer(code: 0, text: "closed"))
    }

    @Test func aPeerOpeningTheHighestChannelNumberIsRefusedNotACrash() throws {
        let pair = CorePair(
            dialer: TestPeers.configuration(TestPeers.ada), acceptor: TestPeers.configuration(TestPeers.bob))
        pair.run()
        pair.acceptor.receive(
            try FrameEncoder().encode(
                .channelOpen(channel: 0xFFFF_FFFF, kind: .stream, name: "", initialWindow: 65_536)),
            now: pair.now)
        pair.acceptor.receive(
            try FrameEncoder().encode(
                .channelOpen(channel: 0xFFFF_FFFD, kind: .stream, name: "", initialWindow: 65_536)),
            now: pair.now)
        pair.collect()
        #expect(pair.acceptorClosed?.code == .protocolViolation)
    }

    @Test func theWrongIdentityIsRefusedOverTLS() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        do {
            _ = try await peers.connect(
                TestPeers.configuration(TestPeers.ada, .required), expecting: TestPeers.eve.fingerprint)
            Issue.record("connected to the wrong identity")
        } catch {
            #expect(
                error.code == .identityMismatch(expected: TestPeers.eve.fingerprint, actual: TestPeers.bob.fingerprint))
        }
        var failures = peers.listener.handshakeFailures.makeAsyncIterator()
        let failure = try #require(await failures.next())
        #expect(failure.code == .handshakeFailed)
    }

    @Test func requiredDialerAndPlaintextListenerRefuseEachOther() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .none))
        defer { peers.shutdown() }
        do {
            _ = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
            Issue.record("a .required peer connected to a .none peer")
        } catch {
            #expect(error.code == .encryptionMismatch(local: .required, remote: .none))
        }
    }

    @Test func wrongGroupSecretIsRefusedOverTLS() async throws {
        let listenerSecret = try GroupSecret(Array(repeating: 1, count: 32))
        let dialerSecret = try GroupSecret(Array(repeating: 2, count: 32))
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required, secret: listenerSecret))
        defer { peers.shutdown() }
        do {
            _ = try await peers.connect(
                TestPeers.configuration(TestPeers.ada, .required, secret: dialerSecret), expecting: nil)
            Issue.record("connected with the wrong group secret")
        } catch {
            #expect(error.code == .groupSecretMismatch)
        }
        let joined = try await peers.connect(
            TestPeers.configuration(TestPeers.ada, .required, secret: listenerSecret), expecting: nil)
        #expect(joined.peer.isGroupMember)
        await joined.close()
    }

    @Test func anAbortedPeerIsNoticedAtOnce() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        let start = ContinuousClock.now
        dialer.abort()
        let error = await acceptor.closed()
        #expect(error.code == .connectionLost)
        // Detected from the TCP end of stream, not the keepalive (which would take seconds).
        #expect(ContinuousClock.now - start < .seconds(2))
    }

    @Test func randomBytesAndSilentClientsAreRefusedAndRealPeersStillConnect() async throws {
        // Time is the loop's manual clock: the silent client's handshake timeout passes without waiting for it.
        let clock = ManualClock()
        var configuration = TestPeers.configuration(TestPeers.bob, .required)
        configuration.silenceTimeout = .seconds(600)  // the real peer's connection must outlive the jump in time
        configuration.keepaliveInterval = .seconds(200)
        let peers = try await LoopbackPeers(configuration, clock: clock)
        defer { peers.shutdown() }
        let port = peers.listener.localAddress.port
        // A client that sends random bytes, and one that sends nothing.
        let garbage = try RawClient(port: port)
        try garbage.send((0..<4096).map { _ in UInt8.random(in: 0...255) })
        let silent = try RawClient(port: port)
        // A real peer still gets through meanwhile.
        var dialerConfiguration = TestPeers.configuration(TestPeers.ada, .required)
        dialerConfiguration.silenceTimeout = configuration.silenceTimeout
        dialerConfiguration.keepaliveInterval = configuration.keepaliveInterval
        let real = try await peers.connect(dialerConfiguration, expecting: nil)
        #expect(real.peer.fingerprint == TestPeers.bob.fingerprint)
        let acceptedEnd = try await peers.accepted()  // established once the dialer's code nonce arrived
        var failures = peers.listener.handshakeFailures.makeAsyncIterator()
        #expect(await failures.next()?.code == .notAPeer)
        // The silent client holds its slot until the handshake timeout (10 s by default), not a moment longer.
        #expect(peers.listener.statistics.pending == 1)
        clock.advance(by: .milliseconds(9_900))
        try await Task.sleep(for: .milliseconds(20))
        #expect(peers.listener.statistics.pending == 1)
        clock.advance(by: .milliseconds(100))
        #expect(await failures.next()?.code == .handshakeTimedOut(limit: .seconds(10)))
        #expect(try await offPool { try garbage.readUntilClosed() } >= 0)
        #expect(try await offPool { try silent.readUntilClosed() } >= 0)
        #expect(real.closeReason == nil && acceptedEnd.closeReason == nil)
        await real.close()
    }

    @Test func oneHostCannotTakeEveryHandshakeSlot() async throws {
        var configuration = TestPeers.configuration(TestPeers.bob, .required)
        configuration.maximumPendingHandshakes = 16
        configuration.maximumPendingHandshakesPerHost = 4
        let peers = try await LoopbackPeers(configuration)
        defer { peers.shutdown() }
        let port = peers.listener.localAddress.port
        // Ten silent clients from 127.0.0.1: four get a slot, the rest are answered busy.
        let first = try (0..<10).map { _ in try RawClient(port: port) }
        let deadline = ContinuousClock.now + .seconds(10)
        while peers.listener.statistics.accepted < 10 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(peers.listener.statistics.pending == 4)
        #expect(peers.listener.statistics.refusedBusy == 6)
        // Another host (127.0.0.2) still gets slots of its own, and so does a real peer from there.
        let second = try (0..<3).map { _ in try RawClient(port: port, from: IPv4Address(127, 0, 0, 2)) }
        while peers.listener.statistics.accepted < 13 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(peers.listener.statistics.pending == 7)
        #expect(peers.listener.statistics.refusedBusy == 6)
        for client in first + second { client.close() }
    }

    @Test func abandonedVerificationsAreReportedAndLimitedPerMinute() async throws {
        // A man in the middle plays the dialer: he sees this side's code nonce, computes its code, and goes away
        // whenever it would not match the code his other victim shows. Each such attempt is reported, and after
        // the limit the listener answers "busy" for the rest of the minute (on the loop's manual clock).
        let clock = ManualClock()
        var configuration = TestPeers.configuration(TestPeers.bob, .required)
        configuration.maximumAbandonedVerificationsPerMinute = 3
        let peers = try await LoopbackPeers(configuration, clock: clock)
        defer { peers.shutdown() }
        let port = peers.listener.localAddress.port
        var failures = peers.listener.handshakeFailures.makeAsyncIterator()
        /// Runs a real dialer core over a raw socket and hangs up the moment it has the acceptor's hello, before
        /// its code nonce goes out. Returns how the dialer's setup ended (nil: it got as far as the hello).
        func abandon() async throws -> ConnectionError? {
            try await offPool {
                let dialer = ConnectionCore(
                    role: .dialer, configuration: TestPeers.configuration(TestPeers.ada, .required), expectedPeer: nil,
                    now: clock.now(), makeTLS: TLSContexts.of(TestPeers.ada).makeRecordLayer(expecting: nil))
                let client = try RawClient(port: port)
                defer { client.close() }
                for _ in 0..<50 {
                    if let closed = CorePair.closed(in: dialer.takeEvents()) { return closed }
                    if dialer.peer != nil { return nil }  // the hello arrived: leave without revealing
                    let output = dialer.takeOutput()
                    if !output.isEmpty { try client.send(output) }
                    let input = try client.readSome()
                    if input.isEmpty { return CorePair.closed(in: dialer.takeEvents()) }
                    dialer.receive(input, now: clock.now())
                }
                return nil
            }
        }
        for _ in 0..<3 {
            #expect(try await abandon() == nil)
            #expect(await failures.next()?.code == .verificationAbandoned)
        }
        #expect(peers.listener.statistics.abandonedVerifications == 3)
        // The limit is reached: the next dialer is answered busy, whoever it is.
        #expect(try await abandon()?.code == .tooManyPendingHandshakes)
        await #expect(throws: ConnectionError.self) {
            try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        }
        #expect(peers.listener.statistics.refusedAfterAbandonedVerifications == 2)
        // A minute later honest peers connect again.
        clock.advance(by: .seconds(60))
        let real = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        #expect(real.verificationCode != nil)
        await real.close()
    }

    @Test func aListenerKeepsAtMostItsMaximumOfConnections() async throws {
        var configuration = TestPeers.configuration(TestPeers.bob, .none)
        configuration.maximumConnections = 3
        let peers = try await LoopbackPeers(configuration)
        defer { peers.shutdown() }
        var open: [PeerConnection] = []
        for _ in 0..<3 {
            open.append(try await peers.connect(TestPeers.configuration(TestPeers.ada, .none), expecting: nil))
        }
        let refused = await #expect(throws: ConnectionError.self) {
            try await peers.connect(TestPeers.configuration(TestPeers.ada, .none), expecting: nil)
        }
        #expect(refused?.code == .tooManyConnections)
        #expect(peers.listener.statistics.refusedFull == 1)
        // One ends: there is room again.
        await open.removeFirst().close()
        var retry: PeerConnection?
        for _ in 0..<100 where retry == nil {
            retry = try? await peers.connect(TestPeers.configuration(TestPeers.ada, .none), expecting: nil)
            if retry == nil { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(retry != nil)
    }

    @Test func connectionsTheApplicationDoesNotTakeAreBoundedAndClosedWithAReason() async throws {
        var configuration = TestPeers.configuration(TestPeers.bob, .none)
        configuration.maximumQueuedConnections = 2
        let peers = try await LoopbackPeers(configuration)
        defer { peers.shutdown() }
        var dialers: [PeerConnection] = []
        for _ in 0..<5 {
            dialers.append(try await peers.connect(TestPeers.configuration(TestPeers.ada, .none), expecting: nil))
        }
        // Nobody takes from `connections`: the first two wait there, the next three are closed, saying why.
        for dialer in dialers[2...] {
            let reason = await dialer.closed()
            #expect(reason.name == "closedByPeer")
            #expect(textOf(reason).contains("not taken"), "\(reason)")
        }
        #expect(peers.listener.statistics.droppedUntaken == 3)
        #expect(dialers[0].closeReason == nil && dialers[1].closeReason == nil)
        var accepted = peers.listener.connections.makeAsyncIterator()
        #expect(await accepted.next() != nil)
    }

    private func textOf(_ error: ConnectionError) -> String {
        if case .closedByPeer(_, let text) = error.code { return text }
        return ""
    }

    @Test func theDefaultHandshakeTimeoutIsAtMostTenSeconds() {
        #expect(ConnectionConfiguration(identity: TestPeers.ada).handshakeTimeout <= .seconds(10))
        #expect(ConnectionConfiguration(identity: TestPeers.ada).silenceTimeout <= .seconds(6))
    }

    @Test func aFloodOfThousandsOfConnectionAttemptsIsBoundedAndAnsweredBusy() async throws {
        var configuration = TestPeers.configuration(TestPeers.bob, .required)
        configuration.maximumPendingHandshakes = 16
        configuration.maximumPendingHandshakesPerHost = 16
        configuration.handshakeTimeout = .seconds(3)
        let clock = ManualClock()
        let peers = try await LoopbackPeers(configuration, clock: clock)
        defer { peers.shutdown() }
        let port = peers.listener.localAddress.port
        // Thousands of attempts: both ends of each are descriptors in this process.
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        if limit.rlim_cur < 5000 {
            limit.rlim_cur = min(5000, limit.rlim_max)
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        let attempts = min(2000, (Int(limit.rlim_cur) - 500) / 2)
        try #require(attempts >= 300, "RLIMIT_NOFILE \(limit.rlim_cur) is too low")
        let clients = try await offPool { try (0..<attempts).map { _ in try RawClient(port: port) } }
        // Wait until the listener accepted them all.
        let deadline = ContinuousClock.now + .seconds(10)
        while peers.listener.statistics.accepted < clients.count && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let statistics = peers.listener.statistics
        #expect(statistics.accepted == clients.count)
        #expect(statistics.pending <= 16)
        #expect(statistics.refusedBusy >= clients.count - 16)
        // A refused client reads the busy answer: magic, version, kind 2, outcome 0x81.
        let answer = try await offPool { try clients[clients.count - 1].read(count: 24) }
        #expect(Array(answer.prefix(4)) == Array("MPCP".utf8) && answer[5] == 2 && answer[7] == 0x81)
        // Once the silent ones time out (the manual clock jumps past the handshake timeout), a real peer connects.
        clock.advance(by: .seconds(3))
        let timeoutDeadline = ContinuousClock.now + .seconds(10)
        while peers.listener.statistics.pending > 0 && ContinuousClock.now < timeoutDeadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(peers.listener.statistics.pending == 0)
        let real = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        #expect(real.peer.displayName == "Bob")
        await real.close()
        for client in clients { client.close() }
    }
}

/// A blocking TCP client on 127.0.0.1 for hostile-input tests.
final class RawClient: @unchecked Sendable {
    private(set) var fd: Int32

    init(port: UInt16, from source: IPv4Address? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = source.value.bigEndian
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else { throw SystemCallError(call: "bind", errno: errno) }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else { throw SystemCallError(call: "connect", errno: errno) }
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ bytes: [UInt8]) throws {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == bytes.count else { throw SystemCallError(call: "send", errno: errno) }
    }

    func read(count: Int) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: count)
        while bytes.count < count {
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, count - bytes.count, 0) }
            guard got > 0 else { throw SystemCallError(call: "recv", errno: got == 0 ? 0 : errno) }
            bytes += buffer.prefix(got)
        }
        return bytes
    }

    /// One read of whatever has arrived (at most 64 KiB); empty at the end of the stream.
    func readSome() throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard got >= 0 else { throw SystemCallError(call: "recv", errno: errno) }
        return Array(buffer.prefix(got))
    }

    /// Reads until the server closes; returns the bytes read. Throws if the read timed out.
    func readUntilClosed() throws -> Int {
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if got == 0 { return total }
            if got < 0 {
                if errno == ECONNRESET { return total }
                throw SystemCallError(call: "recv", errno: errno)
            }
            total += got
        }
    }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    deinit { close() }
}

@Suite("The host a connection comes from")
struct HostKeyTests {
    @Test func ipv4MappedAddressesAreTheirIPv4HostAndIPv6HostsTheirAddress() throws {
        let mapped = try #require(IPAddress("::ffff:192.0.2.1"))
        let otherMapped = try #require(IPAddress("::ffff:192.0.2.2"))
        #expect(HostKey(mapped) == HostKey(.v4(IPv4Address(192, 0, 2, 1))))
        #expect(HostKey(mapped) != HostKey(otherMapped))
        let host = try #require(IPAddress("2001:db8:1:2::1"))
        #expect(HostKey(host) == HostKey(try #require(IPAddress("2001:db8:1:2:0:0:0:1"))))
        #expect(HostKey(host) != HostKey(try #require(IPAddress("2001:db8:1:2::ff"))))
    }

    @Test func twoPeersOnOneLinkAreTwoHosts() throws {
        // Found by review: every host on a link shares the link's /64 (all link-local addresses are in fe80::/64,
        // and SLAAC gives each host of a LAN the same global or ULA prefix), so keyed by /64 every IPv6 peer of a
        // LAN was one host: eight handshake slots for the whole link.
        let ada = try #require(IPAddress("fe80::1c2d:3eff:fe4f:5a6b"))
        let bob = try #require(IPAddress("fe80::9a8b:7cff:fe6d:5e4f"))
        let adaULA = try #require(IPAddress("fd12:3456:789a:1::1c2d"))
        let bobULA = try #require(IPAddress("fd12:3456:789a:1::9a8b"))
        #expect(HostKey(ada) != HostKey(bob))
        #expect(HostKey(adaULA) != HostKey(bobULA))
    }
}

/// The process's open socket descriptors (`/proc/self/fd` entries that link to `socket:[...]`).
func openSockets() -> Int {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return 0 }
    return entries.filter { entry in
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"))?.hasPrefix("socket:")
            == true
    }.count
}
