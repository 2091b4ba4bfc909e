import Foundation
import NetLab
import Testing

/// The four classic Multipeer Connectivity tutorial apps (`Examples/`), written against
/// `import MultipeerConnectivity` with only their UI replaced by lines, as separate processes on lab hosts.
@Suite(.serialized, .oneLabAtATime)
struct TutorialAppsEndToEndTests {
    /// Starts `app` on `host` with a home folder of its own (UserDefaults and identities stay out of root's).
    static func app(_ lab: NetLab, host: Int, _ app: String, _ arguments: [String], home: URL) throws -> LabProcess {
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        return try lab.spawn(
            host: host, try MultipeerBinary.require(named: app), arguments,
            environment: [
                "HOME": home.path, "XDG_CONFIG_HOME": home.appendingPathComponent(".config").path,
                "XDG_DATA_HOME": home.appendingPathComponent(".local/share").path,
                "MULTIPEER_INTERFACE": NetLab.interfaceName,
            ],
            interactive: true)
    }

    /// Waits for a line that satisfies `predicate` (among all lines so far, from the `after`-th on).
    @discardableResult
    static func expect(
        _ process: LabProcess, after: Int = 0, within timeout: Duration = .seconds(20), _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation, where predicate: (String) -> Bool
    ) async -> String? {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while ContinuousClock.now < deadline {
            if let line = process.lines.dropFirst(after).first(where: predicate) { return line }
            if process.exitStatus != nil { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        Issue.record(
            "\(process.commandLine): no line \(what) in \(process.lines.suffix(20)); stderr: \(Self.errors(process))",
            sourceLocation: sourceLocation)
        return nil
    }

    static func expect(
        _ process: LabProcess, _ line: String, after: Int = 0, within timeout: Duration = .seconds(20),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await expect(process, after: after, within: timeout, "'\(line)'", sourceLocation: sourceLocation) { $0 == line }
    }

    /// The end of what `process` wrote on stderr or, when it crashed, the start of the crash report (which
    /// names the crashed thread; its end only lists registers and images).
    static func errors(_ process: LabProcess) -> String {
        let text = process.standardError
        guard let crash = text.range(of: "*** Program crashed") ?? text.range(of: "Fatal error") else {
            return String(text.suffix(2_000))
        }
        return String(text[crash.lowerBound...].prefix(4_000))
    }

    static func scratch() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("mp-tutorials-\(UUID().uuidString)")
    }

    @Test(.requires(.netLab)) func connectedColorsOnFourHostsEveryoneInvitingEveryone() async throws {
        let folder = Self.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withNetLab(hosts: 4) { lab in
            let names = ["Ann", "Ben", "Cat", "Dan"]
            let apps = try names.enumerated().map { index, name in
                try Self.app(lab, host: index, "ConnectedColors", [name], home: folder.appendingPathComponent(name))
            }
            // All start at once, find each other at once and invite each other at once: the race resolves into
            // one mesh where everyone lists the three others.
            for (index, app) in apps.enumerated() {
                let others = names.filter { $0 != names[index] }.joined(separator: ", ")
                await Self.expect(app, "connected: \(others)", within: .seconds(30))
            }
            let before = apps.map { $0.lines.count }
            #expect(apps[1].writeLine("yellow"))
            for (index, app) in apps.enumerated() where index != 1 {
                await Self.expect(app, "color yellow", after: before[index])
            }
            let again = apps.map { $0.lines.count }
            #expect(apps[3].writeLine("teal"))
            for (index, app) in apps.enumerated() where index != 3 {
                await Self.expect(app, "color teal", after: again[index])
            }
            for app in apps { app.closeInput() }
            for app in apps { #expect(await app.exited(within: .seconds(10)) == 0, "\(Self.errors(app))") }
        }
    }

    @Test(.requires(.netLab)) func peerListsAdvertiseAndBrowseStartedAndStoppedAtWill() async throws {
        let folder = Self.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withNetLab(hosts: 2) { lab in
            let ada = try Self.app(lab, host: 0, "PeerLists", ["Ada"], home: folder.appendingPathComponent("a"))
            let bo = try Self.app(lab, host: 1, "PeerLists", ["Bo"], home: folder.appendingPathComponent("b"))
            ada.writeLine("start")
            bo.writeLine("start")
            await Self.expect(ada, "found Bo lists")  // with its discovery info
            await Self.expect(bo, "found Ada lists")
            bo.writeLine("invite Ada")
            await Self.expect(bo, "connected Ada")
            await Self.expect(ada, "connected Bo")
            var mark = bo.lines.count
            bo.writeLine("peers")
            await Self.expect(bo, "peers found: Ada connected: Ada", after: mark)
            // Ada stops advertising and browsing: Bo loses her from discovery but stays connected.
            mark = bo.lines.count
            ada.writeLine("stop")
            await Self.expect(bo, "lost Ada", after: mark)
            mark = bo.lines.count
            bo.writeLine("peers")
            await Self.expect(bo, "peers found:  connected: Ada", after: mark)
            // And starts again: found again.
            mark = bo.lines.count
            ada.writeLine("start")
            await Self.expect(bo, "found Ada lists", after: mark)
            for app in [ada, bo] { app.writeLine("quit") }
            for app in [ada, bo] { #expect(await app.exited(within: .seconds(10)) == 0) }
        }
    }

    @Test(.requires(.netLab)) func aDataSessionWithRequiredEncryptionSendsStringsToEveryConnectedPeer() async throws {
        let folder = Self.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withNetLab(hosts: 3) { lab in
            let names = ["Xia", "Yuri", "Zoe"]
            let apps = try names.enumerated().map { index, name in
                try Self.app(lab, host: index, "DataSession", [name], home: folder.appendingPathComponent(name))
            }
            for (index, app) in apps.enumerated() {
                for other in names where other != names[index] {
                    await Self.expect(app, "connected \(other)", within: .seconds(30))
                }
            }
            for (index, app) in apps.enumerated() { app.writeLine("héllo from \(names[index]) ✓") }
            for (index, app) in apps.enumerated() {
                for other in names where other != names[index] {
                    await Self.expect(app, "\(other): héllo from \(other) ✓")
                }
            }
            // Leaving: the others see it.
            apps[0].writeLine("quit")
            #expect(await apps[0].exited(within: .seconds(10)) == 0)
            await Self.expect(apps[1], "not connected Xia")
            await Self.expect(apps[2], "not connected Xia")
            for app in apps.dropFirst() { app.closeInput() }
            for app in apps.dropFirst() { _ = await app.exited(within: .seconds(10)) }
        }
    }

    @Test(.requires(.netLab)) func chatWithInvitationMessagesDeclineTimeoutHistoryImagesAndAPersistentPeerID()
        async throws
    {
        let folder = Self.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        let amyHome = folder.appendingPathComponent("amy")
        let images = folder.appendingPathComponent("images")
        try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
        try await withNetLab(hosts: 2) { lab in
            var amy = try Self.app(lab, host: 0, "Chat", ["Amy", "--dir", images.path], home: amyHome)
            let bob = try Self.app(lab, host: 1, "Chat", ["Bob"], home: folder.appendingPathComponent("bob"))
            let me = await Self.expect(amy, "me Amy ...") { $0.hasPrefix("me Amy ") }
            let fingerprint = me.map { String($0.dropFirst("me Amy ".count)) } ?? "?"
            await Self.expect(bob, "found Amy \(fingerprint)")
            await Self.expect(amy, "found Bob ...") { $0.hasPrefix("found Bob ") }

            // An invitation with a message, declined: the inviter learns why.
            bob.writeLine("invite Amy lunch at noon?")
            await Self.expect(amy, "invitation from Bob: lunch at noon?")
            amy.writeLine("decline Bob")
            await Self.expect(bob, "not connected Amy: declined: declined")
            // One left unanswered past its 5 s timeout.
            var mark = bob.lines.count
            bob.writeLine("invite Amy are you there?")
            await Self.expect(amy, "invitation from Bob: are you there?")
            await Self.expect(bob, "not connected Amy: timed out", after: mark, within: .seconds(15))
            // One accepted.
            bob.writeLine("invite Amy third time lucky")
            await Self.expect(amy, "invitation from Bob: third time lucky")
            amy.writeLine("accept Bob")
            await Self.expect(bob, "connected Amy")
            await Self.expect(amy, "connected Bob")

            bob.writeLine("say Amy hi Amy")
            await Self.expect(amy, "Bob: hi Amy")
            amy.writeLine("say Bob hello Bob")
            await Self.expect(bob, "Amy: hello Bob")
            // An image as data: a PNG signature and 300,000 bytes.
            let picture = Data(
                [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
                    + (0..<299_992).map { UInt8(truncatingIfNeeded: $0 &* 7) })
            let picturePath = folder.appendingPathComponent("picture.png")
            try picture.write(to: picturePath)
            bob.writeLine("image Amy \(picturePath.path)")
            let saved = await Self.expect(amy, "image from Bob ...") {
                $0.hasPrefix("image from Bob 300000 bytes saved ")
            }
            if let path = saved?.split(separator: " ").last {
                #expect(FileManager.default.contents(atPath: String(path)) == picture)
            }
            mark = amy.lines.count
            amy.writeLine("history Bob")
            await Self.expect(amy, "history Bob: 3 messages", after: mark)
            let history = Array(amy.lines.dropFirst(mark + 1).prefix(3))
            #expect(history == ["< hi Amy", "> hello Bob", "< [image 300000 bytes]"], "\(amy.lines.suffix(5))")

            // Amy restarts: the peer ID archived in UserDefaults brings back the same identity.
            mark = bob.lines.count
            amy.writeLine("quit")
            #expect(await amy.exited(within: .seconds(10)) == 0)
            // She left without a goodbye: Bob's session waits out its reconnection grace (10 s), then says why.
            await Self.expect(bob, after: mark, "not connected Amy: connection lost ...") {
                $0.hasPrefix("not connected Amy: connection lost")
            }
            mark = bob.lines.count
            amy = try Self.app(lab, host: 0, "Chat", ["Amy", "--dir", images.path], home: amyHome)
            await Self.expect(amy, "me Amy \(fingerprint)")
            // Bob invites the same peer (the MCPeerID he found before, equal by fingerprint). Amy quit without a
            // goodbye (the tutorial app exits at once), so until her new announcement reaches Bob his discovery
            // may still hold her old port, or have just lost her: like a person, Bob tries again when an
            // invitation fails.
            let retryUntil = ContinuousClock.now + .seconds(20)
            var invited = false
            while !invited, ContinuousClock.now < retryUntil {
                let bobMark = bob.lines.count
                bob.writeLine("invite Amy welcome back")
                while ContinuousClock.now < retryUntil {
                    if amy.lines.contains("invitation from Bob: welcome back") {
                        invited = true
                        break
                    }
                    let failed = bob.lines.dropFirst(bobMark).contains {
                        $0.hasPrefix("not connected Amy") || $0 == "no peer named Amy"
                    }
                    if failed {
                        try await Task.sleep(for: .milliseconds(300))
                        break
                    }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            #expect(invited, "\(bob.lines.suffix(5))")
            amy.writeLine("accept Bob")
            await Self.expect(bob, "connected Amy", after: mark)
            for app in [amy, bob] { app.writeLine("quit") }
            for app in [amy, bob] { _ = await app.exited(within: .seconds(10)) }
        }
        // The identity Amy kept is in her home, readable by its owner only.
        let identities = amyHome.appendingPathComponent(".local/share/swift-multipeer/identities")
        let files = (try? FileManager.default.contentsOfDirectory(atPath: identities.path)) ?? []
        #expect(files.count == 1, "\(files)")
    }
    /// PeerConnectivity's README usage (Examples/PeerConnectivityDemo) on four hosts: three share a pre-shared key
    /// and connect by themselves (`.automatic`), the fourth holds another key and stays out; events go to everyone
    /// and to one peer; the completion form of sendData reports a delivery and a failure.
    @Test(.requires(.netLab)) func peerConnectivityReadmeUsageWithAPreSharedKey() async throws {
        let folder = Self.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let key = folder.appendingPathComponent("key").path
        let other = folder.appendingPathComponent("other").path
        try Data((0..<32).map { UInt8($0) }).write(to: URL(fileURLWithPath: key))
        try Data(repeating: 0xEE, count: 32).write(to: URL(fileURLWithPath: other))
        try await withNetLab(hosts: 4) { lab in
            let names = ["Ana", "Bea", "Cy"]
            let apps = try names.enumerated().map { index, name in
                try Self.app(
                    lab, host: index, "PeerConnectivityDemo", [name, key], home: folder.appendingPathComponent(name))
            }
            let eve = try Self.app(
                lab, host: 3, "PeerConnectivityDemo", ["Eve", other], home: folder.appendingPathComponent("Eve"))
            for app in apps + [eve] { await Self.expect(app, "started") }
            for (index, app) in apps.enumerated() {
                let others = names.filter { $0 != names[index] }.joined(separator: ",")
                await Self.expect(app, within: .seconds(30), "connected: \(others)") {
                    $0.hasSuffix("connected: \(others)")
                }
            }
            apps[0].writeLine("all hello everyone")
            await Self.expect(apps[1], "event from Ana: hello everyone")
            await Self.expect(apps[2], "event from Ana: hello everyone")
            let mark = apps[0].lines.count
            apps[2].writeLine("to Bea just for Bea")
            await Self.expect(apps[1], "event from Cy: just for Bea")
            apps[0].writeLine("checked Bea ping")
            await Self.expect(apps[0], "delivered to Bea", after: mark)
            // Eve found the others but holds another key: nobody let her in.
            eve.writeLine("peers")
            await Self.expect(eve, "connected: ...") { $0.hasPrefix("connected:  found:") }
            #expect(!apps[0].lines.contains { $0.contains("Eve connected") })
            #expect(!apps[0].lines.contains("event from Cy: just for Bea"))
            // Bea stops: Ana's checked send to her fails with the reason.
            apps[1].writeLine("stop")
            await Self.expect(apps[1], "stopped")
            await Self.expect(apps[0], within: .seconds(20), "Bea gone") { $0.hasPrefix("Bea notConnected") }
            apps[0].writeLine("checked Bea anyone?")
            await Self.expect(apps[0], "failed Bea: ...") { $0.hasPrefix("failed Bea: ") }
            for app in apps + [eve] { app.writeLine("quit") }
            for app in apps + [eve] { #expect(await app.exited(within: .seconds(10)) == 0) }
        }
    }
}
