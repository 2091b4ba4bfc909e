import Foundation
import NetLab
import Testing

/// The `multipeer` tool's front-door commands across lab hosts: `colors` (line mode) and `identity`.
@Suite(.tags(.needsCLI), .serialized, .oneLabAtATime)
struct FrontDoorEndToEndTests {
    /// Waits for a line (the tutorial apps' helper, whose default wait here is 30 s).
    static func expect(
        _ process: LabProcess, after: Int = 0, within timeout: Duration = .seconds(30), _ line: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await TutorialAppsEndToEndTests.expect(
            process, line, after: after, within: timeout, sourceLocation: sourceLocation)
    }

    /// Four instances start at once, all inviting each other; a color picked on one shows on the others, with
    /// who picked it; a text that is not a color is ignored; leaving is seen.
    @Test(.requires(.netLab)) func colorsOnFourHostsShareTheColorAnyonePicks() async throws {
        try await withNetLab(hosts: 4) { lab in
            let names = ["Ann", "Ben", "Cat", "Dan"]
            let apps = try names.enumerated().map { index, name in
                try lab.spawn(
                    host: index, try MultipeerBinary.require(),
                    ["colors", "mp-colors-e2e", "--name", name, "--interface", NetLab.interfaceName],
                    interactive: true)
            }
            for (index, app) in apps.enumerated() {
                for other in names where other != names[index] { await Self.expect(app, "connected \(other)") }
            }
            let marks = apps.map { $0.lines.count }
            #expect(apps[2].writeLine("color teal"))
            await Self.expect(apps[2], after: marks[2], "color teal picked")
            for index in [0, 1, 3] { await Self.expect(apps[index], after: marks[index], "color teal from Cat") }
            #expect(apps[0].writeLine("purple"))
            for index in [1, 2, 3] { await Self.expect(apps[index], "color purple from Ann") }
            apps[3].writeLine("quit")
            #expect(await apps[3].exited(within: .seconds(10)) == 0)
            for index in 0..<3 { await Self.expect(apps[index], "disconnected Dan: left") }
            for app in apps.prefix(3) { app.closeInput() }
            for app in apps.prefix(3) { #expect(await app.exited(within: .seconds(10)) == 0) }
        }
    }

    /// One identity per user: `create` makes it (mode 0600), `show` prints it, every command uses it (a peer
    /// sees the same fingerprint run after run), `--name` renames without a new key, `export` copies it.
    @Test(.requires(.netLab)) func theUsersIdentityIsCreatedShownUsedAndExported() async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("mp-identity-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let data = home.appendingPathComponent("data").path
        let environment = ["XDG_DATA_HOME": data]
        try await withNetLab(hosts: 2) { lab in
            let binary = try MultipeerBinary.require()
            let missing = try lab.run(host: 0, binary, ["identity", "show"], environment: environment)
            #expect(missing.status == 1 && missing.stderr.contains("multipeer identity create"), "\(missing.stderr)")
            let created = try lab.run(
                host: 0, binary, ["identity", "create", "--name", "Ida"], environment: environment)
            #expect(created.status == 0, "\(created.stderr)")
            let lines = created.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first == "name Ida")
            let fingerprint = try #require(lines.first { $0.hasPrefix("fingerprint ") }).dropFirst("fingerprint ".count)
            let file = data + "/swift-multipeer/identity"
            #expect(lines.last == "file \(file)")
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            let again = try lab.run(host: 0, binary, ["identity", "create"], environment: environment)
            #expect(again.status == 1 && again.stderr.contains("--force"), "\(again.stderr)")
            #expect(
                try lab.run(host: 0, binary, ["identity", "show"], environment: environment).stdout == created.stdout)
            // Used by every command: a browser on the other host sees Ida's fingerprint, under the name given.
            let chat = try lab.spawn(
                host: 0, binary, ["chat", "mp-identity-e2e", "--name", "Ida Two", "--interface", NetLab.interfaceName],
                environment: environment, interactive: true)
            let watcher = try lab.spawn(
                host: 1, binary, ["chat", "mp-identity-e2e", "--name", "Watcher", "--interface", NetLab.interfaceName],
                interactive: true)
            await Self.expect(watcher, "found Ida Two \(fingerprint)")
            chat.closeInput()
            watcher.closeInput()
            _ = await chat.exited(within: .seconds(10))
            _ = await watcher.exited(within: .seconds(10))
            let exported = home.appendingPathComponent("backup.identity").path
            let export = try lab.run(host: 0, binary, ["identity", "export", exported], environment: environment)
            #expect(export.status == 0 && export.stdout.contains(String(fingerprint)), "\(export.stderr)")
            let copy = try lab.run(host: 0, binary, ["identity", "show", "--identity", exported])
            #expect(copy.stdout.contains("fingerprint \(fingerprint)"))
            let refused = try lab.run(host: 0, binary, ["identity", "export", exported], environment: environment)
            #expect(refused.status == 1 && refused.stderr.contains("never replaces"))
        }
    }
}

extension FrontDoorEndToEndTests {
    /// Ctrl-C (SIGINT) in the session commands' line mode: the peer leaves with a goodbye (the other side sees
    /// `left`, not a lost link) and the process exits 0.
    @Test(.requires(.netLab), arguments: ["chat", "colors"]) func ctrlCSaysGoodbye(command: String) async throws {
        try await withNetLab(hosts: 2) { lab in
            let binary = try MultipeerBinary.require()
            let service = "mp-bye-\(command)"
            let extra = command == "chat" ? ["--accept", "all"] : []
            let stayer = try lab.spawn(
                host: 0, binary, [command, service, "--name", "Stay", "--interface", NetLab.interfaceName] + extra,
                interactive: true)
            let leaver = try lab.spawn(
                host: 1, binary,
                [command, service, "--name", "Go", "--interface", NetLab.interfaceName]
                    + (command == "chat" ? ["--invite", "Stay"] : []),
                interactive: true)
            await Self.expect(stayer, "connected Go")
            leaver.signal(SIGINT)
            #expect(await leaver.exited(within: .seconds(10)) == 0, "\(leaver.standardError)")
            await Self.expect(stayer, "disconnected Go: left")
            stayer.closeInput()
            #expect(await stayer.exited(within: .seconds(10)) == 0)
        }
    }

    /// `--log-level` and `MULTIPEER_LOG`: the library says what it does on stderr (discovery, connections,
    /// invitations, members), at the level asked for, and nothing without one.
    @Test(.requires(.netLab)) func logLevelsWriteWhatTheLibraryDoesOnStderr() async throws {
        try await withNetLab(hosts: 3) { lab in
            let binary = try MultipeerBinary.require()
            let service = "mp-log-e2e"
            let alpha = try lab.spawn(
                host: 0, binary,
                ["chat", service, "--name", "Alpha", "--interface", NetLab.interfaceName, "--log-level=info"],
                interactive: true)
            let beta = try lab.spawn(
                host: 1, binary,
                ["chat", service, "--name", "Beta", "--accept", "all", "--interface", NetLab.interfaceName],
                environment: ["MULTIPEER_LOG": "debug"], interactive: true)
            let quiet = try lab.spawn(
                host: 2, binary, ["chat", service, "--name", "Quiet", "--interface", NetLab.interfaceName],
                interactive: true)
            _ = await SessionEndToEndTests.expectLine(alpha, "found Beta ", within: .seconds(30))
            _ = await SessionEndToEndTests.expectLine(quiet, "found Beta ", within: .seconds(30))
            alpha.writeLine("/invite Beta")
            await Self.expect(alpha, "connected Beta")
            await Self.expect(beta, "connected Alpha")
            alpha.closeInput()
            await Self.expect(beta, "disconnected Alpha: left")
            beta.closeInput()
            quiet.closeInput()
            for process in [alpha, beta, quiet] { #expect(await process.exited(within: .seconds(10)) == 0) }
            let alphaLog = alpha.standardError
            #expect(alphaLog.contains(" info discovery: found 'Beta'"), "\(alphaLog)")
            #expect(alphaLog.contains(" info connection: ") && alphaLog.contains("connected to 'Beta'"), "\(alphaLog)")
            #expect(alphaLog.contains(" info session: invitation to 'Beta': accepted"), "\(alphaLog)")
            #expect(!alphaLog.contains(" debug "), "info leaves out debug lines: \(alphaLog)")
            let betaLog = beta.standardError
            #expect(betaLog.contains(" debug session: "), "\(betaLog)")
            #expect(betaLog.contains(" info session: 'Alpha' ") && betaLog.contains("notConnected: left"), "\(betaLog)")
            #expect(quiet.standardError.isEmpty, "no level, no log: \(quiet.standardError)")
        }
    }
}

/// The full-screen interfaces, driven through tmux on loopback (what a person sees: `capture-pane`).
@Suite(.tags(.needsCLI), .serialized)
struct FullScreenTests {
    /// Runs tmux with its own server socket, so tests never touch a user's sessions. Spawned and waited for
    /// with posix_spawn/waitpid, its output through a file: the server `new-session` starts keeps whatever
    /// descriptors it inherits, and Foundation's `Process` did not see the client exit here.
    static func tmux(_ socket: String, _ arguments: [String]) throws -> String {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("mp-tmux-out-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output.path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ["tmux", "-S", socket] + arguments
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawnp(&pid, "tmux", &actions, nil, &cArguments, environ)
        guard spawned == 0 else { throw CocoaError(.executableLoad) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        return (try? String(contentsOf: output, encoding: .utf8)) ?? ""
    }

    static func waitFor(
        _ socket: String, _ target: String, within timeout: Duration = .seconds(20), escapes: Bool = false,
        _ predicate: (String) -> Bool
    ) async throws -> String {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while true {
            // The last capture is taken after the deadline: a test process whose threads were all busy for the
            // whole wait (the suite's first seconds) would otherwise judge the screen of its first look.
            let screen = try tmux(socket, ["capture-pane", "-p"] + (escapes ? ["-e"] : []) + ["-t", target])
            if predicate(screen) || ContinuousClock.now >= deadline { return screen }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Waits until the pane shows `text`, and expects it there; returns the screen.
    @discardableResult
    static func expectScreen(
        _ socket: String, _ target: String, showing text: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> String {
        let screen = try await waitFor(socket, target) { $0.contains(text) }
        #expect(screen.contains(text), "\(screen)", sourceLocation: sourceLocation)
        return screen
    }

    /// A folder of the test's own and the path of its tmux server's socket.
    static func scratch() throws -> (URL, String) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-tmux-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return (folder, folder.appendingPathComponent("tmux.sock").path)
    }

    /// Stops the test's tmux server and everything started in it (every process whose command line names the
    /// test's folder: `kill-server` alone was seen to leave the server and its panes running) and removes the folder.
    static func cleanUp(_ folder: URL, _ socket: String) {
        _ = try? tmux(socket, ["kill-server"])
        let marker = Data(folder.path.utf8)
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), pid != getpid(),
                let commandLine = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"),
                commandLine.range(of: marker) != nil
            else { continue }
            kill(pid, SIGKILL)
        }
        try? FileManager.default.removeItem(at: folder)
    }

    @Test(.requires(.tmux)) func colorsFillsTheScreenWithTheSharedColorAndRestoresTheTerminal() async throws {
        let binary = try MultipeerBinary.require()
        let (folder, socket) = try Self.scratch()
        defer { Self.cleanUp(folder, socket) }
        let service = "mp-tmux-\(UInt16.random(in: 0...UInt16.max))"
        for (session, name) in [("one", "Tee"), ("two", "Vee")] {
            // The library's log goes to a file of the test's, shown when an expectation fails.
            let command =
                "XDG_DATA_HOME=\(folder.path)/\(name) \(binary) colors \(service) --name \(name) --loopback "
                + "--log-level info 2>\(folder.path)/\(name).log; echo exited $?; sleep 30"
            _ = try Self.tmux(socket, ["new-session", "-d", "-s", session, "-x", "80", "-y", "20", command])
        }
        let joined = try await Self.waitFor(socket, "two") { $0.contains("connected (1): Tee") }
        func logs() -> String {
            ["Tee", "Vee"].map { name in
                "\(name): " + ((try? String(contentsOfFile: "\(folder.path)/\(name).log", encoding: .utf8)) ?? "no log")
            }.joined(separator: "\n")
        }
        #expect(joined.contains("multipeer colors") && joined.contains("color: none yet"), "\(joined)\n\(logs())")
        _ = try Self.tmux(socket, ["send-keys", "-t", "one", "3"])
        let colored = try await Self.waitFor(socket, "two", escapes: true) { $0.contains("picked by Tee") }
        #expect(colored.contains("color: yellow (picked by Tee)"), "\(colored)")
        #expect(colored.contains("48;5;220"), "the background is not yellow: \(colored.prefix(200))")
        // Quitting restores the terminal: the alternate screen is gone and the shell's line is back.
        _ = try Self.tmux(socket, ["send-keys", "-t", "two", "q"])
        let after = try await Self.waitFor(socket, "two") { $0.contains("exited") }
        #expect(after.contains("exited 0"), "\(after)")
        #expect(!after.contains("multipeer colors"), "\(after)")
        // The other one saw Vee leave.
        let left = try await Self.waitFor(socket, "one") { $0.contains("connected (0)") }
        #expect(left.contains("connected (0): nobody yet"), "\(left)")
    }

    /// The full-screen chat as a person uses it: an invitation prompt with the message and the code (the same
    /// code on both screens), an answer typed at the prompt, a message each way, a file with its progress bar
    /// and checksum, a redraw at a new size, history, and Ctrl-C restoring the terminal while the other side
    /// sees the goodbye.
    @Test(.requires(.tmux)) func chatRunsFullScreenWithPromptMessagesProgressAndRestore() async throws {
        let binary = try MultipeerBinary.require()
        let (folder, socket) = try Self.scratch()
        defer { Self.cleanUp(folder, socket) }
        let service = "mp-chat-\(UInt16.random(in: 0...UInt16.max))"
        // Large enough that its transfer lasts a while (a sparse file: no disk is used).
        let file = folder.appendingPathComponent("big.bin")
        #expect(FileManager.default.createFile(atPath: file.path, contents: nil))
        let handle = try FileHandle(forWritingTo: file)
        try handle.truncate(atOffset: 512 << 20)
        try handle.close()
        for (session, name) in [("one", "Ada"), ("two", "Bea")] {
            let command =
                "XDG_DATA_HOME=\(folder.path)/\(name) \(binary) chat \(service) --name \(name) --loopback "
                + "--dir \(folder.path); "
                + "echo exited $?; sleep 30"
            _ = try Self.tmux(socket, ["new-session", "-d", "-s", session, "-x", "110", "-y", "24", command])
        }
        let found = try await Self.waitFor(socket, "one") { $0.contains("Bea") && $0.contains("found") }
        #expect(found.contains("multipeer chat · Ada") && found.contains("Nearby (1)"), "\(found)")
        _ = try Self.tmux(socket, ["send-keys", "-t", "one", "/invite Bea shall we talk?", "Enter"])
        let prompt = try await Self.waitFor(socket, "two") { $0.contains("Type y to accept") }
        #expect(prompt.contains("Ada invites you (verification code "), "\(prompt)")
        #expect(prompt.contains(": \"shall we talk?\". Type y to accept"), "\(prompt)")
        #expect(prompt.contains("answer Ada>"), "\(prompt)")
        let code = try #require(
            prompt.firstRange(of: /verification code (\d+)/).map { String(prompt[$0].split(separator: " ").last!) },
            "\(prompt)")
        _ = try Self.tmux(socket, ["send-keys", "-t", "two", "y", "Enter"])
        // Both screens list the other as a member with the same code.
        let member = try await Self.waitFor(socket, "one") { $0.contains("member, code") }
        #expect(member.contains("member, code \(code)"), "code \(code): \(member)")
        let other = try await Self.waitFor(socket, "two") { $0.contains("member, code") }
        #expect(other.contains("member, code \(code)") && other.contains("Members (1)"), "\(other)")
        _ = try Self.tmux(socket, ["send-keys", "-t", "two", "hello from Bea", "Enter"])
        try await Self.expectScreen(socket, "one", showing: "Bea: hello from Bea")
        // A file: a progress bar while it travels, then the checksum.
        _ = try Self.tmux(socket, ["send-keys", "-t", "one", "/send Bea \(file.path)", "Enter"])
        let moving = try await Self.waitFor(socket, "two", within: .seconds(60)) {
            $0.contains("receiving big.bin") && $0.contains("[#")
        }
        #expect(moving.contains("% receiving big.bin from Ada") && moving.contains("[#"), "\(moving)")
        let sent = try await Self.waitFor(socket, "one", within: .seconds(120)) { $0.contains("sent Bea") }
        #expect(sent.contains("sent Bea: big.bin 536870912 bytes sha256"), "\(sent)")
        // Saved where --dir said, under a new name (the original is in the same folder).
        let received = try await Self.waitFor(socket, "two") { $0.contains("received Ada") }
        #expect(received.contains("received Ada: \(folder.path)/big"), "\(received)")
        let saved = try FileManager.default.attributesOfItem(atPath: folder.appendingPathComponent("big (2).bin").path)
        #expect((saved[.size] as? Int) == 512 << 20)
        // A new size: everything is drawn again for it.
        _ = try Self.tmux(socket, ["resize-window", "-t", "one", "-x", "70", "-y", "16"])
        let resized = try await Self.waitFor(socket, "one") { screen in
            screen.split(separator: "\n").allSatisfy { $0.count <= 70 } && screen.contains("multipeer chat · Ada")
        }
        #expect(resized.split(separator: "\n").count <= 16 && resized.contains("Bea: hello from Bea"), "\(resized)")
        // History: the arrow brings the last line back.
        _ = try Self.tmux(socket, ["send-keys", "-t", "one", "Up"])
        try await Self.expectScreen(socket, "one", showing: "> /send Bea")
        _ = try Self.tmux(socket, ["send-keys", "-t", "one", "C-u", "C-c"])
        let after = try await Self.waitFor(socket, "one") { $0.contains("exited") }
        #expect(after.contains("exited 0") && !after.contains("multipeer chat"), "\(after)")
        let left = try await Self.waitFor(socket, "two") { $0.contains("disconnected Ada") }
        #expect(left.contains("disconnected Ada: left"), "\(left)")
    }

    @Test(.requires(.tmux)) func browseShowsALiveTableOnATerminal() async throws {
        let binary = try MultipeerBinary.require()
        let (folder, socket) = try Self.scratch()
        defer { Self.cleanUp(folder, socket) }
        let service = "mp-table-\(UInt16.random(in: 0...UInt16.max))"
        _ = try Self.tmux(
            socket,
            [
                "new-session", "-d", "-s", "table", "-x", "60", "-y", "20",
                "\(binary) browse \(service) --loopback --timeout 20; echo exited $?; sleep 30",
            ])
        _ = try Self.tmux(
            socket,
            [
                "new-session", "-d", "-s", "peer", "-x", "80", "-y", "5",
                "XDG_DATA_HOME=\(folder.path)/p \(binary) chat \(service) --name Tabby --loopback; sleep 30",
            ])
        let table = try await Self.waitFor(socket, "table") { $0.contains("Tabby") }
        #expect(table.contains("multipeer browse: 1 found"), "\(table)")
        #expect(table.contains("NAME") && table.contains("FINGERPRINT"), "\(table)")
        #expect(table.contains("127.0.0.1"), "\(table)")
        // Cut to 60 columns, the table has no room for its last columns; a wider terminal gets them drawn.
        #expect(!table.contains("INFO"), "\(table)")
        _ = try Self.tmux(socket, ["resize-window", "-t", "table", "-x", "120", "-y", "20"])
        let wide = try await Self.waitFor(socket, "table") { $0.contains("INFO") }
        #expect(wide.contains("INFO") && wide.contains("Tabby"), "\(wide)")
        // The peer goes: its row goes.
        _ = try Self.tmux(socket, ["send-keys", "-t", "peer", "C-c"])
        let empty = try await Self.waitFor(socket, "table") { $0.contains("0 found") }
        #expect(empty.contains("multipeer browse: 0 found") && !empty.contains("Tabby"), "\(empty)")
    }
}
