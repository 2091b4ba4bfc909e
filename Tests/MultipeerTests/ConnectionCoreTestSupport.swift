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
        makeTLS: @escaping (ConnectionCore.Role) throws(ConnectionError) -> any RecordLayer = CorePair.noTLS,
        acceptorTLS: ((ConnectionCore.Role) throws(ConnectionError) -> any RecordLayer)? = nil
    ) {
        dialer = ConnectionCore(
            role: .dialer, configuration: dialerConfiguration, expectedPeer: expectedPeer, now: now, makeTLS: makeTLS)
        acceptor = ConnectionCore(
            role: .acceptor, configuration: acceptorConfiguration, expectedPeer: nil, now: now,
            makeTLS: acceptorTLS ?? makeTLS)
    }

    /// A pair that runs real TLS (OpenSSL's handshake in memory, then our record layer) when the preamble
    /// chooses it.
    static func withTLS(
        dialer: ConnectionConfiguration, acceptor: ConnectionConfiguration, expectedPeer: PeerFingerprint? = nil
    ) -> CorePair {
        CorePair(
            dialer: dialer, acceptor: acceptor, expectedPeer: expectedPeer,
            makeTLS: TLSContexts.of(dialer.identity).makeRecordLayer(expecting: expectedPeer),
            acceptorTLS: TLSContexts.of(acceptor.identity).makeRecordLayer(expecting: nil))
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

    /// A plaintext configuration with small windows (1 MiB for the connection, 512 KiB per stream, 64 KiB
    /// messages), so tests of what a peer can make this side hold stay small.
    static func smallWindows(_ identity: PeerIdentity) -> ConnectionConfiguration {
        var configuration = configuration(identity)
        configuration.connectionWindow = 1 << 20
        configuration.streamWindow = 512 << 10
        configuration.maximumMessageLength = 64 << 10
        return configuration
    }
}

/// A peer that speaks the protocol by hand to an acceptor core (plaintext): it obeys flow control to the letter,
/// and uses every byte of credit to leave messages unfinished (all but their last byte), opening as many message
/// channels as it likes.
final class HostileMessageSender {
    let acceptor: ConnectionCore
    private var now = IOInstant(nanoseconds: 1)
    private let encoder = FrameEncoder()
    private var decoder = FrameDecoder()
    private var preambleSkipped = false
    private var connectionCredit = Int(FlowController.Configuration.initialCredit)
    private var channelCredit: [UInt32: Int] = [:]
    private var nextChannel: UInt32 = 1
    private(set) var startedMessages = 0
    private(set) var sentBytes = 0

    init(acceptor: ConnectionCore) {
        self.acceptor = acceptor
    }

    func run(messages: Int, length: Int) {
        var setup =
            Preamble(kind: .offer, preference: .none, outcome: .none, nonce: [UInt8](repeating: 0, count: 16)).bytes
        setup += try! encoder.encode(
            .hello(
                Frame.Hello(
                    displayName: "Mallory", fingerprint: [UInt8](repeating: 7, count: 32), maximumMessageLength: 1024)))
        deliver(setup)
        let cost = FlowController.messageCost(length: length)
        var channel = openChannel()
        while startedMessages < messages {
            if (channelCredit[channel] ?? 0) < cost || connectionCredit < cost {
                guard connectionCredit >= cost else { break }  // the connection window is spent: stop
                channel = openChannel()
                if (channelCredit[channel] ?? 0) < cost { break }
            }
            channelCredit[channel, default: 0] -= cost
            connectionCredit -= cost
            send(channel: channel, id: UInt32(startedMessages), length: length)
            startedMessages += 1
        }
    }

    private func openChannel() -> UInt32 {
        let channel = nextChannel
        nextChannel += 2
        channelCredit[channel] = Int(FlowController.Configuration.initialCredit)
        deliver(try! encoder.encode(.channelOpen(channel: channel, kind: .message, name: "", initialWindow: 1 << 20)))
        return channel
    }

    /// All but the last byte of a message: the first fragment declares the whole length and pays for it.
    private func send(channel: UInt32, id: UInt32, length: Int) {
        var offset = 0
        var bytes: [UInt8] = []
        while offset < length - 1 {
            let first = offset == 0
            let count = min(length - 1 - offset, 65_536 - (first ? 12 : 4))
            let fragment = Frame.MessageFragment(
                id: id, totalLength: first ? UInt64(length) : nil, isLast: false,
                bytes: [UInt8](repeating: 0xEE, count: count))
            try! encoder.encode(.message(channel: channel, fragment: fragment), into: &bytes)
            offset += count
            if bytes.count > 1 << 20 {
                deliver(bytes)
                bytes = []
            }
        }
        deliver(bytes)
        sentBytes += length - 1
    }

    /// Feeds the acceptor and reads its answers: the credit it grants.
    private func deliver(_ bytes: [UInt8]) {
        acceptor.receive(bytes, now: now)
        now = now + .microseconds(1)
        var output = acceptor.takeOutput(limit: .max)
        if !preambleSkipped, output.count >= Preamble.length {
            output.removeFirst(Preamble.length)
            preambleSkipped = true
        }
        decoder.append(output)
        while let frame = try! decoder.next() {
            if case .windowUpdate(let channel, let increment) = frame {
                if channel == 0 {
                    connectionCredit += Int(increment)
                } else if channelCredit[channel] != nil {
                    channelCredit[channel, default: 0] += Int(increment)
                }
            }
        }
    }
}

/// The heap in use (glibc `mallinfo2`), 0 where it cannot be read.
enum HeapUsage {
    static var bytes: Int { ProcessMemory.heapInUse() ?? 0 }
}
