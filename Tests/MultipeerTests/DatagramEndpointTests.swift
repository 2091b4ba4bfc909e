import Glibc
import MultipeerIO
import NetLab
import Testing

@testable import Multipeer

/// Payloads delivered to one endpoint's handler, appended on the loop thread and read by the test.
private final class Inbox: Sendable {
    private let payloads = Lock<[[UInt8]]>([])

    func append(_ payload: [UInt8]) { payloads.withLock { $0.append(payload) } }
    var values: [[UInt8]] { payloads.withLock { $0 } }
    var count: Int { payloads.withLock { $0.count } }
}

/// Two endpoints on loopback with one connection's keys between them: the dialer's and the acceptor's side.
///
/// Everything but the inboxes is used only on the loop thread (inside `loop.submit`), hence `@unchecked Sendable`.
private final class LoopbackPair: @unchecked Sendable {
    let loop: EventLoop
    let dialerKeys: DatagramKeys
    let acceptorKeys: DatagramKeys
    let dialer: DatagramEndpoint
    let acceptor: DatagramEndpoint
    let dialerSealer: DatagramSealer
    let acceptorSealer: DatagramSealer
    let dialerInbox = Inbox()
    let acceptorInbox = Inbox()

    /// Creates both endpoints and registers each side's opener. Loop thread only.
    init(loop: EventLoop, address: IPAddress, seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let exported = (0..<DatagramKeys.exportedLength).map { _ in UInt8.random(in: 0...255, using: &random) }
        self.loop = loop
        dialerKeys = DatagramKeys(exported: exported, isDialer: true)
        acceptorKeys = DatagramKeys(exported: exported, isDialer: false)
        dialer = try DatagramEndpoint(bindingTo: SocketAddress(address, port: 0), loop: loop)
        acceptor = try DatagramEndpoint(bindingTo: SocketAddress(address, port: 0), loop: loop)
        dialerSealer = try dialerKeys.makeSealer()
        acceptorSealer = try acceptorKeys.makeSealer()
        let dialerInbox = dialerInbox
        let acceptorInbox = acceptorInbox
        let dialerOpener = try dialerKeys.makeOpener()
        let acceptorOpener = try acceptorKeys.makeOpener()
        guard
            dialer.register(
                receiverID: dialerKeys.receiving.receiverID, opener: dialerOpener,
                handler: { dialerInbox.append($0) }),
            acceptor.register(
                receiverID: acceptorKeys.receiving.receiverID, opener: acceptorOpener,
                handler: { acceptorInbox.append($0) })
        else { throw RegistrationRefused() }
    }

    struct RegistrationRefused: Error {}
}

/// A sealer handed out of `loop.submit` to be used again inside it: only ever touched on the loop thread.
private struct UncheckedSealer: @unchecked Sendable {
    let sealer: DatagramSealer
}

/// Runs `body` with a fresh loop and a pair of endpoints on `address`; always closes them and stops the loop.
private func withLoopbackPair(
    _ address: IPAddress = .v4(.loopback), seed: UInt64 = 1, _ body: (LoopbackPair) async throws -> Void
) async throws {
    let loop = try EventLoop(name: "datagram-test")
    defer { loop.shutdown() }
    let pair = try await loop.submit { try LoopbackPair(loop: loop, address: address, seed: seed) }
    try await body(pair)
    try await loop.submit {
        pair.dialer.close()
        pair.acceptor.close()
    }
}

/// Polls `condition` until it holds or `timeout` passes, sleeping (not blocking) between polls.
private func eventually(timeout: Duration = .seconds(10), _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + TestTime.scaled(timeout)
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return await condition()
}

/// The `index`-th test payload of a direction: 0 to 1,196 bytes, a different length for each index below 1,197.
private func testPayload(_ index: Int, direction: UInt8) -> [UInt8] {
    let count = index * 37 % 1_197
    return (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) ^ direction }
}

@Suite struct DatagramEndpointTests {
    @Test func thousandDatagramsEachWayOverLoopback() async throws {
        try await withLoopbackPair { pair in
            let total = 1_000
            // Sent in batches, waiting for each to arrive: a burst of 1,000 from the loop thread, which is also
            // the receiving thread, would overflow the receive buffers (UDP drops silently when they are full).
            // Paced this way loopback loses nothing, so every datagram must arrive.
            let batch = 25
            for start in stride(from: 0, to: total, by: batch) {
                try await pair.loop.submit {
                    let acceptorAddress = pair.acceptor.localAddress
                    let dialerAddress = pair.dialer.localAddress
                    for index in start..<start + batch {
                        let toAcceptor = try pair.dialerSealer.seal(testPayload(index, direction: 0))
                        try pair.dialer.send(toAcceptor, to: acceptorAddress)
                        let toDialer = try pair.acceptorSealer.seal(testPayload(index, direction: 0xFF))
                        try pair.acceptor.send(toDialer, to: dialerAddress)
                    }
                }
                let arrived = await eventually {
                    pair.acceptorInbox.count == start + batch && pair.dialerInbox.count == start + batch
                }
                try #require(arrived, "batch from \(start): \(pair.acceptorInbox.count), \(pair.dialerInbox.count)")
            }
            let byLength: ([UInt8], [UInt8]) -> Bool = { $0.count < $1.count }
            #expect(
                pair.acceptorInbox.values.sorted(by: byLength)
                    == (0..<total).map { testPayload($0, direction: 0) }.sorted(by: byLength))
            #expect(
                pair.dialerInbox.values.sorted(by: byLength)
                    == (0..<total).map { testPayload($0, direction: 0xFF) }.sorted(by: byLength))
            let (dialerStatistics, acceptorStatistics) = try await pair.loop.submit {
                (pair.dialer.statistics, pair.acceptor.statistics)
            }
            for statistics in [dialerStatistics, acceptorStatistics] {
                var expected = DatagramEndpoint.Statistics()
                expected.received = total
                expected.delivered = total
                expected.sent = total
                #expect(statistics == expected)
            }
        }
    }

    @Test func hostilePacketsAreDroppedAndCounted() async throws {
        try await withLoopbackPair(seed: 2) { pair in
            let acceptorID = pair.acceptorKeys.receiving.receiverID
            let keyToAcceptor = pair.dialerKeys.sending
            try await pair.loop.submit {
                let destination = pair.acceptor.localAddress
                // Hostile packets come from a socket of their own: the endpoint does not care about the source.
                let attacker = try UDPSocket(family: .ipv4, loop: pair.loop)
                defer { attacker.close() }
                var random = SplitMix64(seed: 3)
                func randomBytes(_ count: Int) -> [UInt8] {
                    (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
                }

                // 1. Delivered, then 2. the same bytes again: a replay.
                let genuine = try pair.dialerSealer.seal(Array("first".utf8))
                try pair.dialer.send(genuine, to: destination)
                try attacker.send(genuine, to: destination)
                // 3. Random bytes (not starting with the format byte): malformed.
                var noise = randomBytes(200)
                noise[0] = 0x42
                try attacker.send(noise, to: destination)
                // 4. Too short to be a packet: malformed.
                try attacker.send(Array(genuine.prefix(35)), to: destination)
                // 5. A valid header for the acceptor followed by random bytes: fails authentication.
                var header = [UInt8](repeating: 0, count: 20)
                header.withUnsafeMutableBytes { DatagramHeader(receiverID: acceptorID, counter: 1).write(to: $0) }
                try attacker.send(header + randomBytes(64), to: destination)
                // 6. Sealed with the right key for a receive id nobody registered: unknown receiver.
                let stranger = try DatagramSealer(secret: keyToAcceptor.secret, receiverID: acceptorID ^ 1)
                try attacker.send(try stranger.seal(Array("stranger".utf8)), to: destination)
                // 7. Counter 5,000 is delivered; then 8. the dialer's counter 1 is more than 1,024 behind: too old.
                let ahead = try DatagramSealer(
                    secret: keyToAcceptor.secret, receiverID: acceptorID, firstCounter: 5_000)
                try attacker.send(try ahead.seal(Array("ahead".utf8)), to: destination)
                try pair.dialer.send(try pair.dialerSealer.seal(Array("late".utf8)), to: destination)
                // 8b. Sealed with the right keys, but two key generations ahead: too far ahead, dropped unread.
                let farAhead = try DatagramSealer(
                    secret: keyToAcceptor.secret, receiverID: acceptorID,
                    firstCounter: 2 << DatagramFormat.generationShift)
                try attacker.send(try farAhead.seal(Array("far ahead".utf8)), to: destination)
                // 9. A last genuine packet: once it arrives, the socket has read everything before it.
                try pair.dialer.send(try ahead.seal(Array("last".utf8)), to: destination)
            }
            #expect(await eventually { pair.acceptorInbox.count == 3 })
            #expect(pair.acceptorInbox.values == ["first", "ahead", "last"].map { Array($0.utf8) })
            let statistics = try await pair.loop.submit { pair.acceptor.statistics }
            #expect(statistics.received == 10)
            #expect(statistics.delivered == 3)
            #expect(statistics.droppedReplay == 1)
            #expect(statistics.droppedMalformed == 2)
            #expect(statistics.droppedAuthentication == 1)
            #expect(statistics.droppedUnknownReceiver == 1)
            #expect(statistics.droppedTooOld == 1)
            #expect(statistics.droppedTooFarAhead == 1)
            #expect(statistics.sendDrops == 0)
            #expect(pair.dialerInbox.count == 0)
        }
    }

    @Test func registrationIsExclusiveAndUnregisterStopsDelivery() async throws {
        try await withLoopbackPair(seed: 4) { pair in
            let intruderInbox = Inbox()
            let duplicateAccepted = try await pair.loop.submit {
                pair.acceptor.register(
                    receiverID: pair.acceptorKeys.receiving.receiverID, opener: try pair.acceptorKeys.makeOpener(),
                    handler: { intruderInbox.append($0) })
            }
            #expect(!duplicateAccepted)
            _ = try await pair.loop.submit {
                try pair.dialer.send(try pair.dialerSealer.seal([1]), to: pair.acceptor.localAddress)
            }
            #expect(await eventually { pair.acceptorInbox.count == 1 })

            try await pair.loop.submit {
                pair.acceptor.unregister(receiverID: pair.acceptorKeys.receiving.receiverID)
                try pair.dialer.send(try pair.dialerSealer.seal([2]), to: pair.acceptor.localAddress)
            }
            #expect(await eventually { (try? await pair.loop.submit { pair.acceptor.statistics.received }) == 2 })
            let statistics = try await pair.loop.submit { pair.acceptor.statistics }
            #expect(statistics.droppedUnknownReceiver == 1)
            #expect(statistics.delivered == 1)
            #expect(pair.acceptorInbox.values == [[1]])
            #expect(intruderInbox.count == 0)
        }
    }

    @Test func oneEndpointServesManyConnections() async throws {
        try await withLoopbackPair(seed: 6) { pair in
            // Three more connections end on the acceptor's endpoint, each with keys of its own.
            let inboxes = (0..<3).map { _ in Inbox() }
            let sealers = try await pair.loop.submit { () -> [UncheckedSealer] in
                try (0..<3).map { index in
                    var random = SplitMix64(seed: 100 + UInt64(index))
                    let exported = (0..<DatagramKeys.exportedLength).map { _ in
                        UInt8.random(in: 0...255, using: &random)
                    }
                    let far = DatagramKeys(exported: exported, isDialer: true)
                    let near = DatagramKeys(exported: exported, isDialer: false)
                    let inbox = inboxes[index]
                    guard
                        pair.acceptor.register(
                            receiverID: near.receiving.receiverID, opener: try near.makeOpener(),
                            handler: { inbox.append($0) })
                    else { throw LoopbackPair.RegistrationRefused() }
                    return UncheckedSealer(sealer: try far.makeSealer())
                }
            }
            try await pair.loop.submit {
                for round in 0..<10 {
                    for (index, sealer) in sealers.enumerated() {
                        let packet = try sealer.sealer.seal([UInt8(index), UInt8(round)])
                        try pair.dialer.send(packet, to: pair.acceptor.localAddress)
                    }
                }
            }
            #expect(await eventually { inboxes.allSatisfy { $0.count == 10 } })
            for (index, inbox) in inboxes.enumerated() {
                #expect(Set(inbox.values) == Set((0..<10).map { [UInt8(index), UInt8($0)] }))
            }
            #expect(pair.acceptorInbox.count == 0)
            let statistics = try await pair.loop.submit { pair.acceptor.statistics }
            #expect(statistics.delivered == 30)
            #expect(statistics.received == 30)
        }
    }

    @Test func closeIsIdempotentAndSendingAfterItThrows() async throws {
        try await withLoopbackPair(seed: 7) { pair in
            let error = try await pair.loop.submit { () -> SystemCallError? in
                pair.dialer.close()
                pair.dialer.close()
                do {
                    try pair.dialer.send(try pair.dialerSealer.seal([1]), to: pair.acceptor.localAddress)
                    return nil
                } catch let error as SystemCallError {
                    return error
                }
            }
            #expect(error?.errno == EBADF)
        }
    }

    @Test func exchangeOverIPv6Loopback() async throws {
        try await withLoopbackPair(.v6(.loopback), seed: 5) { pair in
            #expect(pair.dialer.localAddress.family == .ipv6)
            try await pair.loop.submit {
                for index in 0..<20 {
                    try pair.dialer.send(
                        try pair.dialerSealer.seal(testPayload(index, direction: 1)), to: pair.acceptor.localAddress)
                    try pair.acceptor.send(
                        try pair.acceptorSealer.seal(testPayload(index, direction: 2)), to: pair.dialer.localAddress)
                }
            }
            #expect(await eventually { pair.acceptorInbox.count == 20 && pair.dialerInbox.count == 20 })
            #expect(Set(pair.acceptorInbox.values) == Set((0..<20).map { testPayload($0, direction: 1) }))
            #expect(Set(pair.dialerInbox.values) == Set((0..<20).map { testPayload($0, direction: 2) }))
        }
    }
}
