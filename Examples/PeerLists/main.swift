// The advertise-and-browse tutorial: lists of discovered and connected peers, advertising and browsing started
// and stopped at will, every invitation accepted. The table views are replaced by lines.
import Foundation
import MultipeerConnectivity

func show(_ line: String) { FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!) }

class PeerListService: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate {
    let serviceType = "example-lists"
    let myPeerID: MCPeerID
    let session: MCSession
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser
    private let lock = NSLock()
    private var foundPeers: [MCPeerID] = []

    init(name: String) {
        myPeerID = MCPeerID(displayName: name)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        advertiser = MCNearbyServiceAdvertiser(
            peer: myPeerID, discoveryInfo: ["app": "lists"], serviceType: serviceType)
        browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: serviceType)
        super.init()
        session.delegate = self
        advertiser.delegate = self
        browser.delegate = self
    }

    func start() {
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
    }

    func stop() {
        advertiser.stopAdvertisingPeer()
        browser.stopBrowsingForPeers()
        lock.lock()
        foundPeers.removeAll()
        lock.unlock()
    }

    func invite(_ name: String) {
        lock.lock()
        let peer = foundPeers.first { $0.displayName == name }
        lock.unlock()
        guard let peer = peer else { return show("no such peer \(name)") }
        browser.invitePeer(peer, to: session, withContext: nil, timeout: 10)
    }

    func lists() -> String {
        lock.lock()
        let found = foundPeers.map { $0.displayName }.sorted()
        lock.unlock()
        let connected = session.connectedPeers.map { $0.displayName }.sorted()
        return "peers found: \(found.joined(separator: ",")) connected: \(connected.joined(separator: ","))"
    }

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        lock.lock()
        if !foundPeers.contains(peerID) { foundPeers.append(peerID) }
        lock.unlock()
        show("found \(peerID.displayName) \(info?["app"] ?? "-")")
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        lock.lock()
        foundPeers.removeAll { $0 == peerID }
        lock.unlock()
        show("lost \(peerID.displayName)")
    }

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, session)
    }

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected: show("connected \(peerID.displayName)")
        case .connecting: show("connecting \(peerID.displayName)")
        case .notConnected: show("not connected \(peerID.displayName)")
        @unknown default: break
        }
    }

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
        at localURL: URL?, withError error: Error?
    ) {}
}

let service = PeerListService(name: CommandLine.arguments.dropFirst().first ?? "Lists")
while let line = readLine() {
    let words = line.split(separator: " ", maxSplits: 1).map(String.init)
    switch words.first {
    case "start": service.start(); show("started")
    case "stop": service.stop(); show("stopped")
    case "invite" where words.count == 2: service.invite(words[1])
    case "peers": show(service.lists())
    case "quit": exit(0)
    default: show("commands: start, stop, invite NAME, peers, quit")
    }
}
