import MultipeerIO
import Testing

@testable import Multipeer

/// Two connection cores joined in memory: bytes written by one are fed to the other, on a manual clock.
final class CorePair {
    let dialer: ConnectionCore
    let acceptor: ConnectionCore
    var now = IOInstant(nanoseconds: 1_000_000_000)
    var dialerEvents: [ConnectionCore.Event] = []
    var acceptorEvents: [ConnectionCore.Event] = []
    /// Bytes the acceptor wrote that the dialer has not been fed (while `holdAcceptorOutput` is set).
    var heldForDialer: [UInt8] = []
    var holdAcceptorOutput = false
    /// Sizes of the reads the acceptor's input is cut into, used in turn (nil: one read per batch of output).
    var acceptorReadSizes: [Int]?
    private var nextReadSize = 0
    var dialerEnded = false
    var acceptorEnded = false

    init(
        dialer dialerConfiguration: ConnectionConfiguration, acceptor acceptorConfiguration: ConnectionConfiguration,
        expectedPeer: PeerFingerprint? = nil,
        makeTLS: @escaping (ConnectionCore.Role) throws(ConnectionError) -> any RecordLayer = CorePair.noTLS
    ) {
        dialer = ConnectionCore(
            role: .dialer, configuration: dialerConfiguration, expectedPeer: expectedPeer, now: now, makeTLS: makeTLS)
        acceptor = ConnectionCore(
            role: .acceptor, configuration: acceptorConfiguration, expectedPeer: nil, now: now, makeTLS: makeTLS)
    }

    static func noTLS(_ role: ConnectionCore.Role) throws(ConnectionError) -> any RecordLayer {
        throw ConnectionError(code: .internalFailure, reason: "no TLS in this test")
    }

    /// Moves bytes both ways until neither side has anything to say (or `rounds` passes ran).
    @discardableResult
    func run(rounds: Int = 1000, outputLimit: Int = 262_144) -> Int {
        var passes = 0
        for _ in 0..<rounds {
            passes += 1
            let fromDialer = dialer.takeOutput(limit: outputLimit)
            var fromAcceptor = acceptor.takeOutput(limit: outputLimit)
            if holdAcceptorOutput {
                heldForDialer += fromAcceptor
                fromAcceptor = []
            }
            if !fromDialer.isEmpty { feedAcceptor(fromDialer) }
            if !fromAcceptor.isEmpty { dialer.receive(fromAcceptor, now: now) }
            collect()
            if fromDialer.isEmpty && fromAcceptor.isEmpty { break }
        }
        // A side that finished and wrote everything closes its socket: the other sees end of stream.
        if dialer.finished && !dialerEnded {
            dialerEnded = true
            acceptor.receiveEndOfStream(now: now)
        }
        if acceptor.finished && !acceptorEnded {
            acceptorEnded = true
            dialer.receiveEndOfStream(now: now)
        }
        collect()
        return passes
    }

    /// Gives the acceptor `bytes`, cut into reads of `acceptorReadSizes` if set.
    func feedAcceptor(_ bytes: [UInt8]) {
        guard let sizes = acceptorReadSizes, !sizes.isEmpty else {
            acceptor.receive(bytes, now: now)
            return
        }
        var offset = 0
        while offset < bytes.count {
            let count = min(bytes.count - offset, sizes[nextReadSize % sizes.count])
            nextReadSize += 1
            acceptor.receive(Array(bytes[offset..<offset + count]), now: now)
            offset += count
        }
    }

    func advance(by duration: Duration) {
        now = now + duration
        dialer.tick(now: now)
        acceptor.tick(now: now)
        collect()
    }

    func collect() {
        dialerEvents += dialer.takeEvents()
        acceptorEvents += acceptor.takeEvents()
    }

    var dialerPeer: ConnectedPeer? { Self.peer(in: dialerEvents) }
    var acceptorPeer: ConnectedPeer? { Self.peer(in: acceptorEvents) }
    var dialerClosed: ConnectionError? { Self.closed(in: dialerEvents) }
    var acceptorClosed: ConnectionError? { Self.closed(in: acceptorEvents) }

    static func peer(in events: [ConnectionCore.Event]) -> ConnectedPeer? {
        for case .established(let peer) in events { return peer }
        return nil
    }

    static func closed(in events: [ConnectionCore.Event]) -> ConnectionError? {
        for case .closed(let error) in events { return error }
        return nil
    }

    static func messages(in events: [ConnectionCore.Event]) -> [[UInt8]] {
        events.compactMap {
            if case .message(_, let bytes) = $0 { return bytes }
            return nil
        }
    }
}

/// Identities shared by the connection tests (key generation is cheap, but stable names help reading failures).
enum TestPeers {
    static let ada = try! PeerIdentity.generate(displayName: "Ada")
    static let bob = try! PeerIdentity.generate(displayName: "Bob")
    static let eve = try! PeerIdentity.generate(displayName: "Eve")

    static func configuration(
        _ identity: PeerIdentity, _ encryption: EncryptionPreference = .none, secret: GroupSecret? = nil
    ) -> ConnectionConfiguration {
        ConnectionConfiguration(identity: identity, encryption: encryption, groupSecret: secret)
    }
}
