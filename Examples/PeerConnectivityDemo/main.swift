// The PeerConnectivity library's README usage as a program: create a manager, listen for events by key, start
// it, send events to every peer and to one, and stop. Lines on standard input drive it:
//   all TEXT          sendEvent(["EventKey": TEXT]) to every connected peer
//   to NAME TEXT      sendEvent to that peer only
//   checked NAME TEXT sendData with the completion that reports each peer's outcome
//   peers             the connected and found peers
//   stop / start / quit
// Usage: PeerConnectivityDemo NAME [KEYFILE]   (KEYFILE: a pre-shared key of at least 32 bytes)
import Foundation
import PeerConnectivity

/// `sendEvent` is deprecated in PeerConnectivity (as in the original); the README still shows it. Calling it
/// through this protocol keeps the project's zero-warning build; apps can call `pcm.sendEvent` directly.
protocol EventSending {
    func sendEvent(_ eventInfo: [String: Any], toPeers peers: [Peer])
}
extension PeerConnectionManager: EventSending {}

func show(_ line: String) { FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!) }

let arguments = CommandLine.arguments.dropFirst()
let name = arguments.first ?? "Peer"
var security = PeerConnectionNetworkSecurity.unauthenticated
if arguments.count > 1, let key = FileManager.default.contents(atPath: arguments[arguments.startIndex + 1]) {
    security = .preSharedKey(key)
}

let pcm = PeerConnectionManager(
    serviceType: "local", connectionType: .automatic, displayName: name, networkSecurity: security)

/// Every peer seen connected, by name (so a peer that left can still be named).
let knownLock = NSLock()
var known: [String: Peer] = [:]

// Listen to an event
pcm.listenOn(
    { event in
        switch event {
        case .devicesChanged(let peer, let connectedPeers):
            knownLock.lock()
            known[peer.displayName] = peer
            knownLock.unlock()
            show(
                "\(peer.displayName) \(peer.status); connected: \(connectedPeers.map { $0.displayName }.sorted().joined(separator: ","))"
            )
        case .receivedEvent(let peer, let eventInfo):
            show("event from \(peer.displayName): \(eventInfo["EventKey"] as? String ?? "?")")
        case .foundPeer(let peer):
            show("found \(peer.displayName)")
        case .error(let error):
            show("error \(error)")
        default: break
        }
    }, withKey: "SomeEvent")

pcm.start {
    show("started")
}

func peer(named name: String) -> Peer? { pcm.connectedPeers.first { $0.displayName == name } }

Thread.detachNewThread {
    while let line = readLine() {
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        switch (words.first ?? "", words.count) {
        case ("all", 2...):
            let event: [String: Any] = ["EventKey": words.dropFirst().joined(separator: " ")]
            // Sends to all connected peers
            (pcm as EventSending).sendEvent(event, toPeers: [])
        case ("to", 3):
            // Events can be sent to specific peers
            if let somePeer = peer(named: words[1]) {
                (pcm as EventSending).sendEvent(["EventKey": words[2]], toPeers: [somePeer])
            } else {
                show("not connected to \(words[1])")
            }
        case ("checked", 3):
            knownLock.lock()
            let target = known[words[1]]
            knownLock.unlock()
            guard let target = target else {
                show("no peer named \(words[1])")
                continue
            }
            pcm.sendData(words[2].data(using: .utf8)!, toPeers: [target]) { failures in
                if let failure = failures[target] {
                    show("failed \(target.displayName): \(failure.localizedDescription)")
                } else {
                    show("delivered to \(target.displayName)")
                }
            }
        case ("peers", _):
            show(
                "connected: \(pcm.connectedPeers.map { $0.displayName }.sorted().joined(separator: ",")) found: \(pcm.foundPeers.map { $0.displayName }.sorted().joined(separator: ","))"
            )
        case ("stop", _):
            pcm.stop()
            show("stopped")
        case ("start", _):
            pcm.start { show("started") }
        case ("quit", _):
            pcm.stop()
            Thread.sleep(forTimeInterval: 0.2)
            exit(0)
        default:
            show("commands: all TEXT, to NAME TEXT, checked NAME TEXT, peers, stop, start, quit")
        }
    }
    pcm.stop()
    Thread.sleep(forTimeInterval: 0.2)
    exit(0)
}

// Listeners run on the main queue by default, as in the original library.
dispatchMain()
