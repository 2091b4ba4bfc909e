internal import Foundation
import MulticastDNS
import MultipeerIO

/// The `multipeer` command-line tool.
@main
struct MultipeerTool {
    /// The option every networking command takes (the library's log, on stderr).
    static let logUsage = "[--log-level LEVEL]"

    static let commands: [(name: String, usage: String, summary: String)] = [
        ("demo", DemoCommand.usage, DemoCommand.summary),
        ("advertise", AdvertiseCommand.usage, AdvertiseCommand.summary),
        ("browse", BrowseCommand.usage, BrowseCommand.summary),
        ("listen", ListenCommand.usage, ListenCommand.summary),
        ("connect", ConnectCommand.usage, ConnectCommand.summary),
        ("chat", ChatCommand.usage, ChatCommand.summary),
        ("colors", ColorsCommand.usage, ColorsCommand.summary),
        ("send", FilesCommand.sendUsage, FilesCommand.sendSummary),
        ("receive", FilesCommand.receiveUsage, FilesCommand.receiveSummary),
        ("identity", IdentityCommand.usage, IdentityCommand.summary),
    ].map { command in
        (command.0, command.0 == "identity" ? command.1 : command.1 + " " + logUsage, command.2)
    }

    static var help: String {
        var text = "usage: multipeer COMMAND [OPTIONS]\n\ncommands:\n"
        for command in commands {
            text += "  \(command.name.padding(toLength: 10, withPad: " ", startingAt: 0))\(command.summary)\n"
        }
        text += "\n"
        for command in commands { text += "  \(command.usage)\n" }
        text +=
            "\n--log-level LEVEL (or the environment's MULTIPEER_LOG=LEVEL) writes what the library does to stderr:\n"
        text += "off (the default), error, warning, info (connections, invitations, members, files), debug, trace.\n"
        return text
    }

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, !["-h", "--help", "help"].contains(name) else {
            Output.line(help)
            exit(arguments.isEmpty ? 64 : 0)
        }
        arguments.removeFirst()
        if let index = arguments.firstIndex(where: { $0 == "--log-level" || $0.hasPrefix("--log-level=") }),
            name != "identity"
        {
            let joined = arguments[index].hasPrefix("--log-level=")
            let value =
                joined
                ? String(arguments[index].dropFirst("--log-level=".count))
                : index + 1 < arguments.count ? arguments[index + 1] : ""
            guard let level = LogLevel(name: value) else {
                Output.error("multipeer: --log-level wants off, error, warning, info, debug or trace, not '\(value)'")
                Output.error(commands.first { $0.name == name }.map { "usage: \($0.usage)" } ?? help)
                exit(64)
            }
            ToolLog.logger = MultipeerLogging.lines(level)
            arguments.removeSubrange(index...(joined ? index : min(index + 1, arguments.count - 1)))
        }
        if arguments.contains("--help") || arguments.contains("-h") {
            Output.line(commands.first { $0.name == name }?.usage ?? help)
            exit(0)
        }
        do {
            let status: Int32
            switch name {
            case "demo": status = try await DemoCommand(arguments: arguments).run()
            case "advertise": status = try await AdvertiseCommand(arguments: arguments).run()
            case "browse": status = try await BrowseCommand(arguments: arguments).run()
            case "listen": status = try await ListenCommand(arguments: arguments).run()
            case "connect": status = try await ConnectCommand(arguments: arguments).run()
            case "chat": status = try await ChatCommand(arguments: arguments).run()
            case "colors": status = try await ColorsCommand(arguments: arguments).run()
            case "send": status = try await SendCommand(arguments: arguments).run()
            case "receive": status = try await ReceiveCommand(arguments: arguments).run()
            case "identity": status = try IdentityCommand(arguments: arguments).run()
            default: throw UsageError("unknown command '\(name)'")
            }
            exit(status)
        } catch let error as UsageError {
            Output.error("multipeer: \(error)")
            Output.error(commands.first { $0.name == name }.map { "usage: \($0.usage)" } ?? help)
            exit(64)
        } catch {
            Output.error("multipeer: \(error)")
            exit(1)
        }
    }
}
