import Foundation
import NetLab
import TestIsolation
import Testing

/// `multipeer --help` and every subcommand's `--help` (swift-argument-parser's, 100 columns wide) match the files in
/// `Tests/Golden/help/` (regenerate them with `MULTIPEER_UPDATE_GOLDEN=1` after a deliberate change, and read the
/// diff); a usage error prints the usage and exits 64; `--version` and the completion scripts work.
@Suite(.tags(.needsCLI), .ownThread)  // each waits for a process
struct HelpGoldenTests {
    static let commands = [
        "multipeer", "demo", "advertise", "browse", "listen", "connect", "chat", "colors", "send", "receive",
        "identity",
    ]

    @Test(arguments: commands)
    func helpMatchesItsGoldenFile(command: String) throws {
        let binary = try MultipeerBinary.require()
        // The width is fixed: swift-argument-parser wraps help to the terminal's (COLUMNS, else 80).
        let result = try Subprocess.run(
            binary, command == "multipeer" ? ["--help"] : [command, "--help"], environment: ["COLUMNS": "100"])
        #expect(result.status == 0, "\(result.stderr)")
        let golden = Repository.root.appendingPathComponent("Tests/Golden/help/\(command).txt")
        if ProcessInfo.processInfo.environment["MULTIPEER_UPDATE_GOLDEN"] == "1" {
            try Data(result.stdout.utf8).write(to: golden)
        }
        let expected = try String(contentsOf: golden, encoding: .utf8)
        #expect(result.stdout == expected, "`multipeer \(command) --help` changed; see Tests/Golden/help")
    }

    @Test(arguments: ["colors", "chat", "identity"])
    func aUsageErrorPrintsTheUsageAndExits64(command: String) throws {
        let binary = try MultipeerBinary.require()
        let result = try Subprocess.run(binary, [command, "--no-such-option", "x", "y", "z"])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("Usage: multipeer \(command)"), "\(result.stderr)")
    }

    @Test(arguments: [
        ["chat", "svc", "--accept", "maybe"], ["advertise", "svc"], ["browse", "svc", "--json", "--line"],
        ["chat", "svc", "--log-level", "loud"], ["connect", "nowhere"], ["identity", "export"],
        ["connect", "127.0.0.1:9", "--connect-timeout", "0.5"], ["chat", "svc", "--connect-timeout", "soon"],
    ])
    func aValueTheCommandRefusesIsAUsageErrorToo(arguments: [String]) throws {
        // Checked when the command is made, with the message the tool always gave, and told as the parser tells
        // its own errors.
        let binary = try MultipeerBinary.require()
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("mp-usage-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let result = try Subprocess.run(binary, arguments, environment: ["XDG_DATA_HOME": home.path])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("Error: "), "\(result.stderr)")
        #expect(result.stderr.contains("Usage: multipeer \(arguments[0])"), "\(result.stderr)")
    }

    /// `--connect-timeout` bounds the set-up: a listener that takes the TCP connection and never answers (the
    /// kernel completes it unaccepted, on loopback) fails the handshake after two thirds of the time given, not the
    /// default 10 s.
    @Test func theConnectTimeoutBoundsAHandshakeThatNeverEnds() throws {
        let listener = try RawListener(.v4(.loopback))
        defer { listener.close() }
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("mp-connect-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: home) }
        let started = ContinuousClock.now
        let result = try Subprocess.run(
            try MultipeerBinary.require(),
            ["connect", "127.0.0.1:\(listener.address.port)", "--connect-timeout", "1.5"],
            environment: ["XDG_DATA_HOME": home.path])
        let took = ContinuousClock.now - started
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("handshakeTimedOut(limit: 1.0 seconds)"), "\(result.stdout) \(result.stderr)")
        #expect(took < .seconds(10), "the default handshake timeout applied: \(took)")
    }

    @Test func noCommandPrintsTheHelpAndExits64() throws {
        let result = try Subprocess.run(try MultipeerBinary.require(), [])
        #expect(result.status == 64)
        #expect(result.stderr.contains("SUBCOMMANDS:") && result.stderr.contains("chat"), "\(result.stderr)")
    }

    @Test func versionIsPrinted() throws {
        let result = try Subprocess.run(try MultipeerBinary.require(), ["--version"])
        #expect(result.status == 0)
        #expect(result.stdout.split(separator: ".").count == 3, "\(result.stdout)")
    }

    @Test(arguments: ["bash", "zsh", "fish"])
    func completionScriptsNameEveryCommandAndOption(shell: String) throws {
        let result = try Subprocess.run(try MultipeerBinary.require(), ["--generate-completion-script", shell])
        #expect(result.status == 0, "\(result.stderr)")
        // Options as the shells write them (fish: `-l log-level`).
        for word in Self.commands.dropFirst() + ["log-level", "secret-file", "max-peers"] {
            #expect(result.stdout.contains(word), "\(shell) completion lacks \(word)")
        }
    }
}
