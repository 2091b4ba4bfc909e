import Foundation
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// Resources between in-process sessions: streamed, verified, saved under safe names inside the folder, cancelled
/// from either side, resumed after a cut link.
@Suite("Session resources", .busy)
struct SessionResourceTests {
    static func folder() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mp-res-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    static func remove(_ paths: String...) {
        for path in paths { try? FileManager.default.removeItem(atPath: path) }
    }

    /// A file of `size` random bytes, drawn in one call (a word at a time took seconds of the shared test
    /// threads for the larger files).
    static func file(size: Int, in directory: String, named name: String = "source.bin") throws -> URL {
        let url = URL(fileURLWithPath: directory).appendingPathComponent(name)
        try Data(SecureRandom.bytes(size)).write(to: url)
        return url
    }

    static func pair(receiverFolder: String) async throws -> (SessionNode, SessionNode) {
        var configuration = SessionConfiguration()
        configuration.resourceDirectory = receiverFolder
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob", configuration: configuration)
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        return (alice, bob)
    }

    static func finished(_ recorder: EventRecorder, count: Int = 1) async -> [Result<URL, SessionError>] {
        for _ in 0..<1000 {
            let done = recorder.all.compactMap { event -> Result<URL, SessionError>? in
                if case .resourceFinished(_, let result) = event { return result }
                return nil
            }
            if done.count >= count { return done }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return []
    }

    @Test func aFileArrivesVerifiedWithProgressOnBothSides() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 20 << 20, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let transfer = try await alice.session.sendResource(at: file, named: "holiday photo.jpg", to: bob.peer)
        let receipt = try await transfer.finished()
        #expect(receipt.size == 20 << 20)
        #expect(receipt.sha256 == SHA256.hash(Array(try Data(contentsOf: file))).hexString)
        #expect(transfer.progress.completedUnitCount == 20 << 20 && transfer.progress.totalUnitCount == 20 << 20)
        let results = await Self.finished(bob.recorder)
        guard case .success(let saved)? = results.first else {
            Issue.record("no file reported: \(results)")
            return
        }
        #expect(saved.path == destination + "/holiday photo.jpg")
        #expect(try Data(contentsOf: saved) == Data(contentsOf: file))
        let started = bob.recorder.all.compactMap { event -> IncomingResource? in
            if case .resourceStarted(let resource) = event { return resource }
            return nil
        }
        #expect(started.first?.name == "holiday photo.jpg" && started.first?.size == 20 << 20)
        #expect(started.first?.progress.completedUnitCount == 20 << 20)
        // Nothing but the file is left in the folder.
        #expect(try FileManager.default.contentsOfDirectory(atPath: destination) == ["holiday photo.jpg"])
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func hostileNamesLandInsideTheFolderUnderSafeNames() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: destination + "/existing.txt"))
        let file = try Self.file(size: 1000, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let names = [
            "../../etc/passwd", "/etc/shadow", String(repeating: "x", count: 10_000) + ".txt", "a\nb\u{1b}[31mred\u{7}",
            "existing.txt", "..", "C:\\Windows\\system32.dll",
        ]
        for name in names {
            _ = try await alice.session.sendResource(at: file, named: name, to: bob.peer).finished()
        }
        let results = await Self.finished(bob.recorder, count: names.count)
        let saved = results.compactMap { try? $0.get().path }
        #expect(saved.count == names.count)
        for path in saved {
            #expect(path.hasPrefix(destination + "/"), "\(path)")
            let name = String(path.dropFirst(destination.count + 1))
            #expect(!name.contains("/") && !name.hasPrefix(".") && name.utf8.count <= 200, "\(name)")
            #expect(!name.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "\(name)")
        }
        #expect(saved[0].hasSuffix("/passwd") && saved[1].hasSuffix("/shadow"))
        #expect(saved[2].hasSuffix("/" + String(repeating: "x", count: 200)))  // cut to 512 bytes on the wire, then 200
        #expect(saved[4].hasSuffix("/existing (2).txt"))
        #expect(saved[5].hasSuffix("/resource"))
        #expect(try String(contentsOfFile: destination + "/existing.txt", encoding: .utf8) == "keep me")
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func cancellingOnEitherSideEndsBothWithTheReasonAndLeavesNoPartialFile() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 64 << 20, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        // The sender cancels.
        let first = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        #expect(await waitUntil { first.progress.completedUnitCount > 0 })
        first.progress.cancel()
        await #expect(throws: SessionError.self) { try await first.finished() }
        let afterSender = await Self.finished(bob.recorder)
        guard case .failure(let error)? = afterSender.first else {
            Issue.record("the receiver did not see the cancellation: \(afterSender)")
            return
        }
        #expect(error.reason.contains("cancelled"), "\(error.reason)")
        // The receiver cancels.
        let second = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        #expect(
            await waitUntil {
                bob.recorder.all.filter { if case .resourceStarted = $0 { true } else { false } }.count == 2
            })
        let incoming = bob.recorder.all.compactMap { event -> IncomingResource? in
            if case .resourceStarted(let resource) = event { return resource }
            return nil
        }.last!
        #expect(await waitUntil { incoming.progress.completedUnitCount > 0 })
        incoming.progress.cancel()
        do {
            _ = try await second.finished()
            Issue.record("the sender's transfer succeeded after the receiver cancelled")
        } catch {
            #expect(error.reason.contains("cancelled by the receiver"), "\(error.reason)")
        }
        #expect(
            await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: destination))?.isEmpty == true })
        #expect(await waitUntil { alice.session.resources.activeCount == 0 && bob.session.resources.activeCount == 0 })
        await alice.shutdown()
        await bob.shutdown()
    }

    /// The receiver reported Alice's transfer cancelled by her (not her gone), and keeps no file and no transfer.
    static func expectCancelledBySender(_ bob: SessionNode, folder: String) async {
        let results = await finished(bob.recorder)
        guard case .failure(let error)? = results.first else {
            Issue.record("the receiver did not see the cancellation: \(results)")
            return
        }
        #expect(error.reason == "Alice cancelled: cancelled by the sender", "\(error.reason)")
        #expect(await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: folder))?.isEmpty == true })
        #expect(await waitUntil { bob.session.resources.activeCount == 0 })
    }

    /// A sender cancelling the moment it offered, then leaving the session (a command-line tool on Ctrl-C): the
    /// cancellation is on the link before the transfer ends (so leaving cannot cut it off), and the receiver
    /// handles it after the offer it follows (not before, finding nothing); the receiver reports the transfer
    /// cancelled, not the peer gone, and keeps no partial file.
    @Test func aCancellationRightAfterTheOfferReachesTheReceiverBeforeTheSenderLeaves() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 8 << 20, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let transfer = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        transfer.progress.cancel()
        await #expect(throws: SessionError.self) { try await transfer.finished() }
        await alice.session.disconnect()
        await Self.expectCancelledBySender(bob, folder: destination)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A progress the caller gave, cancelled before the offer went out (the facade's `Progress`, cancelled by the
    /// app at once): the cancellation follows the offer on the link, so the receiver reports it instead of keeping
    /// a transfer that waits for data until the sender leaves; no byte is streamed.
    @Test func aProgressCancelledBeforeItsOfferWentOutCancelsOnTheReceiverToo() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 8 << 20, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let progress = Progress(totalUnitCount: 1)
        progress.cancel()
        let transfer = try await alice.session.sendResource(
            at: file, named: "big.bin", to: bob.peer, progress: progress)
        await #expect(throws: SessionError.self) { try await transfer.finished() }
        await Self.expectCancelledBySender(bob, folder: destination)
        #expect(alice.session.resources.resumedFrom.isEmpty)
        #expect(await waitUntil { alice.session.resources.activeCount == 0 })
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test func aTransferCutByADroppedLinkResumesAndCompletesVerified() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let size = 96 << 20
        let file = try Self.file(size: size, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let transfer = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        #expect(await waitUntil(.seconds(60)) { transfer.progress.completedUnitCount > Int64(size / 4) })
        await alice.session.memberLink(bob.identity.fingerprint)?.connection.abort()
        let receipt = try await transfer.finished()
        #expect(receipt.sha256 == SHA256.hash(Array(try Data(contentsOf: file))).hexString)
        #expect(
            alice.session.resources.resumedFrom.contains { $0 >= UInt64(size / 4) },
            "\(alice.session.resources.resumedFrom)")
        let results = await Self.finished(bob.recorder)
        #expect((try? results.first?.get())?.path == destination + "/big.bin")
        await alice.shutdown()
        await bob.shutdown()
    }

    /// The sender dies mid-transfer and comes back as a new incarnation within the receiver's grace: it knows
    /// nothing of the file any more, so the receiver fails it with the reason and keeps no partial file (before,
    /// the transfer stayed open for good and its partial file with it).
    @Test func aFileFromASenderThatRestartedFailsAndLeavesNothingBehind() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let size = 96 << 20
        let file = try Self.file(size: size, in: source)
        var configuration = SessionConfiguration()
        configuration.reconnectGrace = .zero
        let alice = try await SessionNode("Alice", configuration: configuration)
        var receiving = SessionConfiguration()
        receiving.resourceDirectory = destination
        let bob = try await SessionNode("Bob", configuration: receiving)
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let transfer = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        #expect(await waitUntil(.seconds(60)) { transfer.progress.completedUnitCount > Int64(size / 8) })
        // Alice's process dies without a word (Bob waits for it within his grace), and comes back as a new one.
        await bob.session.memberLink(alice.identity.fingerprint)?.connection.abort()
        #expect(await bob.recorder.wait { $0.hasPrefix("Alice reconnecting") } != nil)
        #expect(await alice.recorder.wait { $0.hasPrefix("Bob notConnected") } != nil)
        await alice.shutdown()
        let reborn = try await HandDrivenPeer(alice.identity, to: bob)
        #expect(try await reborn.inviteAndJoin())
        let results = await Self.finished(bob.recorder)
        guard case .failure(let error) = results.first else {
            Issue.record("the transfer did not fail: \(results)")
            await bob.shutdown()
            return
        }
        #expect(error.reason.contains("restarted"), "\(error.reason)")
        let left = try FileManager.default.contentsOfDirectory(atPath: destination)
        #expect(left.isEmpty, "\(left)")
        await bob.shutdown()
    }

    /// A receiver killed mid-transfer leaves its partial file; the next session on the folder removes it, but never
    /// the partial file of a transfer another process is running (it holds it locked) or one just made.
    @Test func partialFilesOfDeadTransfersAreSweptAndLiveOnesKept() throws {
        let folder = try Self.folder()
        defer { Self.remove(folder) }
        func make(_ name: String, age: Int) -> Int32 {
            let path = folder + "/" + name
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            var times = [
                timespec(tv_sec: time(nil) - age, tv_nsec: 0), timespec(tv_sec: time(nil) - age, tv_nsec: 0),
            ]
            _ = futimens(fd, &times)
            return fd
        }
        let dead = make(".mp-partial-dead", age: 30)
        close(dead)
        let live = make(".mp-partial-live", age: 30)
        #expect(flock(live, LOCK_EX | LOCK_NB) == 0)
        let fresh = make(".mp-partial-fresh", age: 0)
        close(fresh)
        let other = make("photo.jpg", age: 30)
        close(other)
        #expect(ResourceCenter.sweepPartialFiles(in: folder) == 1)
        let left = Set(try FileManager.default.contentsOfDirectory(atPath: folder))
        #expect(left == [".mp-partial-live", ".mp-partial-fresh", "photo.jpg"])
        close(live)
    }

    @Test func namesAreSanitized() {
        #expect(ResourceName.sanitize("../../etc/passwd") == "passwd")
        #expect(ResourceName.sanitize("/") == "resource")
        #expect(ResourceName.sanitize("...hidden") == "hidden")
        #expect(ResourceName.sanitize("a\u{0}b\nc") == "abc")
        #expect(ResourceName.sanitize("dir\\file.txt") == "file.txt")
        let long = ResourceName.sanitize(String(repeating: "é", count: 500) + ".jpeg")
        #expect(long.utf8.count <= 200 && long.hasSuffix(".jpeg"))
        #expect(ResourceName.candidate("photo.jpg", 3) == "photo (3).jpg")
        #expect(ResourceName.candidate("README", 2) == "README (2)")
    }
}

extension SessionResourceTests {
    @Test func aSenderThatDiesMidTransferFailsTheIncomingResourceAfterTheGrace() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 64 << 20, in: source)
        var configuration = SessionConfiguration()
        configuration.resourceDirectory = destination
        configuration.reconnectGrace = .seconds(1)
        let alice = try await SessionNode("Alice")
        let bob = try await SessionNode("Bob", configuration: configuration)
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        let transfer = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
        #expect(await waitUntil { transfer.progress.completedUnitCount > 0 })
        alice.network.loop.shutdown()
        let results = await Self.finished(bob.recorder)
        guard case .failure(let error)? = results.first else {
            Issue.record("no failure reported: \(results) \(bob.recorder.states)")
            return
        }
        #expect(error.reason.contains("not back within"), "\(error.reason)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: destination).isEmpty)
        await bob.shutdown()
    }
}

extension SessionResourceTests {
    /// Descriptors of this process open on files under `directory`.
    static func descriptors(under directory: String) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") }
            .filter { $0.hasPrefix(directory) }
    }

    @Test func failedTransfersLeaveNoDescriptorOpenOnTheFolder() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 32 << 20, in: source)
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        for _ in 0..<3 {
            let transfer = try await alice.session.sendResource(at: file, named: "big.bin", to: bob.peer)
            #expect(await waitUntil { transfer.progress.completedUnitCount > 0 })
            transfer.progress.cancel()
            _ = try? await transfer.finished()
        }
        #expect(await waitUntil { bob.session.resources.activeCount == 0 })
        // The partial file is removed at once and closed once its writer is done with it.
        #expect(
            await waitUntil { Self.descriptors(under: destination).isEmpty }, "\(Self.descriptors(under: destination))")
        #expect(Self.descriptors(under: source).isEmpty, "\(Self.descriptors(under: source))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: destination).isEmpty)
        await alice.shutdown()
        await bob.shutdown()
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "needs /usr/bin/python3"))
    func anHTTPURLIsFetchedThenSent() async throws {
        let (source, destination) = (try Self.folder(), try Self.folder())
        defer { Self.remove(source, destination) }
        let file = try Self.file(size: 3 << 20, in: source, named: "served.bin")
        // A local HTTP server on 127.0.0.1 only, on a port the kernel picks (a random one was seen taken in a CI
        // run: every fetch was refused), which it prints once it listens.
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", source]
        let output = Pipe()
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        let serverExit = ProcessExit(server)
        try server.run()
        defer {
            // Process.terminate() was seen to leave the server running here: kill it by its pid.
            kill(server.processIdentifier, SIGKILL)
            serverExit.wait()
        }
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        let banner = try await offPool {
            var text = ""
            while !text.contains("\n") {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return text
        }
        let words = banner.split(separator: " ")
        let port = try #require(
            words.firstIndex(of: "port").flatMap { $0 + 1 < words.count ? Int(words[$0 + 1]) : nil },
            "the server printed no port: \(banner)")
        let (alice, bob) = try await Self.pair(receiverFolder: destination)
        let url = URL(string: "http://127.0.0.1:\(port)/served.bin")!
        var transfer: ResourceTransfer?
        var lastError: (any Error)?
        let deadline = ContinuousClock.now + TestTime.scaled(.seconds(30))
        while transfer == nil && ContinuousClock.now < deadline {
            do {
                transfer = try await alice.session.sendResource(at: url, named: "fetched.bin", to: bob.peer)
            } catch {
                lastError = error
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        let receipt = try await #require(
            transfer, "the local server never served the file: \(String(describing: lastError))"
        )
        .finished()
        #expect(receipt.sha256 == SHA256.hash(Array(try Data(contentsOf: file))).hexString)
        let results = await Self.finished(bob.recorder)
        #expect((try? results.first?.get())?.lastPathComponent == "fetched.bin")
        let missing = try? await alice.session.sendResource(
            at: URL(string: "http://127.0.0.1:\(port)/nothing-here")!, named: "x", to: bob.peer)
        #expect(missing == nil, "a 404 is refused before anything is offered")
        await alice.shutdown()
        await bob.shutdown()
    }
}

extension SessionResourceTests {
    /// A receiving center whose answers are tallied ("refused" by reason, "started"), and Mallory, a member
    /// sending it whatever she likes.
    static func centerFacingMallory(_ destination: String) throws -> (ResourceCenter, Tally, Peer) {
        let center = ResourceCenter(directory: destination, maximumSize: 1 << 20, logger: MultipeerLogging.disabled)
        let answers = Tally()
        center.attach(
            ResourceCenter.Hooks(
                control: { _, message in
                    switch message {
                    case .resourceResult(_, false, let reason): answers.add(receiver: "refused", sender: reason, 0)
                    case .resourceResume: answers.add(receiver: "started", sender: "", 0)
                    default: break
                    }
                    return true
                },
                openStream: { _, _ throws(SessionError) in throw SessionError(.notConnected, "test") },
                emit: { _ in }))
        let mallory = Peer(
            identity: .proven(try PeerIdentity.generate(displayName: "Mallory").fingerprint), displayName: "Mallory")
        return (center, answers, mallory)
    }

    /// While one of Mallory's offers is slow (held here), what she sends next waits in her chain, at most
    /// ``ResourceCenter/maximumWaitingPerPeer`` messages: cancellations beyond are dropped, offers beyond are
    /// refused with the reason, and her departure still takes its place; once the slow one is done the chain runs
    /// in order and is gone.
    @Test func aPeerFloodingCancelsAndOffersBehindASlowOfferIsHeldToTheChainsBound() async throws {
        let destination = try Self.folder()
        defer { Self.remove(destination) }
        let (center, answers, mallory) = try Self.centerFacingMallory(destination)
        let fp = mallory.claimedFingerprint
        let (gate, release) = AsyncStream<Void>.makeStream()
        center.afterEarlierOffers(from: fp) {
            for await _ in gate { break }
        }
        let hash = [UInt8](repeating: 0, count: 32)
        for _ in 0..<1000 { center.handle(.resourceCancel(id: SecureRandom.bytes(16), reason: "x"), from: mallory) }
        for _ in 0..<100 {
            center.handle(.resourceOffer(id: SecureRandom.bytes(16), name: "x", size: 10, sha256: hash), from: mallory)
        }
        #expect(center.waitingOfferCount(from: fp) == ResourceCenter.maximumWaitingPerPeer)
        #expect(await waitUntil { (answers.table["refused"]?.values.first?.count ?? 0) == 100 })
        #expect(answers.table["refused"]?.keys.sorted() == ["too many offers are waiting here; try again later"])
        center.peerGone(fp, reason: "Mallory: left")
        #expect(center.waitingOfferCount(from: fp) == ResourceCenter.maximumWaitingPerPeer + 1)
        release.yield()
        #expect(await waitUntil { center.waitingOfferCount(from: fp) == 0 })
        #expect(answers.table["started"] == nil)
        #expect(center.activeCount == 0)
        center.shutdown(reason: "test over")
    }

    /// The bounds a sending member meets: a resource larger than the receiver accepts, and more transfers from
    /// one peer than it runs at once, are refused with the reason before any file is created.
    @Test func offersBeyondTheLimitsAreRefusedWithTheirReason() async throws {
        let destination = try Self.folder()
        defer { Self.remove(destination) }
        let (center, answers, mallory) = try Self.centerFacingMallory(destination)
        let hash = [UInt8](repeating: 0, count: 32)
        center.handle(
            .resourceOffer(id: SecureRandom.bytes(16), name: "huge", size: 1 << 21, sha256: hash), from: mallory)
        for _ in 0..<(ResourceCenter.maximumIncomingPerPeer + 1) {
            center.handle(.resourceOffer(id: SecureRandom.bytes(16), name: "x", size: 10, sha256: hash), from: mallory)
        }
        #expect(await waitUntil { (answers.table["refused"]?.count ?? 0) == 2 })
        let reasons = (answers.table["refused"] ?? [:]).keys.sorted()
        #expect(reasons.contains { $0.contains("accepts at most 1048576") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("too many transfers") }, "\(reasons)")
        #expect(answers.table["started"]?[""]?.count == ResourceCenter.maximumIncomingPerPeer)
        let partials = try FileManager.default.contentsOfDirectory(atPath: destination)
        #expect(partials.count == ResourceCenter.maximumIncomingPerPeer, "\(partials)")
        center.shutdown(reason: "test over")
        #expect(
            await waitUntil { (try? FileManager.default.contentsOfDirectory(atPath: destination))?.isEmpty == true })
    }
}
