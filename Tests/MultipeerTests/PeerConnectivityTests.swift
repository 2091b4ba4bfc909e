import Foundation
import MultipeerConnectivity
import MultipeerIO
import PeerConnectivity
import Testing

/// Collects a manager's events (listening in the background, on the manager's queue).
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    private var events: [[String: Any]] = []
    private var streams: [(Stream, String)] = []

    func attach(to manager: PeerConnectionManager, key: String = "log") {
        manager.listenOn({ [self] event in record(event) }, performListenerInBackground: true, withKey: key)
    }

    var all: [String] { lock.withLock { lines } }
    var eventInfos: [[String: Any]] { lock.withLock { events } }
    var receivedStreams: [(Stream, String)] { lock.withLock { streams } }
    func contains(_ line: String) -> Bool { all.contains(line) }

    private func record(_ event: PeerConnectionEvent) {
        let line: String
        switch event {
        case .ready: line = "ready"
        case .started: line = "started"
        case .ended: line = "ended"
        case .error(let error): line = "error \(error)"
        case .devicesChanged(let peer, let connected):
            line =
                "changed \(peer.displayName) \(peer.status) [\(connected.map(\.displayName).sorted().joined(separator: ","))]"
        case .receivedData(let peer, let data): line = "data \(peer.displayName) \(data.count)"
        case .receivedEvent(let peer, let info):
            lock.withLock { events.append(info) }
            line = "event \(peer.displayName)"
        case .receivedMessage(let peer, let type, _): line = "message \(peer.displayName) \(type)"
        case .receivedStream(let peer, let stream, let name):
            lock.withLock { streams.append((stream, name)) }
            line = "stream \(peer.displayName) \(name)"
        case .startedReceivingResource(let peer, let name, _): line = "resource started \(peer.displayName) \(name)"
        case .finishedReceivingResource(let peer, let name, let url, let error):
            let contents = url.flatMap { try? Data(contentsOf: $0) }
            line = "resource finished \(peer.displayName) \(name) \(contents?.count ?? -1) \(error == nil)"
        case .receivedCertificate(let peer, _, _): line = "certificate \(peer.displayName)"
        case .foundPeer(let peer): line = "found \(peer.displayName)"
        case .foundPeerWithDiscoveryInfo(let peer, let info):
            line =
                "found \(peer.displayName) info \(info?.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",") ?? "-")"
        case .lostPeer(let peer): line = "lost \(peer.displayName)"
        case .nearbyPeersChanged(let peers): line = "nearby \(peers.count)"
        case .receivedInvitation(let peer, let context, _):
            line = "invitation \(peer.displayName) \(context.map { String(decoding: $0, as: UTF8.self) } ?? "-")"
        }
        lock.withLock { lines.append(line) }
    }
}

/// The deprecated event API, reached through a protocol so the build's warnings-as-errors lets tests call it.
protocol LegacyEvents {
    func sendEvent(_ eventInfo: [String: Any], toPeers peers: [Peer])
}

extension PeerConnectionManager: LegacyEvents {}

enum Legacy {
    static func sendEvent(_ manager: any LegacyEvents, _ info: [String: Any], toPeers peers: [Peer] = []) {
        manager.sendEvent(info, toPeers: peers)
    }
}

struct Note: PeerMessage, Equatable {
    let text: String
    let number: Int
}

extension CompatibilitySuites {
    @Suite("PeerConnectivity over loopback", .serialized)
    struct PeerConnectivityTests {
        init() { FacadeTestSetup.prepare() }

        @Test func twoAutomaticManagersConnectAndExchangeEventsMessagesStreamsAndResources() async throws {
            let service = FacadeTestSetup.serviceType()
            let ann = PeerConnectionManager(serviceType: service, displayName: "Ann", discoveryInfo: ["room": "lobby"])
            let ben = PeerConnectionManager(serviceType: service, displayName: "Ben")
            let annLog = EventLog()
            let benLog = EventLog()
            annLog.attach(to: ann)
            benLog.attach(to: ben)
            let received = Lock<[Note]>([])
            ann.observeMessages(ofType: Note.self, forKey: "notes") { note, _ in received.withLock { $0.append(note) } }
            defer {
                ann.stop()
                ben.stop()
            }
            ann.start()
            ben.start()
            #expect(await soon { ann.connectedPeers.count == 1 && ben.connectedPeers.count == 1 })
            #expect(await soon { benLog.contains("found Ann info room=lobby") })  // discovery info arrives
            #expect(benLog.contains("found Ann"))
            #expect(await soon { ann.foundPeers.map(\.displayName) == ["Ben"] })
            #expect(await soon { annLog.all.contains { $0.hasPrefix("changed Ben connected [Ben]") } })

            // Events to everyone and to one peer, as the original README shows.
            let when = Date(timeIntervalSince1970: 1_700_000_000)
            Legacy.sendEvent(ben, ["EventKey": when, "count": 3])
            let annPeer = try #require(ben.connectedPeers.first)
            Legacy.sendEvent(ben, ["only": "you"], toPeers: [annPeer])
            #expect(await soon { annLog.eventInfos.count == 2 })
            #expect(annLog.eventInfos.first?["EventKey"] as? Date == when)
            #expect(annLog.eventInfos.first?["count"] as? Int == 3)
            #expect(annLog.eventInfos.last?["only"] as? String == "you")

            // Typed messages, in order, through observeMessages (on the main queue), with the per-peer outcome.
            let outcome = Lock<[Peer: any Error]?>(nil)
            for number in 0..<50 { ben.sendMessage(Note(text: "n", number: number)) }
            ben.sendMessage(Note(text: "last", number: 50)) { failures in outcome.withLock { $0 = failures } }
            #expect(await soon { outcome.withLock { $0 != nil } })
            #expect(outcome.withLock { $0?.isEmpty } == true)
            // observeMessages delivers on the main queue, which this test process runs.
            #expect(await soon { received.withLock { $0.count == 51 } })
            #expect(received.withLock { $0.map(\.number) } == Array(0...50))
            #expect(annLog.all.filter { $0 == "message Ben Note" }.count == 51)

            // A stream and a resource, which the original's Network backend lacks.
            let output = try ben.sendDataStream(streamName: "s", toPeer: annPeer)
            output.open()
            _ = output.write([1, 2, 3, 4], maxLength: 4)
            output.close()
            #expect(await soon { annLog.contains("stream Ben s") })
            let input = try #require(annLog.receivedStreams.first?.0 as? InputStream)
            input.open()
            var buffer = [UInt8](repeating: 0, count: 8)
            #expect(input.read(&buffer, maxLength: 8) == 4)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("pc-\(UUID().uuidString)")
            try Data(repeating: 9, count: 70_000).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            let progress = ben.sendResourceAtURL(
                file, withName: "nine.bin", toPeers: [annPeer], withCompletionHandler: nil)
            #expect(progress.count == 1)
            // The file is still there when the (queued) listener runs: the manager kept it.
            #expect(await soon { annLog.contains("resource finished Ben nine.bin 70000 true") })
            try? FileManager.default.removeItem(at: ann.receivedResourcesDirectory)
        }

        @Test func sendingToAPeerThatLeftReportsTheFailureForThatPeer() async throws {
            let service = FacadeTestSetup.serviceType()
            let ann = PeerConnectionManager(serviceType: service, displayName: "Ann")
            let ben = PeerConnectionManager(serviceType: service, displayName: "Ben")
            defer {
                ann.stop()
                ben.stop()
            }
            ann.start()
            ben.start()
            #expect(await soon { ann.connectedPeers.count == 1 && ben.connectedPeers.count == 1 })
            let annPeer = try #require(ben.connectedPeers.first)
            ann.stop()
            #expect(await soon { ben.connectedPeers.isEmpty })
            let outcome = Lock<[Peer: any Error]?>(nil)
            ben.sendData(Data([1]), toPeers: [annPeer]) { failures in outcome.withLock { $0 = failures } }
            #expect(await soon { outcome.withLock { $0 != nil } })
            let failure = try #require(outcome.withLock { $0?[annPeer] })
            #expect((failure as? MCError)?.code == .notConnected)
        }

        @Test func aPreSharedKeyAdmitsOnlyPeersThatHoldIt() async throws {
            let service = FacadeTestSetup.serviceType()
            let key = Data(repeating: 7, count: 32)
            let ann = PeerConnectionManager(
                serviceType: service, displayName: "Ann", networkSecurity: .preSharedKey(key))
            let ben = PeerConnectionManager(
                serviceType: service, displayName: "Ben", backend: .networkFramework,
                networkSecurity: .preSharedKey(key))
            let eve = PeerConnectionManager(
                serviceType: service, displayName: "Eve", networkSecurity: .preSharedKey(Data(repeating: 8, count: 32)))
            defer {
                for manager in [ann, ben, eve] { manager.stop() }
            }
            // A new manager for the same service type stops the previous one: keep these three apart by role.
            for manager in [ann, ben, eve] { manager.start() }
            #expect(await soon { ann.connectedPeers.map(\.displayName) == ["Ben"] })
            #expect(await soon { ben.connectedPeers.map(\.displayName) == ["Ann"] })
            try await Task.sleep(for: .seconds(1))
            #expect(eve.connectedPeers.isEmpty)
            #expect(!ann.connectedPeers.contains { $0.displayName == "Eve" })
        }

        @Test func listenersByKeyManualInvitationsAndTheBrowserModel() async throws {
            let service = FacadeTestSetup.serviceType()
            let ann = PeerConnectionManager(
                serviceType: service, connectionType: .inviteOnly, displayName: "Ann", discoveryInfo: ["v": "1"])
            let ben = PeerConnectionManager(serviceType: service, connectionType: .custom, displayName: "Ben")
            let annLog = EventLog()
            annLog.attach(to: ann)
            let answered = Lock(0)
            ann.listenOn(
                { event in
                    if case .receivedInvitation(_, let context, let handler) = event {
                        answered.withLock { $0 += 1 }
                        handler(context == Data("please".utf8))
                    }
                }, performListenerInBackground: true, withKey: "answer")
            let model = PeerBrowserModel(manager: ben)
            model.startObserving()
            defer {
                model.stopObserving()
                ann.stop()
                ben.stop()
            }
            ann.start()
            ben.start()
            #expect(await soon { model.discoveredPeers.map(\.displayName) == ["Ann"] })
            // Nobody invites by itself in these modes.
            try await Task.sleep(for: .milliseconds(500))
            #expect(ann.connectedPeers.isEmpty && answered.withLock { $0 } == 0)
            let annPeer = try #require(model.discoveredPeers.first)
            model.invitePeer(annPeer, withContext: Data("no".utf8), timeout: 5)
            #expect(await soon { annLog.contains("invitation Ben no") })
            #expect(await soon { answered.withLock { $0 } == 1 })
            try await Task.sleep(for: .milliseconds(300))
            #expect(ben.connectedPeers.isEmpty)
            model.invitePeer(annPeer, withContext: Data("please".utf8), timeout: 5)
            #expect(await soon { ben.connectedPeers.map(\.displayName) == ["Ann"] })
            #expect(await soon { model.discoveredPeers.first?.status == .connected })
            // A removed listener hears nothing more.
            ann.removeListenerForKey("log")
            let before = annLog.all.count
            ben.sendData(Data([1]))
            try await Task.sleep(for: .milliseconds(300))
            #expect(annLog.all.count == before)
        }

        @Test func automaticManagersRetryARefusedPeerThreeTimesAndThenStop() async throws {
            // Both refuse: each invites the other once and retries after each refusal, at once and at most 3 times
            // in a row, then leaves it alone (no wall-clock timer, nothing more later).
            let service = FacadeTestSetup.serviceType()
            let ann = PeerConnectionManager(serviceType: service, displayName: "Ann", invitationPolicy: .rejectAll)
            let ben = PeerConnectionManager(serviceType: service, displayName: "Ben", invitationPolicy: .rejectAll)
            let annLog = EventLog()
            let benLog = EventLog()
            annLog.attach(to: ann)
            benLog.attach(to: ben)
            defer {
                ann.stop()
                ben.stop()
            }
            ann.start()
            ben.start()
            let invitations = { (log: EventLog, from: String) in log.all.filter { $0 == "invitation \(from) -" }.count }
            #expect(await soon { invitations(annLog, "Ben") == 4 && invitations(benLog, "Ann") == 4 })
            try await Task.sleep(for: .seconds(2))
            #expect(invitations(annLog, "Ben") == 4)
            #expect(invitations(benLog, "Ann") == 4)
            #expect(ann.connectedPeers.isEmpty && ben.connectedPeers.isEmpty)
        }

        @Test func serviceTypesAndNamesFollowTheRules() {
            // Letters of either case (RFC 6335), as Apple's framework accepts them: MultipeerKit's default is "MKSVC".
            #expect(
                PeerConnectionManager.isValidServiceType("chat-room")
                    && PeerConnectionManager.isValidServiceType("MKSVC"))
            for bad in ["", "under_score", "-lead", "trail-", "two--dash", "1234", "sixteen-chars-xx", "dot.ted"] {
                #expect(!PeerConnectionManager.isValidServiceType(bad), "\(bad)")
            }
            #expect(Peer.isValidDisplayName("Ann") && !Peer.isValidDisplayName(""))
            #expect(!Peer.isValidDisplayName(String(repeating: "é", count: 32)))
            let cut = Peer.sanitizedDisplayName(String(repeating: "é", count: 40))
            #expect(cut.utf8.count == 62 && cut.count == 31)
            #expect(Peer.sanitizedDisplayName("", fallback: "") == "Peer")
            #expect(Peer.sanitizedDisplayName("a\nb") == "ab")
        }
    }
}
