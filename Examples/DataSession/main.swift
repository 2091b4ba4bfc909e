// The data-session tutorial: a session with required encryption; every peer found is invited, every invitation
// accepted, and each line typed goes to all connected peers as UTF-8. The text views are replaced by lines.
import Foundation
import MultipeerConnectivity

func show(_ line: String) { FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!) }

class MessageService: NSObject {
    let serviceType = "example-data"
    let myPeerID: MCPeerID
    var mcSession: MCSession
    var mcAdvertiser: MCNearbyServiceAdvertiser
    var mcBrowser: MCNearbyServiceBrowser

    init(name: String) {
        myPeerID = MCPeerID(displayName: name)
        mcSession = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        mcAdvertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: nil, serviceType: serviceType)
        mcBrowser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: serviceType)
        super.init()
        mcSession.delegate = self
        mcAdvertiser.delegate = self
        mcBrowser.delegate = self
        mcAdvertiser.startAdvertisingPeer()
        mcBrowser.startBrowsingForPeers()
    }

    func sendText(_ text: String) {
        guard !mcSession.connectedPeers.isEmpty else { return show("nobody is connected") }
        if let data = text.data(using: .utf8) {
            do {
                try mcSession.send(data, toPeers: mcSession.connectedPeers, with: .reliable)
            } catch {
                show("send failed: \(error.localizedDescription)")
            }
        }
    }
}

extension MessageService: MCSessionDelegate {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected: show("connected \(peerID.displayName)")
        case .connecting: break
        case .notConnected: show("not connected \(peerID.displayName)")
        @unknown default: break
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        if let text = String(data: data, encoding: .utf8) {
            show("\(peerID.displayName): \(text)")
        }
    }

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

extension MessageService: MCNearbyServiceAdvertiserDelegate {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, mcSession)
    }
}

extension MessageService: MCNearbyServiceBrowserDelegate {
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        browser.invitePeer(peerID, to: mcSession, withContext: nil, timeout: 10)
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}
}

let service = MessageService(name: CommandLine.arguments.dropFirst().first ?? "Data")
while let line = readLine() {
    if line == "quit" { break }
    service.sendText(line)
}
service.mcSession.disconnect()
Thread.sleep(forTimeInterval: 0.2)  // lets the goodbye reach the peers
