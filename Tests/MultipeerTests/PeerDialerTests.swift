import Foundation
import MulticastDNS
import MultipeerIO
import Synchronization
import Testing

@testable import Multipeer

/// The result of a connect running in a task, readable without awaiting it, so a test can bound how long
/// it waits for a connect that ignores cancellation instead of hanging with it.
final class ConnectOutcome: Sendable {
    let result = Mutex<Result<PeerConnection, ConnectionError>?>(nil)
    var isDone: Bool { result.withLock { $0 != nil } }
    var error: ConnectionError? {
        result.withLock { if case .failure(let error) = $0 { error } else { nil } }
    }

    /// Starts `connect` in a task that records its result.
    static func start(
        _ connect: @escaping @Sendable () async throws(ConnectionError) -> PeerConnection
    ) -> (ConnectOutcome, Task<Void, Never>) {
        let outcome = ConnectOutcome()
        let task = Task {
            let result: Result<PeerConnection, ConnectionError>
            do throws(ConnectionError) { result = .success(try await connect()) } catch { result = .failure(error) }
            outcome.result.withLock { $0 = result }
        }
        return (outcome, task)
    }
}

/// Dialing a peer's several addresses on real loopback sockets (127.0.0.1 and ::1 only).
@Suite("Dialing a peer's addresses", .serialized)
struct PeerDialerTests {
    static let v4 = IPAddress.v4(.loopback)
    static let v6 = IPAddress.v6(.loopback)
    static let ada = TestPeers.configuration(TestPeers.ada, .required)
    static let bob = TestPeers.configuration(TestPeers.bob, .required)

    /// A loop and a listener of Bob's on `host` (port 0 unless given), torn down after `body`.
    static func withBob<T>(
        on host: IPAddress = v4, port: UInt16 = 0, _ body: (EventLoop, PeerListener) async throws -> T
    ) async throws -> T {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let listener = try await PeerListener(configuration: bob, address: SocketAddress(host, port: port), loop: loop)
        defer { listener.close() }
        return try await body(loop, listener)
    }

    @Test func aRefusedAddressIsPassedOverAtOnce() async throws {
        try await Self.withBob { loop, listener in
            let closed = try RawListener.closedPort(Self.v4)
            let started = ContinuousClock.now
            // A delay far longer than the test may take: only a refusal can start the second attempt this soon.
            let connection = try await PeerConnection.connect(
                to: [closed, listener.localAddress], expecting: TestPeers.bob.fingerprint, configuration: Self.ada,
                dial: DialConfiguration(connectionAttemptDelay: .seconds(10)), loop: loop)
            #expect(ContinuousClock.now - started < .seconds(5))
            #expect(connection.remoteAddress == listener.localAddress)
            #expect(connection.peer.fingerprint == TestPeers.bob.fingerprint && connection.peer.isAuthenticated)
            await connection.close()
        }
    }

    @Test func aSilentAddressIsOvertakenAfterTheDelayAndItsAttemptClosed() async throws {
        try await Self.withBob { loop, listener in
            // Tried first (IPv6 goes first): it accepts and never says a word.
            let silent = try RawListener(Self.v6)
            let accepted = Task { try await offPool { try silent.accept() } }
            let started = ContinuousClock.now
            let connection = try await PeerConnection.connect(
                to: [listener.localAddress, silent.address], expecting: TestPeers.bob.fingerprint,
                configuration: Self.ada, dial: DialConfiguration(connectionAttemptDelay: .milliseconds(100)),
                loop: loop)
            #expect(ContinuousClock.now - started >= .milliseconds(100))
            #expect(connection.remoteAddress == listener.localAddress)
            // The abandoned attempt's socket is closed at once (not at its 10 s handshake timeout): the silent
            // server sees the end of the connection.
            let client = try await accepted.value
            defer { close(client) }
            let won = ContinuousClock.now
            try await offPool { try RawListener.readUntilClosed(client) }
            #expect(ContinuousClock.now - won < .seconds(3))
            await connection.close()
        }
    }

    @Test func ipv6IsTriedFirstAndIPv4TakesOverWhenIPv6Refuses() async throws {
        try await Self.withBob { loop, listener in
            let port = listener.localAddress.port
            let both = [SocketAddress(Self.v4, port: port), SocketAddress(Self.v6, port: port)]
            let listener6 = try await PeerListener(
                configuration: Self.bob, address: SocketAddress(Self.v6, port: port), loop: loop)
            let overIPv6 = try await PeerConnection.connect(
                to: both, expecting: TestPeers.bob.fingerprint, configuration: Self.ada, loop: loop)
            #expect(overIPv6.remoteAddress == SocketAddress(Self.v6, port: port))
            await overIPv6.close()
            listener6.close()
            let overIPv4 = try await PeerConnection.connect(
                to: both, expecting: TestPeers.bob.fingerprint, configuration: Self.ada, loop: loop)
            #expect(overIPv4.remoteAddress == SocketAddress(Self.v4, port: port))
            await overIPv4.close()
        }
    }

    @Test func whenEveryAddressFailsEachAttemptsFailureIsReported() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let addresses = [try RawListener.closedPort(Self.v4), try RawListener.closedPort(Self.v6)]
        do {
            _ = try await PeerConnection.connect(
                to: addresses, expecting: TestPeers.bob.fingerprint, configuration: Self.ada, loop: loop)
            Issue.record("connected to closed ports")
        } catch {
            #expect(error.code == .unreachable)
            #expect(error.attempts.map(\.address) == [addresses[1], addresses[0]])
            #expect(error.attempts.allSatisfy { $0.error.code == .socket(call: "connect", errno: ECONNREFUSED) })
            #expect(error.reason.contains("\(addresses[0])") && error.reason.contains("\(addresses[1])"))
        }
    }

    @Test func aPeerThatProvesAnotherIdentityIsReportedAsSuch() async throws {
        try await Self.withBob { loop, listener in
            let closed = try RawListener.closedPort(Self.v4)
            do throws(ConnectionError) {
                _ = try await PeerConnection.connect(
                    to: [closed, listener.localAddress], expecting: TestPeers.eve.fingerprint,
                    configuration: Self.ada, loop: loop)
                Issue.record("connected to Bob expecting Eve")
            } catch {
                #expect(
                    error.code
                        == .identityMismatch(expected: TestPeers.eve.fingerprint, actual: TestPeers.bob.fingerprint))
                #expect(error.attempts.map(\.address) == [closed, listener.localAddress])
            }
        }
    }

    @Test func theWholeDialIsBoundedByItsTimeoutAndLeavesNoSocketBehind() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let full = try RawListener.full()
        defer { full.close() }
        let started = ContinuousClock.now
        do {
            _ = try await PeerConnection.connect(
                to: [full.address], expecting: nil, configuration: Self.ada,
                dial: DialConfiguration(timeout: .milliseconds(300)), loop: loop)
            Issue.record("connected to a full backlog")
        } catch {
            #expect(error.code == .unreachable)
            #expect(error.attempts.map(\.error.code) == [.handshakeTimedOut(limit: .milliseconds(300))])
        }
        #expect(ContinuousClock.now - started < .seconds(3))
        #expect(await eventually { synSentSockets(to: full.address.port) == 0 })
    }

    @Test func cancellingAPendingConnectEndsItAtOnceAndClosesItsSocket() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let full = try RawListener.full()
        defer { full.close() }
        let (outcome, task) = ConnectOutcome.start { () async throws(ConnectionError) -> PeerConnection in
            try await PeerConnection.connect(to: full.address, expecting: nil, configuration: Self.ada, loop: loop)
        }
        let connecting = await eventually { synSentSockets(to: full.address.port) == 1 }
        try #require(connecting, "the connect never started")
        task.cancel()
        // Without cancellation support the connect would wait for the kernel's SYN retries, about two minutes.
        let ended = await eventually { outcome.isDone }
        try #require(ended, "the cancelled connect is still waiting")
        #expect(outcome.error?.code == .closedLocally)
        #expect(synSentSockets(to: full.address.port) == 0)
    }

    @Test func cancellingAConnectDuringItsHandshakeClosesTheConnection() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let silent = try RawListener(Self.v4)
        let (outcome, task) = ConnectOutcome.start { () async throws(ConnectionError) -> PeerConnection in
            try await PeerConnection.connect(to: silent.address, expecting: nil, configuration: Self.ada, loop: loop)
        }
        let client = try await offPool { try silent.accept() }
        defer { close(client) }
        task.cancel()
        let ended = await eventually { outcome.isDone }
        try #require(ended, "the cancelled connect is still waiting")
        #expect(outcome.error?.code == .closedLocally)
        try await offPool { try RawListener.readUntilClosed(client) }
    }

    @Test func cancellingADialCancelsEveryAttempt() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let full = try RawListener.full()
        defer { full.close() }
        let silent = try RawListener(Self.v6)
        let (outcome, task) = ConnectOutcome.start { () async throws(ConnectionError) -> PeerConnection in
            try await PeerConnection.connect(
                to: [full.address, silent.address], expecting: nil, configuration: Self.ada,
                dial: DialConfiguration(connectionAttemptDelay: .milliseconds(10)), loop: loop)
        }
        let client = try await offPool { try silent.accept() }
        defer { close(client) }
        let connecting = await eventually { synSentSockets(to: full.address.port) == 1 }
        try #require(connecting, "the second attempt never started")
        task.cancel()
        let ended = await eventually { outcome.isDone }
        try #require(ended, "the cancelled dial is still waiting")
        #expect(outcome.error?.code == .closedLocally)
        try await offPool { try RawListener.readUntilClosed(client) }
        #expect(await eventually { synSentSockets(to: full.address.port) == 0 })
    }

    @Test func tooManyAddressesAreRefusedBeforeAnyIsTried() async throws {
        let loop = try EventLoop(name: "dial-test")
        defer { loop.shutdown() }
        let many = (0..<33).map { SocketAddress(Self.v4, port: UInt16(40000 + $0)) }
        await #expect(throws: ConnectionError.self) {
            try await PeerConnection.connect(to: many, expecting: nil, configuration: Self.ada, loop: loop)
        }
    }
}

/// Dialing what discovery found: addresses with their interfaces, the port from SRV, the identity from TXT.
@Suite("Dialing a discovered peer", .serialized)
struct DiscoveredPeerDialTests {
    /// What a browser would report for Bob's listener: both loopback addresses, the given TXT record.
    static func instance(port: UInt16, txt: [[UInt8]]) -> DiscoveredInstance {
        DiscoveredInstance(
            name: "Bob", fullName: try! DNSName("Bob._mp-test._tcp.local."),
            hostName: try! DNSName("bob.local."), port: port, txt: txt,
            addresses: [
                DiscoveredAddress(address: .v4(.loopback), interfaceIndex: 1, interfaceName: "lo"),
                DiscoveredAddress(address: .v6(.loopback), interfaceIndex: 1, interfaceName: "lo"),
            ], links: [])
    }

    static func advertisement(_ fingerprint: PeerFingerprint, version: PeerAdvertisement.ProtocolVersion = .current)
        throws -> [[UInt8]]
    {
        try PeerAdvertisement(
            fingerprint: fingerprint, displayName: "Bob", protocolVersion: version, discoveryInfo: ["status": "ok"]
        ).txtRecord.strings
    }

    @Test func theAdvertisedIdentityIsExpectedAndProven() async throws {
        try await PeerDialerTests.withBob { loop, listener in
            let port = listener.localAddress.port
            let found = Self.instance(port: port, txt: try Self.advertisement(TestPeers.bob.fingerprint))
            let connection = try await PeerConnection.connect(
                to: found, configuration: PeerDialerTests.ada, loop: loop)
            // ::1 was tried first and refused; 127.0.0.1 is Bob.
            #expect(connection.remoteAddress == listener.localAddress)
            #expect(connection.peer.fingerprint == TestPeers.bob.fingerprint)
            await connection.close()
            let impostor = Self.instance(port: port, txt: try Self.advertisement(TestPeers.eve.fingerprint))
            do throws(ConnectionError) {
                _ = try await PeerConnection.connect(to: impostor, configuration: PeerDialerTests.ada, loop: loop)
                Issue.record("connected although the advertised identity is Eve's")
            } catch {
                #expect(
                    error.code
                        == .identityMismatch(expected: TestPeers.eve.fingerprint, actual: TestPeers.bob.fingerprint))
            }
        }
    }

    @Test func anAdvertisementWithoutTheReservedKeysOrOfAnotherMajorVersionIsNotDialled() async throws {
        try await PeerDialerTests.withBob { loop, listener in
            let port = listener.localAddress.port
            let bare = Self.instance(port: port, txt: [Array("status=ok".utf8)])
            await #expect(throws: ConnectionError.self) {
                try await PeerConnection.connect(to: bare, configuration: PeerDialerTests.ada, loop: loop)
            }
            do throws(ConnectionError) {
                _ = try await PeerConnection.connect(to: bare, configuration: PeerDialerTests.ada, loop: loop)
            } catch {
                #expect(error.code == .notAPeer && error.reason.contains("mp.id"))
            }
            let future = Self.instance(
                port: port, txt: try Self.advertisement(TestPeers.bob.fingerprint, version: .init(major: 2, minor: 0)))
            do throws(ConnectionError) {
                _ = try await PeerConnection.connect(to: future, configuration: PeerDialerTests.ada, loop: loop)
                Issue.record("dialled a peer of another major version")
            } catch {
                #expect(error.code == .unsupportedVersion(major: 2))
            }
            #expect(listener.statistics.accepted == 0)
        }
    }

    @Test func linkLocalAddressesAreScopedToTheInterfaceTheyWereLearntOn() {
        let discovered = [
            DiscoveredAddress(address: IPAddress("fe80::1")!, interfaceIndex: 7, interfaceName: "eth0"),
            DiscoveredAddress(address: IPAddress("fd00::1")!, interfaceIndex: 7, interfaceName: "eth0"),
            DiscoveredAddress(address: IPAddress("192.0.2.1")!, interfaceIndex: 7, interfaceName: "eth0"),
        ]
        #expect(
            PeerConnection.socketAddresses(discovered, port: 9) == [
                SocketAddress(IPAddress("fe80::1")!, port: 9, scopeID: 7),
                SocketAddress(IPAddress("fd00::1")!, port: 9),
                SocketAddress(IPAddress("192.0.2.1")!, port: 9),
            ])
    }
}
