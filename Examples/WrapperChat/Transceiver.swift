// A wrapper library's transceiver, written as the popular open-source wrappers write theirs: it imports a
// submodule and nothing else (Apple's module brings Foundation), keeps its peer ID archived in UserDefaults, uses
// an upper-case default service type, forwards every session delegate call to a delegate of its own (the
// optional one with Apple's `delegate?.session?(...)` form), and exchanges Codable payloads as JSON.
import MultipeerConnectivity
import MultipeerConnectivity.MCPeerID

/// A payload the transceiver carries: a type tag and its JSON.
struct Envelope: Codable {
    let type: String
    let payload: Data
    let sent: Date
}

/// What the transceiver tells its owner.
protocol TransceiverDelegate: AnyObject {
    func transceiver(_ transceiver: Transceiver, didConnect peer: MCPeerID)
    func transceiver(_ transceiver: Transceiver, didDisconnect peer: MCPeerID)
    func transceiver(_ transceiver: Transceiver, didReceive envelope: Envelope, from peer: MCPeerID)
}

final class Transceiver: NSObject {
    static let defaultServiceType = "MKSVC"

    let serviceType: String
    let peerID: MCPeerID
    let session: MCSession
    private let advertiser: MCNearbyServiceAdvertiser
    private let browser: MCNearbyServiceBrowser
    weak var delegate: TransceiverDelegate?
    /// The application may watch the session's calls too, as it would with MCSession itself.
    weak var sessionDelegate: MCSessionDelegate?
    private let queue = DispatchQueue(label: "Transceiver")
    private var invited: Set<MCPeerID> = []
    private var heartbeat: Timer?
    let instance = UUID()

    init(displayName: String, serviceType: String = Transceiver.defaultServiceType) {
        self.serviceType = serviceType
        peerID = Transceiver.storedPeerID(displayName: displayName)
        session = MCSession(peer: peerID, securityIdentity: nil, encryptionPreference: .required)
        advertiser = MCNearbyServiceAdvertiser(
            peer: peerID, discoveryInfo: ["instance": instance.uuidString], serviceType: serviceType)
        browser = MCNearbyServiceBrowser(peer: peerID, serviceType: serviceType)
        super.init()
        session.delegate = self
        advertiser.delegate = self
        browser.delegate = self
    }

    /// The wrappers' way to keep one identity across launches.
    static func storedPeerID(displayName: String) -> MCPeerID {
        let key = "Transceiver.peerID.\(displayName)"
        if let data = UserDefaults.standard.data(forKey: key),
            let peer = try? NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: data)
        {
            return peer
        }
        let peer = MCPeerID(displayName: displayName)
        if let data = try? NSKeyedArchiver.archivedData(withRootObject: peer, requiringSecureCoding: true) {
            UserDefaults.standard.set(data, forKey: key)
        }
        return peer
    }

    func start() {
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
        heartbeat = Timer.scheduledTimer(withTimeInterval: 60, repeats: true) { [weak self] _ in
            self?.broadcast(type: "heartbeat", payload: Data())
        }
    }

    func stop() {
        heartbeat?.invalidate()
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        session.disconnect()
    }

    func broadcast<T: Encodable>(_ value: T, type: String) throws {
        try broadcast(type: type, payload: JSONEncoder().encode(value))
    }

    @discardableResult
    func broadcast(type: String, payload: Data) -> Bool {
        guard !session.connectedPeers.isEmpty else { return false }
        do {
            let data = try JSONEncoder().encode(Envelope(type: type, payload: payload, sent: Date()))
            try session.send(data, toPeers: session.connectedPeers, with: .reliable)
            return true
        } catch {
            print("send failed: \(error)")
            return false
        }
    }
}

extension Transceiver: MCSessionDelegate {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        sessionDelegate?.session(session, peer: peerID, didChange: state)
        switch state {
        case .connected: delegate?.transceiver(self, didConnect: peerID)
        case .notConnected:
            queue.sync { _ = invited.remove(peerID) }
            delegate?.transceiver(self, didDisconnect: peerID)
        case .connecting: break
        @unknown default: break
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        sessionDelegate?.session(session, didReceive: data, fromPeer: peerID)
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: data) else { return }
        delegate?.transceiver(self, didReceive: envelope, from: peerID)
    }

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        sessionDelegate?.session(session, didReceive: stream, withName: streamName, fromPeer: peerID)
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {
        sessionDelegate?.session(
            session, didStartReceivingResourceWithName: resourceName, fromPeer: peerID, with: progress)
    }

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: Error?
    ) {
        sessionDelegate?.session(
            session, didFinishReceivingResourceWithName: resourceName, fromPeer: peerID, at: localURL,
            withError: error)
    }

    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        if let sessionDelegate = sessionDelegate {
            sessionDelegate.session?(
                session, didReceiveCertificate: certificate, fromPeer: peerID, certificateHandler: certificateHandler)
        } else {
            certificateHandler(true)
        }
    }
}

extension Transceiver: MCNearbyServiceAdvertiserDelegate {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, session)
    }

    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: Error) {
        print("advertising failed: \(error.localizedDescription)")
    }
}

extension Transceiver: MCNearbyServiceBrowserDelegate {
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        // The wrappers' rule against both sides inviting: the one whose instance sorts first invites.
        guard let other = info?["instance"], instance.uuidString < other else { return }
        let first = queue.sync { invited.insert(peerID).inserted }
        guard first else { return }
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}

    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: Error) {
        print("browsing failed: \(error.localizedDescription)")
    }
}
