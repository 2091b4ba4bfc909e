import Foundation
import MultipeerConnectivity
import MultipeerIO
import TestIsolation
import Testing

@testable import MultipeerConnectivity

extension CompatibilitySuites {
    /// Defects a review found in the facade, each shown fixed by a test that failed (or hung) before.
    @Suite("MultipeerConnectivity facade: reviewed defects", .serialized)
    struct MCFacadeReviewTests {
        init() { FacadeTestSetup.prepare() }

        /// A reply-after-request exchange over the pipe between an application's stream and the native stream:
        /// 20,000 rounds, each waiting for the other side, so a lost wake-up hangs it.
        @Test func theStreamPipeNeverLosesAWakeUp() async throws {
            let pipe = StreamPipe(capacity: 2)
            let rounds = 20_000
            let consumer = Task.detached { () -> Int in
                var total = 0
                while let chunk = await pipe.takeAll() { total += chunk.count }
                return total
            }
            let producer = Task.detached {
                var byte: UInt8 = 1
                for _ in 0..<rounds {
                    _ = pipe.write(&byte, count: 1)
                    // Waits until the consumer took it: with a lost wake-up, this never ends.
                    _ = await pipe.waitForRoom(below: 1)
                }
                pipe.end()
            }
            let finished = await withTaskGroup(of: Bool.self) { group in
                group.addTask {
                    await producer.value
                    return true
                }
                group.addTask {
                    try? await Task.sleep(for: .seconds(60))
                    return false
                }
                let first = await group.next()!
                group.cancelAll()
                return first
            }
            #expect(finished, "the exchange stalled")
            if finished { #expect(await consumer.value == rounds) }
        }

        /// A stream scheduled on a run loop gets its events while the loop sleeps (no other source wakes it).
        @Test func streamEventsWakeASleepingRunLoop() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            let output = try pair.bobSession.startStream(withName: "events", toPeer: pair.alice)
            output.open()
            #expect(await soon { !pair.aliceLog.streams.isEmpty })
            nonisolated(unsafe) let input = try #require(pair.aliceLog.streams.first?.0)
            let watcher = StreamWatcher()
            let started = Lock(false)
            let thread = Thread {
                let loop = RunLoop.current
                input.delegate = watcher
                input.schedule(in: loop, forMode: .default)
                input.open()
                started.withLock { $0 = true }
                // A far timer keeps the loop alive without waking it.
                loop.add(Timer(timeInterval: 3_600, repeats: false) { _ in }, forMode: .default)
                while !watcher.done.withLock({ $0 }) {
                    _ = loop.run(mode: .default, before: Date(timeIntervalSinceNow: 30))
                }
            }
            thread.start()
            #expect(await soon { started.withLock { $0 } })
            let sent = ContinuousClock.now
            _ = output.write([1, 2, 3], maxLength: 3)
            #expect(await soon(within: .seconds(5)) { watcher.events.withLock { $0.contains(.hasBytesAvailable) } })
            #expect(ContinuousClock.now - sent < .seconds(2))
            output.close()
            #expect(await soon(within: .seconds(5)) { watcher.events.withLock { $0.contains(.endEncountered) } })
            watcher.done.withLock { $0 = true }
        }

        @Test func dataLongerThanAMessageIsRefusedAtOnceWithTheWayOut() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            do {
                try pair.bobSession.send(Data(count: 5 << 20), toPeers: [pair.alice], with: .reliable)
                Issue.record("5 MiB were accepted")
            } catch let error as MCError {
                #expect(error.code == .invalidParameter && error.reason.contains("sendResource"), "\(error.reason)")
            }
            // Just under the limit goes through.
            try pair.bobSession.send(Data(count: (4 << 20) - 9), toPeers: [pair.alice], with: .reliable)
            #expect(await soon { pair.aliceLog.snapshot().data.first?.1.count == (4 << 20) - 9 })
        }

        @Test func afterDisconnectNoPeerIsConnectedAndEachIsReportedGone() async throws {
            let pair = Pair()
            defer { pair.stop() }
            #expect(await pair.connect())
            pair.bobSession.disconnect()
            #expect(pair.bobSession.connectedPeers.isEmpty)  // at once
            #expect(throws: MCError.self) {
                try pair.bobSession.send(Data([1]), toPeers: [pair.alice], with: .reliable)
            }
            #expect(await soon { pair.bobLog.snapshot().states.last == "Alice notConnected" })
        }

        @Test func invitingAPeerTheBrowserNoLongerKnowsEndsNotConnectedAsUnreachable() async throws {
            let pair = Pair()
            defer { pair.stop() }
            pair.browser.startBrowsingForPeers()
            // A peer nobody advertises (its ID came from elsewhere).
            let stranger = try #require(
                try NSKeyedUnarchiver.unarchivedObject(
                    ofClass: MCPeerID.self,
                    from: try NSKeyedArchiver.archivedData(
                        withRootObject: MCPeerID(displayName: "Ghost"), requiringSecureCoding: true)))
            pair.browser.invitePeer(stranger, to: pair.bobSession, withContext: nil, timeout: 5)
            #expect(await soon { pair.bobLog.snapshot().states == ["Ghost connecting", "Ghost notConnected"] })
            guard case .unreachable(let reason)? = pair.bobLog.snapshot().reasons.first ?? nil else {
                Issue.record("\(pair.bobLog.snapshot().reasons)")
                return
            }
            #expect(reason.contains("not (or no longer) found"), "\(reason)")
        }

        /// One member that stops reading holds back only the data meant for it.
        @Test func aPeerThatStopsReadingDoesNotHoldBackTheOthers() async throws {
            let service = FacadeTestSetup.serviceType()
            let alice = MCPeerID(displayName: "Alice")
            let aliceSession = MCSession(peer: alice)
            let aliceLog = Recorder("Alice")
            aliceSession.delegate = aliceLog
            let stuck = BlockingRecorder("Bob")
            let others = [Guest("Bob", recorder: stuck, service: service), Guest("Carol", service: service)]
            let browser = MCNearbyServiceBrowser(peer: alice, serviceType: service)
            browser.delegate = aliceLog
            browser.startBrowsingForPeers()
            defer {
                stuck.release()
                browser.stopBrowsingForPeers()
                aliceSession.disconnect()
                for other in others { other.stop() }
            }
            #expect(await soon { aliceLog.snapshot().found.count == 2 })
            for other in others { browser.invitePeer(other.id, to: aliceSession, withContext: nil, timeout: 10) }
            #expect(await soon { aliceSession.connectedPeers.count == 2 })
            let (bob, carol) = (others[0], others[1])
            // Bob's application stops taking data at the first message: 40 MiB for him back up (through the
            // native inbox, the conversation's replay buffer and the flow-control windows into his queue here).
            let chunk = Data(count: 1 << 20)
            for _ in 0..<40 { try aliceSession.send(chunk, toPeers: [bob.id], with: .reliable) }
            try await Task.sleep(for: .milliseconds(500))
            // Sending on, without waiting, ends in `unavailable` once 64 MiB wait for him unconfirmed: the bound is
            // the engine's replay buffer, and nothing else queues.
            var sent = 40
            var refusal: MCError?
            while refusal == nil, sent < 400 {
                do {
                    try aliceSession.send(chunk, toPeers: [bob.id], with: .reliable)
                    sent += 1
                } catch let error as MCError {
                    refusal = error
                }
            }
            #expect(refusal?.code == .unavailable, "\(String(describing: refusal))")
            #expect(sent >= MCSession.maximumQueuedBytes >> 20, "\(sent) MiB")
            // Carol still gets hers at once.
            try aliceSession.send(Data("hi Carol".utf8), toPeers: [carol.id], with: .reliable)
            #expect(
                await soon(within: .seconds(5)) { carol.recorder.snapshot().data.first?.1 == Data("hi Carol".utf8) })
        }
    }
}

/// Records stream events.
final class StreamWatcher: NSObject, StreamDelegate, Sendable {
    let events = Lock<[Stream.Event]>([])
    let done = Lock(false)
    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        events.withLock { $0.append(eventCode) }
        if eventCode == .hasBytesAvailable, let input = aStream as? InputStream {
            var buffer = [UInt8](repeating: 0, count: 16)
            while input.hasBytesAvailable { _ = input.read(&buffer, maxLength: 16) }
        }
    }
}

/// A recorder whose application blocks in its first `didReceive data` until released.
final class BlockingRecorder: Recorder, @unchecked Sendable {
    private let gate = DispatchSemaphore(value: 0)
    private let released = Lock(false)

    func release() {
        guard
            released.withLock({ done in
                defer { done = true }; return !done
            })
        else { return }
        for _ in 0..<1_000 { gate.signal() }
    }

    override func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        if !released.withLock({ $0 }) { gate.wait() }
        super.session(session, didReceive: data, fromPeer: peerID)
    }
}

extension CompatibilitySuites {
    @Suite("MultipeerConnectivity facade: limits and rules", .serialized)
    struct MCFacadeLimitTests {
        init() { FacadeTestSetup.prepare() }

        /// Apple's 8 by default; more (or fewer) on request, and a full session says so.
        @Test func aSessionHoldsAtMostItsMaximumNumberOfPeersAndSaysWhyWhenFull() async throws {
            let service = FacadeTestSetup.serviceType()
            let host = MCPeerID(displayName: "Host")
            let session = MCSession(
                peer: host, securityIdentity: nil, encryptionPreference: .required, maximumNumberOfPeers: 3)
            #expect(session.maximumNumberOfPeers == 3)
            #expect(
                MCSession(peer: MCPeerID(displayName: "Default")).maximumNumberOfPeers == kMCSessionMaximumNumberOfPeers
            )
            let log = Recorder("Host")
            session.delegate = log
            let guests = ["G1", "G2", "G3"].map { Guest($0, service: service) }
            let browser = MCNearbyServiceBrowser(peer: host, serviceType: service)
            browser.delegate = log
            browser.startBrowsingForPeers()
            defer {
                browser.stopBrowsingForPeers()
                session.disconnect()
                for guest in guests { guest.stop() }
            }
            #expect(await soon { log.snapshot().found.count == 3 })
            // One after the other: the second guest's advertiser used to answer "already connected" because a
            // session of another identity in the same process (the first guest's) had the host as a member.
            browser.invitePeer(guests[0].id, to: session, withContext: nil, timeout: 10)
            #expect(await soon { session.connectedPeers.count == 1 })
            browser.invitePeer(guests[1].id, to: session, withContext: nil, timeout: 10)
            #expect(await soon { session.connectedPeers.count == 2 })
            browser.invitePeer(guests[2].id, to: session, withContext: nil, timeout: 10)
            #expect(await soon { log.snapshot().states.contains("G3 notConnected") })
            #expect(session.connectedPeers.count == 2)
            guard case .security(let reason)? = session.disconnectReason(for: guests[2].id) else {
                Issue.record("\(String(describing: session.disconnectReason(for: guests[2].id)))")
                return
            }
            #expect(reason.contains("full"), "\(reason)")
        }

        /// Where Apple raises an exception, the process stops with the rule: an example app given a 64-byte name.
        @Test(.ownThread) func aDisplayNameBeyond63BytesStopsTheProcessNamingTheRule() throws {
            let binary = CompatibilitySuites.MCSourceCompatibilityTests.products.appendingPathComponent("PeerLists")
                .path
            try #require(FileManager.default.isExecutableFile(atPath: binary), "build the package first")
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("mc-rule-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: home) }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [String(repeating: "n", count: 64)]
            process.environment = ["HOME": home.path, "MULTIPEER_LOOPBACK": "1", "SWIFT_BACKTRACE": "enable=no"]
            let errors = Pipe()
            process.standardError = errors
            process.standardOutput = Pipe()
            process.standardInput = Pipe()
            let text = try process.runToExit {
                String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            }
            #expect(process.terminationStatus != 0)
            #expect(text.contains("MCPeerID(displayName:)") && text.contains("63"), "\(text.prefix(500))")
        }
    }
}
