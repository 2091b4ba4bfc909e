// Uses every member of Apple's MultipeerConnectivity API that the `MultipeerConnectivity` module provides, with
// Apple's exact labels and types, the way apps written for Apple's platforms do. It is not run: a test
// type-checks it against the built module in Swift 5 and Swift 6 language modes (MCSourceCompatibilityTests).
import Foundation
import MultipeerConnectivity

final class EveryMember: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate,
    MCNearbyServiceBrowserDelegate, MCAdvertiserAssistantDelegate, StreamDelegate
{
    let serviceType = "example-chat"
    let myPeerId = MCPeerID(displayName: "Example")
    var session: MCSession!
    var advertiser: MCNearbyServiceAdvertiser!
    var browser: MCNearbyServiceBrowser!
    var assistant: MCAdvertiserAssistant?
    var peers: [MCPeerID] = []

    func setUp() throws {
        session = MCSession(peer: myPeerId, securityIdentity: nil, encryptionPreference: .required)
        session = MCSession(peer: myPeerId)
        session.delegate = self
        let _: MCPeerID = session.myPeerID
        let _: [Any]? = session.securityIdentity
        let _: MCEncryptionPreference = session.encryptionPreference
        let _: [MCPeerID] = session.connectedPeers
        let _: (any MCSessionDelegate)? = session.delegate

        advertiser = MCNearbyServiceAdvertiser(peer: myPeerId, discoveryInfo: ["k": "v"], serviceType: serviceType)
        advertiser.delegate = self
        advertiser.startAdvertisingPeer()
        advertiser.stopAdvertisingPeer()
        let _: MCPeerID = advertiser.myPeerID
        let _: [String: String]? = advertiser.discoveryInfo
        let _: String = advertiser.serviceType

        browser = MCNearbyServiceBrowser(peer: myPeerId, serviceType: serviceType)
        browser.delegate = self
        browser.startBrowsingForPeers()
        browser.stopBrowsingForPeers()
        let _: MCPeerID = browser.myPeerID
        let _: String = browser.serviceType

        assistant = MCAdvertiserAssistant(serviceType: serviceType, discoveryInfo: nil, session: session)
        assistant?.delegate = self
        assistant?.start()
        assistant?.stop()
        let _: MCSession? = assistant?.session
        let _: [String: String]? = assistant?.discoveryInfo
        let _: String? = assistant?.serviceType

        let minimum: Int = kMCSessionMinimumNumberOfPeers
        let maximum: Int = kMCSessionMaximumNumberOfPeers
        _ = (minimum, maximum)
        let domain: String = MCErrorDomain
        _ = domain
    }

    func use(_ peer: MCPeerID) throws {
        browser.invitePeer(peer, to: session, withContext: "hi".data(using: .utf8), timeout: 10)
        browser.invitePeer(peer, to: session, withContext: nil, timeout: 0)
        try session.send("red".data(using: .utf8)!, toPeers: session.connectedPeers, with: .reliable)
        try session.send(Data(), toPeers: [peer], with: MCSessionSendDataMode.unreliable)
        let progress: Progress? = session.sendResource(
            at: URL(fileURLWithPath: "/tmp/photo.jpg"), withName: "photo.jpg", toPeer: peer
        ) { error in
            if let error = error { print(error.localizedDescription) }
            self.peers.removeAll()
        }
        progress?.cancel()
        session.sendResource(at: URL(string: "https://example.com/x")!, withName: "x", toPeer: peer)
        let stream: OutputStream = try session.startStream(withName: "stream", toPeer: peer)
        stream.delegate = self
        stream.schedule(in: .main, forMode: .default)
        stream.open()
        _ = stream.write([1, 2, 3], maxLength: 3)
        stream.close()
        session.nearbyConnectionData(forPeer: peer) { data, error in
            if let data = data { self.session.connectPeer(peer, withNearbyConnectionData: data) }
            _ = error
        }
        session.cancelConnectPeer(peer)
        session.disconnect()

        do {
            try session.send(Data(), toPeers: [peer], with: .reliable)
        } catch let error as MCError {
            let code: MCError.Code = error.code
            switch code {
            case .unknown, .notConnected, .invalidParameter, .unsupported, .timedOut, .cancelled, .unavailable: break
            @unknown default: break
            }
        } catch MCError.notConnected {
        } catch {
        }
        let made = MCError(.notConnected)
        _ = (made as NSError).domain
        _ = MCError.Code(rawValue: 1)

        let archived = try NSKeyedArchiver.archivedData(withRootObject: myPeerId, requiringSecureCoding: true)
        UserDefaults.standard.set(archived, forKey: "peerID")
        if let data = UserDefaults.standard.data(forKey: "peerID"),
            let restored = try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: data)
        {
            _ = restored.displayName
        }
        _ = myPeerId.copy() as! MCPeerID
        _ = MCPeerID.supportsSecureCoding
    }

    @available(macOS 10.15, *)
    func useAsync(_ peer: MCPeerID) async throws {
        let data: Data = try await session.nearbyConnectionData(forPeer: peer)
        session.connectPeer(peer, withNearbyConnectionData: data)
    }

    func raw() {
        _ = MCSessionState(rawValue: 2) == .connected
        _ = MCSessionState.notConnected.rawValue + MCSessionState.connecting.rawValue
        _ = MCSessionSendDataMode.reliable.rawValue
        _ = MCEncryptionPreference.optional.rawValue + MCEncryptionPreference.none.rawValue
    }

    // MARK: MCSessionDelegate

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected: peers.append(peerID)
        case .connecting: break
        case .notConnected: peers.removeAll { $0 == peerID }
        @unknown default: break
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        _ = String(data: data, encoding: .utf8)
    }

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        stream.delegate = self
        stream.schedule(in: RunLoop.current, forMode: .default)
        stream.open()
        var buffer = [UInt8](repeating: 0, count: 1024)
        while stream.hasBytesAvailable { _ = stream.read(&buffer, maxLength: buffer.count) }
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {
        _ = progress.fractionCompleted
    }

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: Error?
    ) {
        guard let localURL = localURL else { return }
        try? FileManager.default.moveItem(at: localURL, to: URL(fileURLWithPath: "/tmp/\(resourceName)"))
    }

    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        certificateHandler(true)
    }

    // MARK: MCNearbyServiceAdvertiserDelegate

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, self.session)
    }

    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: Error) {
        print(error)
    }

    // MARK: MCNearbyServiceBrowserDelegate

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}

    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: Error) {}

    // MARK: MCAdvertiserAssistantDelegate

    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {}

    // MARK: StreamDelegate

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        switch eventCode {
        case .hasBytesAvailable, .hasSpaceAvailable, .openCompleted, .endEncountered, .errorOccurred: break
        default: break
        }
    }
}

/// A delegate that implements only the required methods (the optional ones have defaults).
final class RequiredOnly: NSObject, MCSessionDelegate {
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
        at localURL: URL?, withError error: Error?
    ) {}
}

/// A wrapper that forwards every delegate call to delegates of its own, as wrapper libraries do: the optional
/// methods with Apple's optional-chaining form (`delegate?.session?(...)`).
final class Forwarder: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate,
    MCAdvertiserAssistantDelegate
{
    weak var sessionDelegate: MCSessionDelegate?
    weak var advertiserDelegate: MCNearbyServiceAdvertiserDelegate?
    weak var browserDelegate: MCNearbyServiceBrowserDelegate?
    weak var assistantDelegate: MCAdvertiserAssistantDelegate?
    var session: MCSession?

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        sessionDelegate?.session(session, peer: peerID, didChange: state)
        _ = self.session?.connectedPeers
    }
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        sessionDelegate?.session(session, didReceive: data, fromPeer: peerID)
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
            session, didFinishReceivingResourceWithName: resourceName, fromPeer: peerID, at: localURL, withError: error)
    }
    func session(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        if let delegate = sessionDelegate {
            delegate.session?(
                session, didReceiveCertificate: certificate, fromPeer: peerID, certificateHandler: certificateHandler)
        } else {
            certificateHandler(true)
        }
    }
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        advertiserDelegate?.advertiser(
            advertiser, didReceiveInvitationFromPeer: peerID, withContext: context, invitationHandler: invitationHandler
        )
    }
    func advertiser(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: Error) {
        advertiserDelegate?.advertiser?(advertiser, didNotStartAdvertisingPeer: error)
    }
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        browserDelegate?.browser(browser, foundPeer: peerID, withDiscoveryInfo: info)
    }
    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        browserDelegate?.browser(browser, lostPeer: peerID)
    }
    func browser(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: Error) {
        browserDelegate?.browser?(browser, didNotStartBrowsingForPeers: error)
    }
    func advertiserAssistantWillPresentInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {
        assistantDelegate?.advertiserAssistantWillPresentInvitation?(advertiserAssistant)
    }
    func advertiserAssistantDidDismissInvitation(_ advertiserAssistant: MCAdvertiserAssistant) {
        assistantDelegate?.advertiserAssistantDidDismissInvitation?(advertiserAssistant)
    }
}
