import MulticastDNS
import MultipeerIO
import Testing

@testable import Multipeer

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
