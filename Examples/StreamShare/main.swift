// Streams as apps write them: the sender schedules its output stream on the main run loop and writes in its
// `hasSpaceAvailable` events; the receiver schedules the input stream it is given on the main run loop, makes
// itself the delegate, opens it, and does not keep it; it reads a fixed 1,024 bytes per event. Only
// MultipeerConnectivity is imported. The host advertises and accepts, the guest browses, invites and sends.
//   StreamShare host NAME            prints `connected NAME`, then `received NAME BYTES CHECKSUM` per stream
//   StreamShare send NAME BYTES      prints `connected NAME`, then `sent NAME BYTES CHECKSUM`
import MultipeerConnectivity

func say(_ line: String) {
    print(line)
    fflush(stdout)
}

/// A simple running checksum both sides compute (FNV-1a, 64 bits).
struct Checksum {
    private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325
    mutating func add(_ bytes: UnsafeBufferPointer<UInt8>) {
        for byte in bytes {
            value ^= UInt64(byte)
            value = value &* 0x100_0000_01b3
        }
    }
}

/// The byte at `offset` of a stream (both sides know the pattern, so a lost or reordered byte shows).
func patternByte(_ offset: Int) -> UInt8 { UInt8(truncatingIfNeeded: offset &* 131 &+ offset >> 11) }

final class Peer: NSObject, MCSessionDelegate, MCNearbyServiceAdvertiserDelegate, MCNearbyServiceBrowserDelegate,
    StreamDelegate
{
    let serviceType = "stream-share"
    let myPeerID: MCPeerID
    let session: MCSession
    var advertiser: MCNearbyServiceAdvertiser?
    var browser: MCNearbyServiceBrowser?
    let bytesToSend: Int?

    // The sender's state (main thread only).
    var output: OutputStream?
    var sent = 0
    var sentChecksum = Checksum()
    // The receiver's state per stream (main thread only), keyed by the stream object, which is not kept.
    var received: [ObjectIdentifier: (name: String, count: Int, checksum: Checksum)] = [:]

    init(name: String, sending: Int?) {
        myPeerID = MCPeerID(displayName: name)
        session = MCSession(peer: myPeerID, securityIdentity: nil, encryptionPreference: .required)
        bytesToSend = sending
        super.init()
        session.delegate = self
        if sending == nil {
            advertiser = MCNearbyServiceAdvertiser(peer: myPeerID, discoveryInfo: nil, serviceType: serviceType)
            advertiser?.delegate = self
            advertiser?.startAdvertisingPeer()
        } else {
            browser = MCNearbyServiceBrowser(peer: myPeerID, serviceType: serviceType)
            browser?.delegate = self
            browser?.startBrowsingForPeers()
        }
    }

    // MARK: MCSessionDelegate

    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        guard state == .connected else { return }
        DispatchQueue.main.async {
            say("connected \(peerID.displayName)")
            if self.bytesToSend != nil { self.startSending(to: peerID) }
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        // The sender's summary, as a JSON dictionary.
        guard let summary = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }
        DispatchQueue.main.async { say("summary from \(peerID.displayName): \(summary["bytes"] ?? "?") bytes") }
    }

    func session(
        _ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID
    ) {
        DispatchQueue.main.async {
            self.received[ObjectIdentifier(stream)] = (streamName, 0, Checksum())
            stream.delegate = self
            stream.schedule(in: .main, forMode: .default)
            stream.open()
        }
    }

    func session(
        _ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        with progress: Progress
    ) {}

    func session(
        _ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID,
        at localURL: URL?, withError error: Error?
    ) {}

    // MARK: Advertiser and browser

    func advertiser(
        _ advertiser: MCNearbyServiceAdvertiser, didReceiveInvitationFromPeer peerID: MCPeerID,
        withContext context: Data?, invitationHandler: @escaping (Bool, MCSession?) -> Void
    ) {
        invitationHandler(true, session)
    }

    func browser(
        _ browser: MCNearbyServiceBrowser, foundPeer peerID: MCPeerID, withDiscoveryInfo info: [String: String]?
    ) {
        browser.invitePeer(peerID, to: session, withContext: nil, timeout: 10)
        browser.stopBrowsingForPeers()
    }

    func browser(_ browser: MCNearbyServiceBrowser, lostPeer peerID: MCPeerID) {}

    // MARK: Sending

    func startSending(to peerID: MCPeerID) {
        do {
            let stream = try session.startStream(withName: "blob-\(myPeerID.displayName)", toPeer: peerID)
            stream.delegate = self
            stream.schedule(in: .main, forMode: .default)
            stream.open()
            output = stream
        } catch {
            say("cannot start a stream: \(error)")
        }
    }

    func writeMore(_ stream: OutputStream) {
        guard let total = bytesToSend else { return }
        guard sent < total else {
            stream.close()
            stream.remove(from: .main, forMode: .default)
            output = nil
            say("sent \(myPeerID.displayName) \(sent) \(String(sentChecksum.value, radix: 16))")
            let summary = try? JSONSerialization.data(withJSONObject: ["bytes": sent])
            if let summary = summary, let peer = session.connectedPeers.first {
                try? session.send(summary, toPeers: [peer], with: .reliable)
            }
            return
        }
        let chunk = (sent..<min(total, sent + 4_096)).map(patternByte)
        let written = chunk.withUnsafeBufferPointer { stream.write($0.baseAddress!, maxLength: $0.count) }
        guard written > 0 else {
            say("write failed: \(String(describing: stream.streamError))")
            return
        }
        chunk.withUnsafeBufferPointer { sentChecksum.add(UnsafeBufferPointer(rebasing: $0[..<written])) }
        sent += written
    }

    // MARK: StreamDelegate

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        switch eventCode {
        case .hasSpaceAvailable:
            if let output = aStream as? OutputStream { writeMore(output) }
        case .hasBytesAvailable:
            guard let input = aStream as? InputStream, var entry = received[ObjectIdentifier(input)] else { return }
            var buffer = [UInt8](repeating: 0, count: 1_024)
            let count = input.read(&buffer, maxLength: buffer.count)
            guard count > 0 else { return }
            for (index, byte) in buffer[..<count].enumerated() where byte != patternByte(entry.count + index) {
                say("wrong byte at \(entry.count + index) of \(entry.name)")
                break
            }
            buffer.withUnsafeBufferPointer { entry.checksum.add(UnsafeBufferPointer(rebasing: $0[..<count])) }
            entry.count += count
            received[ObjectIdentifier(input)] = entry
        case .endEncountered:
            guard let input = aStream as? InputStream, let entry = received.removeValue(forKey: ObjectIdentifier(input))
            else { return }
            input.close()
            input.remove(from: .main, forMode: .default)
            say("received \(entry.name) \(entry.count) \(String(entry.checksum.value, radix: 16))")
        case .errorOccurred:
            say("stream error: \(String(describing: aStream.streamError))")
        default:
            break
        }
    }
}

let arguments = CommandLine.arguments
let peer: Peer
switch (arguments.count, arguments.count > 1 ? arguments[1] : "") {
case (3, "host"):
    peer = Peer(name: arguments[2], sending: nil)
case (4, "send"):
    guard let bytes = Int(arguments[3]), bytes > 0 else {
        FileHandle.standardError.write("StreamShare: BYTES must be a positive number\n".data(using: .utf8)!)
        exit(2)
    }
    peer = Peer(name: arguments[2], sending: bytes)
default:
    FileHandle.standardError.write("usage: StreamShare host NAME | StreamShare send NAME BYTES\n".data(using: .utf8)!)
    exit(2)
}
RunLoop.main.run()
