import Foundation
import Multipeer
import MultipeerConnectivity
import MultipeerIO
import TestIsolation
import Testing

/// The suites of the compatibility modules: one at a time (they share the facade's one network, and the
/// heaviest sends 40 MiB to a peer that does not read), alone among the suites that make many connections (their
/// load made timing tests of the session suites miss on CI) and the tests that count process-wide resources.
@Suite("Compatibility modules", .serialized, .measuring)
enum CompatibilitySuites {}

/// Pins the facade to loopback and its identity folder to a temporary one, once per process.
enum FacadeTestSetup {
    static let identityFolder: String = {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mc-tests-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        MCPeerID.identityStore = PeerIdentityStore(directory: URL(fileURLWithPath: folder, isDirectory: true))
        MCNetwork.configuration = .loopback
        return folder
    }()

    static func prepare() { _ = identityFolder }

    /// A service type of its own per test, so tests sharing the loopback mDNS do not see each other.
    static func serviceType() -> String {
        "t" + String(UInt32.random(in: 0..<UInt32.max), radix: 36)
    }
}

/// ``eventually(within:_:)`` with a default suited to discovery and sessions on a loaded machine (20 s).
func soon(within timeout: Duration = .seconds(20), _ condition: () -> Bool) async -> Bool {
    await eventually(within: timeout, condition)
}

/// Records every delegate call of a session, an advertiser and a browser, and answers invitations.
class Recorder: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate,
    StreamDelegate, @unchecked Sendable
{
    struct Log {
        var states: [String] = []
        var data: [(MCPeerID, Data)] = []
        var found: [MCPeerID: [String: String]] = [:]
        var lost: [MCPeerID] = []
        var invitations: [(MCPeerID, Data?)] = []
        var resourcesStarted: [(String, MCPeerID, Int64)] = []
        var resourcesFinished: [(String, MCPeerID, Data?, String?)] = []
        var reasons: [MCDisconnectReason?] = []
        /// Calls made on the main thread, and calls that overlapped another (a serial queue makes none).
        var onMainThread = 0
        var overlapping = 0
        var inCall = 0
    }

    let name: String
    let log = Lock(Log())
    /// The session invitations are accepted into; nil declines.
    let accepting = Lock<MCSession?>(nil)
    /// Whether certificates are accepted.
    let acceptCertificates = Lock(true)

    init(_ name: String) {
        self.name = name
    }

    func snapshot() -> Log { log.withLock { $0 } }

    private let streamLock = NSLock()
    private var receivedStreams: [(InputStream, String, MCPeerID)] = []
    /// The streams received (kept apart: streams are not Sendable).
    var streams: [(InputStream, String, MCPeerID)] { streamLock.withLock { receivedStreams } }

    private func note() {
        let main = Thread.isMainThread
        log.withLock {
            if main { $0.onMainThread += 1 }
            $0.inCall += 1
            if $0.inCall > 1 { $0.overlapping += 1 }
        }
        Thread.sleep(forTimeInterval: 0.001)  // long enough for a second call on another thread to overlap
        log.withLock { $0.inCall -= 1 }
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        note()
        let reason = state == .notConnected ? session.disconnectReason(for: peerID) : nil
        log.withLock {
            $0.states.append("\(peerID.displayName) \(state)")
            if state == .notConnected { $0.reasons.append(reason) }
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        note()
        log.withLock { $0.data.append((peerID, data)) }
    }

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        note()
        streamLock.withLock { receivedStreams.append((stream, streamName, peerID)) }
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {
        log.withLock { $0.resourcesStarted.append((resourceName, peerID, progress.totalUnitCount)) }
    }

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: (any Error)?
    ) {
        // Read before returning: the file is removed afterwards, as with Apple's.
        let contents = localURL.flatMap { try? Data(contentsOf: $0) }
        log.withLock { $0.resourcesFinished.append((resourceName, peerID, contents, error.map { "\($0)" })) }
    }

    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(acceptCertificates.withLock { $0 })
    }

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        note()
        log.withLock { $0.invitations.append((peerID, context)) }
        let session = accepting.withLock { $0 }
        invitationHandler(session != nil, session)
    }

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        note()
        log.withLock { $0.found[peerID] = info ?? [:] }
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        log.withLock { $0.lost.append(peerID) }
    }
}

/// Two peers on loopback: Alice advertises, Bob browses; both have sessions.
struct Pair {
    let service = FacadeTestSetup.serviceType()
    let alice = MCPeerID(displayName: "Alice")
    let bob = MCPeerID(displayName: "Bob")
    let aliceSession: MCSession
    let bobSession: MCSession
    let aliceLog = Recorder("Alice")
    let bobLog = Recorder("Bob")
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser

    init(
        alice aliceEncryption: MCEncryptionPreference = .required,
        bob bobEncryption: MCEncryptionPreference = .required,
        info: [String: String]? = ["color": "teal"]
    ) {
        FacadeTestSetup.prepare()
        aliceSession = MCSession(peer: alice, securityIdentity: nil, encryptionPreference: aliceEncryption)
        bobSession = MCSession(peer: bob, securityIdentity: nil, encryptionPreference: bobEncryption)
        aliceSession.delegate = aliceLog
        bobSession.delegate = bobLog
        advertiser = MCNearbyServiceAdvertiser(peer: alice, discoveryInfo: info, serviceType: service)
        advertiser.delegate = aliceLog
        browser = MCNearbyServiceBrowser(peer: bob, serviceType: service)
        browser.delegate = bobLog
    }

    /// Starts both, waits for Bob to find Alice, invites her; returns once both are connected (or times out).
    func connect(context: Data? = Data("hello".utf8)) async -> Bool {
        aliceLog.accepting.withLock { $0 = aliceSession }
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
        guard await soon({ bobLog.snapshot().found[alice] != nil }) else { return false }
        browser.invitePeer(alice, to: bobSession, withContext: context, timeout: 10)
        _ = await soon {
            (aliceSession.connectedPeers.contains(bob) && bobSession.connectedPeers.contains(alice))
                || bobLog.snapshot().states.contains("Alice notConnected")
        }
        return await soon(within: .seconds(2)) {
            aliceSession.connectedPeers.contains(bob) && bobSession.connectedPeers.contains(alice)
        }
    }

    func stop() {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        aliceSession.disconnect()
        bobSession.disconnect()
    }
}

/// A peer that advertises and accepts every invitation into its own session.
struct Guest {
    let id: MCPeerID
    let session: MCSession
    let recorder: Recorder
    let advertiser: MCNearbyServiceAdvertiser

    init(_ name: String, recorder: Recorder? = nil, service: String) {
        id = MCPeerID(displayName: name)
        session = MCSession(peer: id)
        self.recorder = recorder ?? Recorder(name)
        session.delegate = self.recorder
        self.recorder.accepting.withLock { [session] in $0 = session }
        advertiser = MCNearbyServiceAdvertiser(peer: id, discoveryInfo: nil, serviceType: service)
        advertiser.delegate = self.recorder
        advertiser.startAdvertisingPeer()
    }

    func stop() {
        advertiser.stopAdvertisingPeer()
        session.disconnect()
    }
}
