import Foundation
import TestIsolation
import Testing

/// `multipeer --help` and every subcommand's `--help` match the files in `Tests/Golden/help/` (regenerate them with
/// `MULTIPEER_UPDATE_GOLDEN=1` after a deliberate change, and read the diff); a usage error prints the usage and
/// exits 64.
@Suite(.tags(.needsCLI), .ownThread)  // each waits for a process
struct HelpGoldenTests {
    static let commands = [
        "multipeer", "demo", "advertise", "browse", "listen", "connect", "chat", "colors", "send", "receive",
        "identity",
    ]

    @Test(arguments: commands)
    func helpMatchesItsGoldenFile(command: String) throws {
        let binary = try MultipeerBinary.require()
        let result = try Subprocess.run(binary, command == "multipeer" ? ["--help"] : [command, "--help"])
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
        #expect(result.stderr.contains("usage: multipeer \(command)"), "\(result.stderr)")
    }
}
