// The chat tutorial: invitations that carry a message and a timeout, accepted or declined by the user, a
// message history per peer, images sent as data, and a peer ID archived in UserDefaults so the app keeps its
// identity across launches. The SwiftUI views are replaced by lines; images are saved to a folder instead of
// shown (`--dir DIR`, default the current one).
import Foundation
import MultipeerConnectivity

func show(_ line: String) { FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!) }

struct ChatMessage {
    let text: String
    let fromMe: Bool
}

class ChatService: NSObject {
    let serviceType = "example-chat"
    let myPeerID: MCPeerID
    let session: MCSession
    let advertiser: MCNearbyServiceAdvertiser
    let browser: MCNearbyServiceBrowser
    let imageFolder: URL

    private let lock = NSLock()
    private var found: [String: MCPeerID] = [:]
    private var pendingInvitations: [String: (Bool, MCSession?) -> Void] = [:]
    private var history: [String: [ChatMessage]] = [:]
    private var imagesReceived = 0

    /// The tutorial's way to keep one identity: archive the peer ID in UserDefaults, restore it next time.
    static func loadPeerID(displayName: String) -> MCPeerID {
        let defaults = UserDefaults.standard
        if let data = defaults.data(forKey: "peerID"),
            let saved = try? NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: data),
            saved.displayName == displayName
        {
            return saved
        }
        let peerID = MCPeerID(displayName: displayName)
        if let data = try? NSKeyedArchiver.archivedData(withRootObject: peerID, requiringSecureCoding: true) {
            defaults.set(data, forKey: "peerID")
            defaults.synchronize()
        }
        return peerID
    }

    init(name: String, imageFolder: URL) {
        myPeerID = ChatService.loadPeerID(displayName: name)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        advertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: nil, serviceType: serviceType)
        browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: serviceType)
        self.imageFolder = imageFolder
        super.init()
        session.delegate = self
        advertiser.delegate = self
        browser.delegate = self
        advertiser.startAdvertisingPeer()
        browser.startBrowsingForPeers()
    }

    func peer(named name: String) -> MCPeerID? {
        lock.lock()
        defer { lock.unlock() }
        return found[name] ?? session.connectedPeers.first { $0.displayName == name }
    }

    func invite(_ name: String, message: String) {
        guard let peer = peer(named: name) else { return show("no peer named \(name)") }
        browser.invitePeer(peer, to: session, withContext: message.data(using: .utf8), timeout: 5)
    }

    func answer(_ name: String, accept: Bool) {
        lock.lock()
        let handler = pendingInvitations.removeValue(forKey: name)
        lock.unlock()
        guard let handler = handler else { return show("no invitation from \(name)") }
        handler(accept, accept ? session : nil)
    }

    func say(_ text: String, to name: String) {
        guard let peer = peer(named: name) else { return show("no peer named \(name)") }
        do {
            try session.send(text.data(using: .utf8)!, toPeers: [peer], with: .reliable)
            record(ChatMessage(text: text, fromMe: true), with: name)
        } catch {
            show("not sent: \(error.localizedDescription)")
        }
    }

    func sendImage(at path: String, to name: String) {
        guard let peer = peer(named: name) else { return show("no peer named \(name)") }
        guard let image = FileManager.default.contents(atPath: path) else { return show("cannot read \(path)") }
        do {
            try session.send(image, toPeers: [peer], with: .reliable)
            record(ChatMessage(text: "[image \(image.count) bytes]", fromMe: true), with: name)
        } catch {
            show("not sent: \(error.localizedDescription)")
        }
    }

    func showHistory(with name: String) {
        lock.lock()
        let messages = history[name] ?? []
        lock.unlock()
        show("history \(name): \(messages.count) messages")
        for message in messages { show((message.fromMe ? "> " : "< ") + message.text) }
    }

    private func record(_ message: ChatMessage, with name: String) {
        lock.lock()
        history[name, default: []].append(message)
        lock.unlock()
    }

    /// Images start with the PNG or JPEG signature; anything else is text.
    private static func isImage(_ data: Data) -> Bool {
        data.starts(with: [0x89, 0x50, 0x4E, 0x47]) || data.starts(with: [0xFF, 0xD8, 0xFF])
    }

    fileprivate func received(_ data: Data, from peerID: MCPeerID) {
        if ChatService.isImage(data) {
            lock.lock()
            imagesReceived += 1
            let file = imageFolder.appendingPathComponent("\(peerID.displayName)-\(imagesReceived).img")
            lock.unlock()
            try? data.write(to: file)
            record(ChatMessage(text: "[image \(data.count) bytes]", fromMe: false), with: peerID.displayName)
            show("image from \(peerID.displayName) \(data.count) bytes saved \(file.path)")
        } else if let text = String(data: data, encoding: .utf8) {
            record(ChatMessage(text: text, fromMe: false), with: peerID.displayName)
            show("\(peerID.displayName): \(text)")
        }
    }
}

extension ChatService: MCNearbyServiceBrowserDelegate {
    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        lock.lock()
        found[peerID.displayName] = peerID
        lock.unlock()
        show("found \(peerID.displayName) \(peerID.fingerprint)")
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {
        lock.lock()
        if found[peerID.displayName] == peerID { found[peerID.displayName] = nil }
        lock.unlock()
        show("lost \(peerID.displayName)")
    }
}

extension ChatService: MCNearbyServiceAdvertiserDelegate {
    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        lock.lock()
        pendingInvitations[peerID.displayName] = invitationHandler
        lock.unlock()
        let message = context.flatMap { String(data: $0, encoding: .utf8) } ?? ""
        show("invitation from \(peerID.displayName): \(message)")
    }
}

extension ChatService: MCSessionDelegate {
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        switch state {
        case .connected: show("connected \(peerID.displayName)")
        case .connecting: show("connecting \(peerID.displayName)")
        case .notConnected:
            // An addition of this library: why (declined, timed out, unreachable, ...).
            let reason = session.disconnectReason(for: peerID).map { "\($0)" } ?? "unknown"
            show("not connected \(peerID.displayName): \(reason)")
        @unknown default: break
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        received(data, from: peerID)
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

var arguments = Array(CommandLine.arguments.dropFirst())
var folder = FileManager.default.currentDirectoryPath
if let index = arguments.firstIndex(of: "--dir"), index + 1 < arguments.count {
    folder = arguments[index + 1]
    arguments.removeSubrange(index...(index + 1))
}
let chat = ChatService(name: arguments.first ?? "Chat", imageFolder: URL(fileURLWithPath: folder))
show("me \(chat.myPeerID.displayName) \(chat.myPeerID.fingerprint)")
while let line = readLine() {
    let words = line.split(separator: " ", maxSplits: 2).map(String.init)
    switch (words.first ?? "", words.count) {
    case ("invite", 2...): chat.invite(words[1], message: words.count == 3 ? words[2] : "")
    case ("accept", 2): chat.answer(words[1], accept: true)
    case ("decline", 2): chat.answer(words[1], accept: false)
    case ("say", 3): chat.say(words[2], to: words[1])
    case ("image", 3): chat.sendImage(at: words[2], to: words[1])
    case ("history", 2): chat.showHistory(with: words[1])
    case ("quit", _): exit(0)
    default:
        show(
            "commands: invite NAME MESSAGE, accept NAME, decline NAME, say NAME TEXT, image NAME PATH, history NAME, quit"
        )
    }
}
