import Foundation
import Multipeer
import MultipeerConnectivity
import MultipeerIO
import TestIsolation
import Testing

extension CompatibilitySuites {
    /// What code written for Apple's framework relies on beyond the API's names: optional delegate methods called
    /// the Objective-C way, the session's view in each callback, one peer ID per peer, and received streams that
    /// the application schedules and opens without keeping.
    @Suite("MultipeerConnectivity facade: what ported code relies on", .serialized)
    struct MCPortingTests {
        init() { FacadeTestSetup.prepare() }

        @Test func optionalDelegateMethodsAreCalledTheObjectiveCWay() {
            let session = MCSession(peer: MCPeerID(displayName: "Host"))
            defer { session.disconnect() }
            let stranger = MCPeerID(displayName: "Stranger")
            let implementing: any MCSessionDelegate = Refusing()
            let answers = Lock<[Bool]>([])
            // Its own method runs...
            implementing.session?(session, didReceiveCertificate: nil, fromPeer: stranger) { accepted in
                answers.withLock { $0.append(accepted) }
            }
            // ...and a delegate without it gets Apple's behaviour for such a delegate: every peer let in.
            let plain: any MCSessionDelegate = RequiredOnlyDelegate()
            plain.session?(session, didReceiveCertificate: nil, fromPeer: stranger) { accepted in
                answers.withLock { $0.append(accepted) }
            }
            #expect(answers.withLock { $0 } == [false, true])

            let advertiser = MCNearbyServiceAdvertiser(
                peer: MCPeerID(displayName: "Ad"), discoveryInfo: nil, serviceType: "porting")
            let browser = MCNearbyServiceBrowser(peer: MCPeerID(displayName: "Br"), serviceType: "porting")
            let failing = Failing()
            let advertiserDelegate: any MCNearbyServiceAdvertiserDelegate = failing
            let browserDelegate: any MCNearbyServiceBrowserDelegate = failing
            let error = MCError(.unavailable, reason: "test")
            advertiserDelegate.advertiser?(advertiser, didNotStartAdvertisingPeer: error)
            browserDelegate.browser?(browser, didNotStartBrowsingForPeers: error)
            let assistant = MCAdvertiserAssistant(serviceType: "porting", discoveryInfo: nil, session: session)
            let assistantDelegate: any MCAdvertiserAssistantDelegate = failing
            assistantDelegate.advertiserAssistantWillPresentInvitation?(assistant)
            assistantDelegate.advertiserAssistantDidDismissInvitation?(assistant)
            #expect(failing.calls.withLock { $0 } == ["advertiser", "browser", "will present", "did dismiss"])
        }

        /// In the `.connecting` call the peer is not yet among `connectedPeers`; in the `.connected` call it is.
        @Test func connectedPeersMatchesTheStateTheDelegateIsTold() async throws {
            let pair = Pair()
            defer { pair.stop() }
            let probe = StateProbe("Bob")
            pair.bobSession.delegate = probe
            #expect(await pair.connect())
            #expect(await soon { probe.seen.withLock { $0.count } >= 2 })
            let seen = probe.seen.withLock { $0 }
            #expect(seen.prefix(2).map(\.state) == [.connecting, .connected])
            #expect(seen.prefix(2).map(\.listed) == [false, true], "\(seen)")
        }

        /// Every call about a peer gives the same `MCPeerID` object, from its state change to its data.
        @Test func eachPeerHasOneMCPeerIDInEveryCall() async throws {
            let pair = Pair()
            defer { pair.stop() }
            let probe = StateProbe("Bob")
            pair.bobSession.delegate = probe
            #expect(await pair.connect())
            for index in 0..<20 {
                try pair.aliceSession.send(Data([UInt8(index)]), toPeers: [pair.bob], with: .reliable)
            }
            #expect(await soon { probe.received.withLock { $0.count } == 20 })
            let connected = probe.seen.withLock { $0 }.first { $0.state == .connected }?.peer
            let senders = Set(probe.received.withLock { $0 })
            #expect(connected != nil && senders == [connected!], "\(senders) vs \(String(describing: connected))")
        }

        /// An application that schedules a received stream on a run loop, gives it a delegate and opens it in
        /// its delegate call, without keeping it, gets every byte (reading a fixed 100 bytes per event); the
        /// stream is let go once it ended.
        @Test func aStreamOpenedOnARunLoopButNotKeptGetsAllItsData() async throws {
            let pair = Pair()
            defer { pair.stop() }
            let reader = UnkeptStreamReader("Alice")
            defer { reader.stop() }
            pair.aliceSession.delegate = reader
            #expect(await pair.connect())
            let payload = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
            nonisolated(unsafe) let output = try pair.bobSession.startStream(withName: "unkept", toPeer: pair.alice)
            output.open()
            let writer = Thread {
                var offset = 0
                while offset < payload.count {
                    let written = payload[offset...].withUnsafeBufferPointer {
                        output.write($0.baseAddress!, maxLength: min(50_000, $0.count))
                    }
                    if written <= 0 { break }
                    offset += written
                }
                output.close()
            }
            writer.start()
            #expect(await soon { reader.ended })
            #expect(byteDifference(reader.bytes, payload) == nil)
            #expect(await soon(within: .seconds(5)) { reader.streamIsGone })
        }
    }
}

/// A session delegate that refuses certificates (its own optional method).
private final class Refusing: NSObject, MCSessionDelegate, Sendable {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {}
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {}
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(false)
    }
}

/// A session delegate with only the required methods.
private final class RequiredOnlyDelegate: NSObject, MCSessionDelegate, Sendable {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {}
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {}
    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {}
    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}
    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {}
}

/// Implements the optional advertiser, browser and assistant methods, recording their calls.
private final class Failing: NSObject, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate,
    MCAdvertiserAssistantDelegate, Sendable
{
    let calls = Lock<[String]>([])
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {}
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        calls.withLock { $0.append("advertiser") }
    }
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {}
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        calls.withLock { $0.append("browser") }
    }
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {
        calls.withLock { $0.append("will present") }
    }
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {
        calls.withLock { $0.append("did dismiss") }
    }
}

/// Records, in each state call, whether `connectedPeers` lists the peer, and the peer ID objects of data.
private final class StateProbe: Recorder, @unchecked Sendable {
    let seen = Lock<[(state: MCSessionState, listed: Bool, peer: ObjectIdentifier)]>([])
    let received = Lock<[ObjectIdentifier]>([])

    override func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        let listed = session.connectedPeers.contains(peerID)
        seen.withLock { $0.append((state, listed, ObjectIdentifier(peerID))) }
        super.session(session, peer: peerID, didChange: state)
    }

    override func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        received.withLock { $0.append(ObjectIdentifier(peerID)) }
    }
}

/// Schedules each received stream on a run loop of its own thread, opens it and lets it go; reads 100 bytes per
/// event, as tutorials do.
private final class UnkeptStreamReader: Recorder, @unchecked Sendable {
    private let reader = FixedReader()
    var bytes: [UInt8] { reader.bytes.withLock { $0 } }
    var ended: Bool { reader.ended.withLock { $0 } }
    private let thread = RunLoopThread()
    private weak var lastStream: InputStream?
    private let lock = NSLock()

    var streamIsGone: Bool { lock.withLock { lastStream == nil } }

    func stop() { thread.stop() }

    override func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        stream.delegate = reader
        stream.schedule(in: thread.loop, forMode: .default)
        stream.open()
        lock.withLock { lastStream = stream }
    }

}

/// Reads 100 bytes per `hasBytesAvailable`, closes at the end.
private final class FixedReader: NSObject, StreamDelegate, Sendable {
    let bytes = Lock<[UInt8]>([])
    let ended = Lock(false)

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        guard let input = aStream as? InputStream else { return }
        switch eventCode {
        case .hasBytesAvailable:
            var buffer = [UInt8](repeating: 0, count: 100)
            let count = input.read(&buffer, maxLength: 100)
            if count > 0 { bytes.withLock { $0 += buffer[..<count] } }
        case .endEncountered:
            input.close()
            ended.withLock { $0 = true }
        default: break
        }
    }
}

/// A thread running a run loop until stopped (a far timer keeps the loop alive).
private final class RunLoopThread: @unchecked Sendable {
    // Safety: `running` and `stopped` are only touched under `lock`.
    private let lock = NSLock()
    private var running: RunLoop?
    private var stopped = false

    init() {
        Thread { [self] in
            let current = RunLoop.current
            current.add(Timer(timeInterval: 3_600, repeats: false) { _ in }, forMode: .default)
            lock.withLock { running = current }
            while !lock.withLock({ stopped }) {
                // A loop with nothing to wait for returns at once: do not spin then.
                if !current.run(mode: .default, before: Date(timeIntervalSinceNow: 0.2)) {
                    Thread.sleep(forTimeInterval: 0.01)
                }
            }
        }.start()
        while lock.withLock({ running }) == nil { Thread.sleep(forTimeInterval: 0.001) }
    }

    var loop: RunLoop { lock.withLock { running! } }

    func stop() { lock.withLock { stopped = true } }
}
