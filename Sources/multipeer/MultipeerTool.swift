import ArgumentParser
internal import Foundation

/// The `multipeer` command-line tool.
@main
struct MultipeerTool: AsyncParsableCommand {
    /// The tool's version, as `--version` prints it.
    static let version = "0.9.0"

    static let configuration = CommandConfiguration(
        commandName: "multipeer",
        abstract: "Nearby peers over DNS-SD on multicast DNS: discovery, sessions, messages and files.",
        discussion: """
            --log-level LEVEL (or the environment's MULTIPEER_LOG=LEVEL) writes what the library does to stderr: \
            off (the default), error, warning, info (connections, invitations, members, files), debug, trace. \
            Completion scripts: multipeer --generate-completion-script bash|zsh|fish.
            """,
        version: version,
        subcommands: [
            Demo.self, Advertise.self, Browse.self, Listen.self, Connect.self, Chat.self, Colors.self, Send.self,
            Receive.self, Identity.self,
        ])

    /// Without a command: the help, and exit status 64 (a usage error, as before).
    func run() async throws {
        Output.error(Self.helpMessage())
        throw ExitCode(64)
    }
}
