import Foundation
import Multipeer
import MultipeerConnectivity
import TestIsolation
import Testing

extension CompatibilitySuites {
    @Suite("MultipeerConnectivity facade over loopback", .serialized)
    struct MCFacadeTests {
        init() { FacadeTestSetup.prepare() }

        @Test func everyPeerIDIsNewEvenForANameUsedBeforeAndCopiesAreTheSamePeer() throws {
            let first = MCPeerID(displayName: "Same")
            let second = MCPeerID(displayName: "Same")
            #expect(first != second)
            #expect(first.displayName == second.displayName)
            let copy = try #require(first.copy() as? MCPeerID)
            #expect(copy == first && copy.hash == first.hash)
            #expect(Set([first, second, copy]).count == 2)
        }

        @Test func anArchivedPeerIDComesBackAsTheSamePeerWithItsIdentityButTheArchiveHoldsNoKey() throws {
            let original = MCPeerID(displayName: "Keeper ✓")
            let archive = try NSKeyedArchiver.archivedData(withRootObject: original, requiringSecureCoding: true)
            // Apps send archived peer IDs to other peers: the private key must not be in it.
            #expect(archive.range(of: Data("PRIVATE KEY".utf8)) == nil)
            #expect(archive.count < 2_000)
            let restored = try #require(try NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archive))
            #expect(restored == original)
            #expect(restored.displayName == "Keeper ✓")
            #expect(restored.fingerprint == original.fingerprint)
            // It can start a session again: its key is in this user's identity folder, mode 0600.
            let file = MCPeerID.identityStore.path(for: original.fingerprint)
            #expect(file.hasPrefix(FacadeTestSetup.identityFolder))
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let session = MCSession(peer: restored)
            #expect(session.myPeerID == original)
            #expect(session.encryptionPreference == .required)
            session.disconnect()
        }

        @Test func aForgedArchiveIsRefusedWithoutACrash() throws {
            for (name, fingerprint) in [
                (String(repeating: "x", count: 64), MCPeerID(displayName: "A").fingerprint.description),
                ("", MCPeerID(displayName: "A").fingerprint.description),
                ("Bad\nName", MCPeerID(displayName: "A").fingerprint.description),
                ("Fine", "not-a-fingerprint"),
                ("Fine", String(repeating: "a", count: 10_000)),
            ] {
                let coder = NSKeyedArchiver(requiringSecureCoding: true)
                coder.encode(name as NSString, forKey: "MCPeerIDDisplayName")
                coder.encode(fingerprint as NSString, forKey: "MCPeerIDFingerprint")
                coder.finishEncoding()
                let decoded = try? NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: coder.encodedData)
                #expect(decoded == nil, "\(name.prefix(10)) / \(fingerprint.prefix(20))")
            }
        }

        @Test func aFoundPeerIsInvitedWithContextAndBothSidesExchangeDataOnPrivateQueues() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            let bobSeen = pair.bobLog.snapshot()
            #expect(bobSeen.found[pair.alice] == ["color": "teal"])
            #expect(bobSeen.found.count == 1)  // never its own advertisement
            let invitation = try #require(pair.aliceLog.snapshot().invitations.first)
            #expect(invitation.0 == pair.bob && invitation.1 == Data("hello".utf8))
            #expect(await soon { pair.bobLog.snapshot().states.count >= 2 })
            #expect(pair.bobLog.snapshot().states.prefix(2) == ["Alice connecting", "Alice connected"])
            #expect(await soon { pair.aliceLog.snapshot().states.contains("Bob connected") })

            try pair.bobSession.send(Data("red".utf8), toPeers: [pair.alice], with: .reliable)
            try pair.aliceSession.send(Data("blue".utf8), toPeers: [pair.bob], with: .reliable)
            for index in 0..<100 {
                try pair.bobSession.send(Data([UInt8(index)]), toPeers: [pair.alice], with: .reliable)
            }
            #expect(await soon { pair.aliceLog.snapshot().data.count == 101 })
            let aliceGot = pair.aliceLog.snapshot().data
            #expect(aliceGot.first?.1 == Data("red".utf8) && aliceGot.first?.0 == pair.bob)
            #expect(aliceGot.dropFirst().map { $0.1 } == (0..<100).map { Data([UInt8($0)]) })  // in order
            #expect(await soon { pair.bobLog.snapshot().data.first?.1 == Data("blue".utf8) })
            // Delegates run on the sessions' private queues, never the main thread.
            #expect(pair.aliceLog.snapshot().onMainThread == 0 && pair.aliceLog.snapshot().overlapping == 0)

            // A peer that is not connected: MCError.notConnected, naming the peer.
            let stranger = MCPeerID(displayName: "Stranger")
            do {
                try pair.bobSession.send(Data([1]), toPeers: [stranger], with: .reliable)
                Issue.record("sending to a stranger did not throw")
            } catch let error as MCError {
                #expect(error.code == .notConnected && error.reason.contains("Stranger"))
                #expect(MCError.notConnected ~= error)
            }
            #expect(throws: MCError.self) { try pair.bobSession.startStream(withName: "x", toPeer: stranger) }
        }

        /// A wrapper's default service type is upper case ("MKSVC"). Apple's framework accepts it, and service
        /// types compare without case (RFC 6335): peers that spell one differently find and invite each other.
        @Test func anUpperCaseServiceTypeWorksAndMeetsItsLowerCaseSpelling() async throws {
            let service = FacadeTestSetup.serviceType()
            let alice = MCPeerID(displayName: "Alice")
            let bob = MCPeerID(displayName: "Bob")
            let aliceSession = MCSession(peer: alice, securityIdentity: nil, encryptionPreference: .required)
            let bobSession = MCSession(peer: bob, securityIdentity: nil, encryptionPreference: .required)
            let aliceLog = Recorder("Alice")
            let bobLog = Recorder("Bob")
            aliceSession.delegate = aliceLog
            bobSession.delegate = bobLog
            aliceLog.accepting.withLock { $0 = aliceSession }
            let advertiser = MCNearbyServiceAdvertiser(
                peer: alice, discoveryInfo: nil, serviceType: service.uppercased())
            advertiser.delegate = aliceLog
            let browser = MCNearbyServiceBrowser(peer: bob, serviceType: service)
            browser.delegate = bobLog
            #expect(advertiser.serviceType == service.uppercased() && advertiser.serviceType != service)
            advertiser.startAdvertisingPeer()
            browser.startBrowsingForPeers()
            #expect(await soon { bobLog.snapshot().found[alice] != nil })
            // The invitation names the browser's spelling; the advertiser's is the other one.
            browser.invitePeer(alice, to: bobSession, withContext: nil, timeout: 10)
            let connected = await soon {
                aliceSession.connectedPeers.contains(bob) && bobSession.connectedPeers.contains(alice)
            }
            #expect(connected, "\(bobLog.snapshot().states)")
            advertiser.stopAdvertisingPeer()
            browser.stopBrowsingForPeers()
            aliceSession.disconnect()
            bobSession.disconnect()
        }

        /// Apple's usual shape: a host advertises and accepts, guests browse and invite it; the host's session
        /// introduces the guests to each other, so every guest ends connected to every other.
        @Test func guestsThatInviteAHostAreConnectedToEachOther() async throws {
            FacadeTestSetup.prepare()
            let service = FacadeTestSetup.serviceType()
            let host = MCPeerID(displayName: "Host")
            let hostSession = MCSession(peer: host, securityIdentity: nil, encryptionPreference: .required)
            let hostLog = Recorder("Host")
            hostSession.delegate = hostLog
            hostLog.accepting.withLock { $0 = hostSession }
            let advertiser = MCNearbyServiceAdvertiser(peer: host, discoveryInfo: nil, serviceType: service)
            advertiser.delegate = hostLog
            advertiser.startAdvertisingPeer()
            var guests: [(MCSession, Recorder, MCNearbyServiceBrowser)] = []
            for index in 0..<3 {
                let peer = MCPeerID(displayName: "Guest\(index)")
                let session = MCSession(peer: peer, securityIdentity: nil, encryptionPreference: .required)
                let log = Recorder("Guest\(index)")
                session.delegate = log
                let browser = MCNearbyServiceBrowser(peer: peer, serviceType: service)
                browser.delegate = log
                browser.startBrowsingForPeers()
                guests.append((session, log, browser))
            }
            for (session, log, browser) in guests {
                #expect(await soon { log.snapshot().found.keys.contains(host) })
                browser.invitePeer(host, to: session, withContext: nil, timeout: 10)
            }
            let meshed = await soon { guests.allSatisfy { $0.0.connectedPeers.count == 3 } }
            #expect(meshed, "\(guests.map { $0.0.connectedPeers.map(\.displayName).sorted() })")
            #expect(hostSession.connectedPeers.count == 3)
            for (session, _, browser) in guests {
                browser.stopBrowsingForPeers()
                session.disconnect()
            }
            advertiser.stopAdvertisingPeer()
            hostSession.disconnect()
        }

        @Test func aDeclinedInvitationEndsNotConnectedAndSaysWhy() async throws {
            let pair = Pair()
            defer { pair.stop() }
            pair.advertiser.startAdvertisingPeer()
            pair.browser.startBrowsingForPeers()
            #expect(await soon { pair.bobLog.snapshot().found[pair.alice] != nil })
            pair.browser.invitePeer(pair.alice, to: pair.bobSession, withContext: nil, timeout: 0)
            #expect(await soon { pair.bobLog.snapshot().states.contains("Alice notConnected") })
            #expect(pair.bobLog.snapshot().states == ["Alice connecting", "Alice notConnected"])
            #expect(pair.bobLog.snapshot().reasons == [.declined("declined")])
            #expect(pair.aliceLog.snapshot().invitations.first?.1 == nil)
            #expect(pair.bobSession.connectedPeers.isEmpty)
        }

        @Test(arguments: [(MCEncryptionPreference.required, MCEncryptionPreference.none), (.none, .required)])
        func encryptionPreferencesThatExcludeEachOtherFailWithTheReason(
            alice: MCEncryptionPreference, bob: MCEncryptionPreference
        ) async throws {
            let pair = Pair(alice: alice, bob: bob)
            defer { pair.stop() }
            #expect(await pair.connect() == false)
            #expect(await soon { pair.bobLog.snapshot().states.contains("Alice notConnected") })
            let reason = try #require(pair.bobLog.snapshot().reasons.first ?? nil)
            guard case .security = reason else {
                Issue.record("expected a security reason, got \(reason)")
                return
            }
        }

        @Test func aRefusedCertificateKeepsThePeerOut() async throws {
            let pair = Pair()
            defer { pair.stop() }
            pair.aliceLog.acceptCertificates.withLock { $0 = false }
            #expect(await pair.connect() == false)
            #expect(await soon { pair.bobLog.snapshot().states.contains("Alice notConnected") })
            #expect(pair.aliceSession.connectedPeers.isEmpty && pair.bobSession.connectedPeers.isEmpty)
        }

        @Test func streamsCarryBytesInOrderFromOutputStreamToInputStream() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            let payload = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
            nonisolated(unsafe) let output = try pair.bobSession.startStream(withName: "photo", toPeer: pair.alice)
            output.open()
            let writer = Thread {
                var offset = 0
                while offset < payload.count {
                    let written = payload[offset...].withUnsafeBufferPointer {
                        output.write($0.baseAddress!, maxLength: min(100_000, $0.count))
                    }
                    if written <= 0 { break }
                    offset += written
                }
                output.close()
            }
            writer.start()
            #expect(await soon { !pair.aliceLog.streams.isEmpty })
            let (received0, name, from) = try #require(pair.aliceLog.streams.first)
            nonisolated(unsafe) let input = received0
            #expect(name == "photo" && from == pair.bob)
            input.open()
            let received = await Task.detached { () -> [UInt8] in
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 70_000)
                while true {
                    let count = input.read(&buffer, maxLength: buffer.count)
                    if count <= 0 { break }
                    received += buffer[..<count]
                }
                return received
            }.value
            #expect(received.count == payload.count)
            #expect(byteDifference(received, payload) == nil)
            #expect(input.streamStatus == .atEnd)
        }

        @Test func aResourceArrivesWithProgressAndTheCompletionHandlerRuns() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("mc-resource-\(UUID().uuidString)")
            let contents = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            try contents.write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            let done = Recorder.Completion()
            let progress = pair.bobSession.sendResource(at: file, withName: "../../etc/passwd", toPeer: pair.alice) {
                done.finish($0)
            }
            #expect(progress != nil)
            #expect(await soon { done.result != nil })
            #expect(done.result == .some(nil))
            #expect(progress?.completedUnitCount == 300_000 && progress?.totalUnitCount == 300_000)
            #expect(await soon { !pair.aliceLog.snapshot().resourcesFinished.isEmpty })
            let started = try #require(pair.aliceLog.snapshot().resourcesStarted.first)
            #expect(started.0 == "../../etc/passwd" && started.1 == pair.bob && started.2 == 300_000)
            let finished = try #require(pair.aliceLog.snapshot().resourcesFinished.first)
            #expect(finished.2 == contents && finished.3 == nil)

            // A URL that is neither a file nor http(s): unsupported, at once.
            let refused = Recorder.Completion()
            let none = pair.bobSession.sendResource(
                at: URL(string: "ftp://example.invalid/x")!, withName: "x", toPeer: pair.alice
            ) { refused.finish($0) }
            #expect(none == nil)
            #expect(await soon { refused.result != nil })
            #expect((refused.error as? MCError)?.code == .unsupported)
        }

        @Test func aPeerThatDisconnectsIsSeenNotConnectedAndTheSessionCanBeUsedAgain() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            pair.bobSession.disconnect()
            #expect(await soon { pair.aliceLog.snapshot().states.contains("Bob notConnected") })
            #expect(
                await soon { pair.bobSession.connectedPeers.isEmpty && pair.aliceSession.connectedPeers.isEmpty })
            let reason = try #require(pair.aliceLog.snapshot().reasons.last ?? nil)
            guard case .disconnected = reason else {
                Issue.record("expected disconnected, got \(reason)")
                return
            }
            // Apple's sessions wedge when reused; this one invites again.
            pair.browser.invitePeer(pair.alice, to: pair.bobSession, withContext: nil, timeout: 10)
            #expect(await soon { pair.bobSession.connectedPeers == [pair.alice] })
        }
    }
}

extension CompatibilitySuites.MCFacadeTests {
    /// Apple's custom discovery: each side archives its peer ID and sends it, asks its session for connection
    /// data for the other, sends that, and both call connectPeer; no browser, no advertiser.
    @Test func customDiscoveryConnectsTwoSessionsWithArchivedPeerIDsAndConnectionData() async throws {
        let alice = MCPeerID(displayName: "Alice")
        let bob = MCPeerID(displayName: "Bob")
        let aliceSession = MCSession(peer: alice)
        let bobSession = MCSession(peer: bob)
        let aliceLog = Recorder("Alice")
        let bobLog = Recorder("Bob")
        aliceSession.delegate = aliceLog
        bobSession.delegate = bobLog
        defer {
            aliceSession.disconnect()
            bobSession.disconnect()
        }
        // What each side receives from the other "out of band".
        let bobAsAliceSeesHim = try #require(
            try NSKeyedUnarchiver.unarchivedObject(
                ofClass: MCPeerID.self,
                from: try NSKeyedArchiver.archivedData(withRootObject: bob, requiringSecureCoding: true)))
        let aliceAsBobSeesHer = try #require(
            try NSKeyedUnarchiver.unarchivedObject(
                ofClass: MCPeerID.self,
                from: try NSKeyedArchiver.archivedData(withRootObject: alice, requiringSecureCoding: true)))
        let forBob = try await aliceSession.nearbyConnectionData(forPeer: bobAsAliceSeesHim)
        let forAlice = await withCheckedContinuation { (continuation: CheckedContinuation<Data?, Never>) in
            bobSession.nearbyConnectionData(forPeer: aliceAsBobSeesHer) { data, _ in
                continuation.resume(returning: data)
            }
        }
        let bobData = try #require(forAlice)
        aliceSession.connectPeer(bobAsAliceSeesHim, withNearbyConnectionData: bobData)
        bobSession.connectPeer(aliceAsBobSeesHer, withNearbyConnectionData: forBob)
        #expect(await soon { aliceSession.connectedPeers == [bob] && bobSession.connectedPeers == [alice] })
        try aliceSession.send(Data("over custom discovery".utf8), toPeers: [bob], with: .reliable)
        #expect(await soon { bobLog.snapshot().data.first?.1 == Data("over custom discovery".utf8) })
        // Data meant for someone else is refused, with the reason.
        // Carol's fingerprint is below Alice's, so Carol dials (and presents the ticket Alice issued for Bob).
        var carol = MCPeerID(displayName: "Carol")
        while !carol.fingerprint.bytes.lexicographicallyPrecedes(alice.fingerprint.bytes) {
            carol = MCPeerID(displayName: "Carol")
        }
        let carolSession = MCSession(peer: carol)
        let carolLog = Recorder("Carol")
        carolSession.delegate = carolLog
        defer { carolSession.disconnect() }
        carolSession.connectPeer(aliceAsBobSeesHer, withNearbyConnectionData: forBob)
        #expect(await soon { carolSession.disconnectReason(for: alice) != nil })
        guard case .security(let reason) = carolSession.disconnectReason(for: alice) else {
            Issue.record("expected a refusal, got \(String(describing: carolSession.disconnectReason(for: alice)))")
            return
        }
        #expect(reason.contains("connection ticket"), "\(reason)")  // used up by Bob already
    }
}

extension Recorder {
    /// A completion handler's result.
    final class Completion: @unchecked Sendable {
        private let lock = NSLock()
        private var value: String??
        var result: String?? { lock.withLock { value } }
        var error: (any Error)?
        func finish(_ error: (any Error)?) {
            lock.withLock {
                self.error = error
                value = .some(error.map { "\($0)" })
            }
        }
    }
}
