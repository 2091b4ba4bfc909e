// The "connected colors" tutorial app with its UIKit view replaced by standard input and output: type a color
// name to show it on every connected instance. ColorService is the tutorial's, unchanged but for the name.
import Foundation
import MultipeerConnectivity

protocol ColorServiceDelegate: AnyObject {
    func connectedDevicesChanged(manager: ColorService, connectedDevices: [String])
    func colorChanged(manager: ColorService, colorString: String)
}

class ColorService: NSObject {
    // Service type must be a unique string, at most 15 characters long
    // and can contain only ASCII lowercase letters, numbers and hyphens.
    private let ColorServiceType = "example-color"

    private let myPeerId: MCPeerID
    private let serviceAdvertiser: MCNearbyServiceAdvertiser
    private let serviceBrowser: MCNearbyServiceBrowser

    weak var delegate: ColorServiceDelegate?

    lazy var session: MCSession = {
        let session = MCSession(peer: self.myPeerId, securityIdentity: nil, encryptionPreference: .none)
        session.delegate = self
        return session
    }()

    init(displayName: String) {
        myPeerId = MCPeerID(displayName: displayName)
        serviceAdvertiser = MCNearbyServiceAdvertiser(peer: myPeerId, discoveryInfo: nil, serviceType: ColorServiceType)
        serviceBrowser = MCNearbyServiceBrowser(peer: myPeerId, serviceType: ColorServiceType)
        super.init()
        serviceAdvertiser.delegate = self
        serviceAdvertiser.startAdvertisingPeer()
        serviceBrowser.delegate = self
        serviceBrowser.startBrowsingForPeers()
    }

    deinit {
        serviceAdvertiser.stopAdvertisingPeer()
        serviceBrowser.stopBrowsingForPeers()
    }

    func send(colorName: String) {
        NSLog("%@", "sendColor: \(colorName) to \(session.connectedPeers.count) peers")
        if session.connectedPeers.count > 0 {
            do {
                try self.session.send(colorName.data(using: .utf8)!, toPeers: session.connectedPeers, with: .reliable)
            } catch let error {
                NSLog("%@", "Error for sending: \(error)")
            }
        }
    }
}

extension ColorService: MCNearbyServiceAdvertiserDelegate {
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: Error) {
        NSLog("%@", "didNotStartAdvertisingPeer: \(error)")
    }

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        NSLog("%@", "didReceiveInvitationFromPeer \(peerID)")
        invitationHandler(true, self.session)
    }
}

extension ColorService: MCNearbyServiceBrowserDelegate {
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: Error) {
        NSLog("%@", "didNotStartBrowsingForPeers: \(error)")
    }

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        NSLog("%@", "foundPeer: \(peerID)")
        NSLog("%@", "invitePeer: \(peerID)")
        browser.invitePeer(peerID, to: self.session, withContext: nil, timeout: 10)
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        NSLog("%@", "lostPeer: \(peerID)")
    }
}

extension ColorService: MCSessionDelegate {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        NSLog("%@", "peer \(peerID) didChangeState: \(state.rawValue)")
        self.delegate?.connectedDevicesChanged(
            manager: self, connectedDevices: session.connectedPeers.map { $0.displayName })
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        NSLog("%@", "didReceiveData: \(data)")
        let str = String(data: data, encoding: .utf8)!
        self.delegate?.colorChanged(manager: self, colorString: str)
    }

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        NSLog("%@", "didReceiveStream")
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {
        NSLog("%@", "didStartReceivingResourceWithName")
    }

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: Error?
    ) {
        NSLog("%@", "didFinishReceivingResourceWithName")
    }
}

// MARK: - What replaces the view controller: lines instead of a colored view.

func show(_ line: String) { FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!) }

class ColorConsole: ColorServiceDelegate {
    func connectedDevicesChanged(manager: ColorService, connectedDevices: [String]) {
        show("connected: \(connectedDevices.sorted().joined(separator: ", "))")
    }

    func colorChanged(manager: ColorService, colorString: String) {
        show("color \(colorString)")
    }
}

let name = CommandLine.arguments.dropFirst().first ?? ProcessInfo.processInfo.hostName
let colorService = ColorService(displayName: name)
let console = ColorConsole()
colorService.delegate = console
while let line = readLine() {
    let color = line.trimmingCharacters(in: .whitespaces)
    if color == "quit" { break }
    guard !color.isEmpty else { continue }
    show("color \(color)")  // the picker changes this instance's color too
    colorService.send(colorName: color)
}
