import Foundation
import NetLab
import Testing

/// `multipeer chat` across lab hosts, one process per peer: invitations with every outcome, meshes of 3 and 16
/// peers with all-to-all traffic, departures.
///
/// Contract: one event per line: `found NAME FP`, `invited NAME`, `accepted NAME`, `declined NAME: REASON`,
/// `timed out NAME`, `refused NAME: REASON`, `unreachable NAME: REASON`, `invitation from NAME code NNNNNN: CONTEXT`,
/// `connected NAME`, `disconnected NAME: REASON`, `message NAME: TEXT`; input lines `/invite`, `/accept`,
/// `/decline`, `/to`, `/quit`, anything else sent to every member; end of input leaves.
@Suite(.tags(.needsCLI), .serialized, .oneLabAtATime)
struct SessionEndToEndTests {
    static let service = "mp-chat-e2e"

    static func chat(_ lab: NetLab, host: Int, name: String, _ options: [String] = []) throws -> LabProcess {
        try lab.spawn(
            host: host, try MultipeerBinary.require(),
            ["chat", service, "--name", name, "--interface", NetLab.interfaceName] + options, interactive: true)
    }

    /// The library's own timeouts (connection set-up, invitation, silence) stretched by the sanitizer factor, for
    /// crowds of sanitized processes on two cores; nothing in a normal build, which keeps the defaults.
    static var stretchedTimeouts: [String] {
        guard TestTime.factor > 1 else { return [] }
        let factor = TestTime.factor
        return [
            "--connect-timeout", "\(15 * factor)", "--timeout", "\(30 * factor)", "--silence-timeout", "\(6 * factor)",
        ]
    }

    /// The first line of `process` that begins with the words `prefix` (see ``line(_:begins:)``), waiting for it
    /// up to `timeout`; records an issue and returns nil when none came.
    static func expectLine(
        _ process: LabProcess, _ prefix: String, within timeout: Duration = .seconds(15),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> String? {
        await expectLine(
            process, prefix, by: ContinuousClock.now + TestTime.scaled(timeout), sourceLocation: sourceLocation)
    }

    /// As ``expectLine(_:_:within:sourceLocation:)``, waiting until `deadline` (already stretched).
    static func expectLine(
        _ process: LabProcess, _ prefix: String, by deadline: ContinuousClock.Instant,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> String? {
        // Any line so far counts: events of different sources (an invitation's outcome, the session's state)
        // may come in either order.
        var line = process.lines.first { Self.line($0, begins: prefix) }
        while line == nil, ContinuousClock.now < deadline, process.exitStatus == nil {
            try? await Task.sleep(for: .milliseconds(20))
            line = process.lines.first { Self.line($0, begins: prefix) }
        }
        if line == nil {
            Issue.record(
                "no line starting '\(prefix)' from \(process.commandLine): \(process.lines) \(process.standardError)",
                sourceLocation: sourceLocation)
        }
        return line
    }

    /// Whether an event line begins with `prefix` where a word ends: "connected Peer1" is said by "connected Peer1"
    /// and by "declined Peer1: busy" for "declined Peer1", never by "connected Peer10" (in a crowd, names begin with
    /// other names).
    static func line(_ line: String, begins prefix: String) -> Bool {
        guard line.hasPrefix(prefix) else { return false }
        guard let last = prefix.last, last.isLetter || last.isNumber else { return true }
        guard let next = line.dropFirst(prefix.count).first else { return true }
        return !(next.isLetter || next.isNumber)
    }

    @Test func anExpectedLineNamesThePeerItSaysNotOneWhoseNameBeginsTheSame() {
        // "connected Peer1" is not said by "connected Peer10": the crowd of 16 took a peer's "connected Peer10" for
        // its "connected Peer1" and wrote its lines while Peer1 was not yet a member there; the chat sent them to the
        // members it had, Peer1 never got them, and the test counted them lost.
        #expect(!Self.line("connected Peer10", begins: "connected Peer1"))
        #expect(!Self.line("disconnected Peer15: left", begins: "disconnected Peer1"))
        #expect(Self.line("connected Peer1", begins: "connected Peer1"))
        #expect(Self.line("declined Alpha: not now", begins: "declined Alpha"))
        #expect(Self.line("found Alpha 4f2a-9c0d", begins: "found Alpha"))
        #expect(Self.line("invitation from Bravo code 123456: lunch?", begins: "invitation from Bravo code "))
        #expect(Self.line("refused Alpha: the session is full", begins: "refused Alpha: "))
    }

    @Test(.requires(.netLab, .discoveryCLI)) func inviteAcceptMessagesAndLeaving() async throws {
        try await withNetLab(hosts: 2) { lab in
            let alpha = try Self.chat(lab, host: 0, name: "Alpha", ["--accept", "all"])
            let bravo = try Self.chat(lab, host: 1, name: "Bravo", ["--invite", "Alpha", "--context", "lunch?"])
            let invitation = await Self.expectLine(alpha, "invitation from Bravo code ")
            #expect(invitation?.hasSuffix(": lunch?") == true, "\(invitation ?? "")")
            #expect(invitation.map { $0.split(separator: " ")[4].count == 7 } == true)  // "NNNNNN:"
            _ = await Self.expectLine(bravo, "accepted Alpha")
            _ = await Self.expectLine(bravo, "connected Alpha")
            _ = await Self.expectLine(alpha, "connected Bravo")
            bravo.writeLine("hello everyone")
            _ = await Self.expectLine(alpha, "message Bravo: hello everyone")
            alpha.writeLine("/to Bravo just you")
            _ = await Self.expectLine(bravo, "message Alpha: just you")
            bravo.closeInput()
            _ = await Self.expectLine(alpha, "disconnected Bravo: left")
            #expect(await bravo.exited(within: .seconds(10)) == 0, "\(bravo.standardError)")
            alpha.writeLine("/quit")
            #expect(await alpha.exited(within: .seconds(10)) == 0, "\(alpha.standardError)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func declineAndTimeoutAreReportedWithReasons() async throws {
        try await withNetLab(hosts: 3) { lab in
            let alpha = try Self.chat(lab, host: 0, name: "Alpha")  // --accept ask
            let bravo = try Self.chat(lab, host: 1, name: "Bravo", ["--invite", "Alpha"])
            _ = await Self.expectLine(alpha, "invitation from Bravo code ")
            alpha.writeLine("/decline Bravo not now")
            let declined = await Self.expectLine(bravo, "declined Alpha")
            #expect(declined == "declined Alpha: not now")
            // Charlie's invitation is never answered: it times out on Charlie's side.
            let charlie = try Self.chat(lab, host: 2, name: "Charlie", ["--invite", "Alpha", "--timeout", "2"])
            _ = await Self.expectLine(alpha, "invitation from Charlie code ")
            _ = await Self.expectLine(charlie, "timed out Alpha", within: .seconds(10))
            #expect(!charlie.lines.contains { $0.hasPrefix("connected") })
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aWrongGroupSecretIsRefusedAndAVanishedPeerIsUnreachable() async throws
    {
        try await withNetLab(hosts: 3) { lab in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-secrets-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let one = directory.appendingPathComponent("one").path
            let two = directory.appendingPathComponent("two").path
            try Data(repeating: 1, count: 32).write(to: URL(fileURLWithPath: one))
            try Data(repeating: 2, count: 32).write(to: URL(fileURLWithPath: two))
            let alpha = try Self.chat(lab, host: 0, name: "Alpha", ["--accept", "all", "--secret-file", one])
            let bravo = try Self.chat(lab, host: 1, name: "Bravo", ["--invite", "Alpha", "--secret-file", two])
            let refused = await Self.expectLine(bravo, "refused Alpha: ")
            #expect(refused?.contains("group") == true, "\(refused ?? "")")
            #expect(!alpha.lines.contains { $0.hasPrefix("connected") })
            // A peer killed after it was found: the invitation cannot reach it.
            let charlie = try Self.chat(lab, host: 2, name: "Charlie", ["--secret-file", one])
            _ = await Self.expectLine(charlie, "found Alpha")
            alpha.signal(SIGKILL)
            _ = await alpha.exited(within: .seconds(5))
            charlie.writeLine("/invite Alpha")
            let unreachable = await Self.expectLine(charlie, "unreachable Alpha: ")
            #expect(unreachable?.contains("refused") == true || unreachable?.contains("connect") == true)
        }
    }

    /// Every peer sends `count` lines to every other; each receiver checks every sender's lines arrived once
    /// and in order; then one peer leaves and every other sees it.
    static func meshTraffic(_ lab: NetLab, peers: [LabProcess], names: [String], count: Int) async throws {
        let meshed = ContinuousClock.now + TestTime.scaled(.seconds(60))
        for (index, peer) in peers.enumerated() {
            for other in names where other != names[index] {
                guard await expectLine(peer, "connected \(other)", by: meshed) != nil else { return }
            }
        }
        for (index, peer) in peers.enumerated() {
            for sequence in 0..<count { peer.writeLine("\(names[index]) \(sequence)") }
        }
        for (index, peer) in peers.enumerated() {
            let expected = (names.count - 1) * count
            let deadline = ContinuousClock.now + TestTime.scaled(.seconds(60))
            var messages: [String] = []
            while ContinuousClock.now < deadline {
                messages = peer.lines.filter { $0.hasPrefix("message ") }
                if messages.count >= expected { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(messages.count == expected, "\(names[index]) got \(messages.count) of \(expected)")
            for sender in names where sender != names[index] {
                let sequence = messages.filter { $0.hasPrefix("message \(sender): ") }.map {
                    Int($0.split(separator: " ").last!)!
                }
                if sequence != Array(0..<count), let from = names.firstIndex(of: sender) {
                    // What both ends saw besides traffic explains a loss (a link replaced, a peer reconnecting).
                    func story(_ process: LabProcess) -> String {
                        let events = process.lines.filter { !$0.hasPrefix("message ") && !$0.hasPrefix("found ") }
                        let errors = process.standardError.split(separator: "\n").map { "stderr: \($0)" }
                        return (events + errors).joined(separator: "\n")
                    }
                    let account: String =
                        "\(sender) → \(names[index]): \(sequence)\n\(sender):\n\(story(peers[from]))\n"
                        + "\(names[index]):\n\(story(peer))"
                    Issue.record(Comment(rawValue: account))
                }
            }
        }
        peers[1].closeInput()
        for (index, peer) in peers.enumerated() where index != 1 {
            _ = await expectLine(peer, "disconnected \(names[1]): left", within: .seconds(15))
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aMeshOfThreeByIntroduction() async throws {
        try await withNetLab(hosts: 3) { lab in
            let names = ["Peer0", "Peer1", "Peer2"]
            let peers = try [
                Self.chat(lab, host: 0, name: "Peer0", ["--invite", "Peer1", "--invite", "Peer2"]),
                Self.chat(lab, host: 1, name: "Peer1", ["--accept", "all"]),
                Self.chat(lab, host: 2, name: "Peer2", ["--accept", "all"]),
            ]
            try await Self.meshTraffic(lab, peers: peers, names: names, count: 20)
        }
    }

    /// Meshes from the invitee's side: every guest invites the host, which accepts them all into its session;
    /// the guests are introduced to each other and everyone hears everyone.
    @Test(.requires(.netLab, .discoveryCLI)) func aMeshOfGuestsWhoAllInvitedTheHost() async throws {
        try await withNetLab(hosts: 4) { lab in
            let names = ["Host", "Guest1", "Guest2", "Guest3"]
            let peers =
                try [Self.chat(lab, host: 0, name: "Host", ["--accept", "all"])]
                + (1..<4).map { try Self.chat(lab, host: $0, name: names[$0], ["--invite", "Host"]) }
            try await Self.meshTraffic(lab, peers: peers, names: names, count: 20)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI), arguments: [6, 16]) func aCrowdAllInvitingEachOther(size: Int) async throws
    {
        try await withNetLab(hosts: size) { lab in
            let names = (0..<size).map { "Peer\($0)" }
            let peers = try names.enumerated().map { index, name in
                try Self.chat(
                    lab, host: index, name: name,
                    ["--accept", "all", "--max-peers", "32"] + Self.stretchedTimeouts
                        + names.filter { $0 != name }.flatMap { ["--invite", $0] })
            }
            try await Self.meshTraffic(lab, peers: peers, names: names, count: 10)
            for peer in peers {
                #expect(
                    !peer.lines.contains { $0.hasPrefix("refused") }, "\(peer.lines.filter { $0.hasPrefix("refused") })"
                )
            }
        }
    }
}
