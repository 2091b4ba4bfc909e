internal import Foundation
import MulticastDNS

/// The `multipeer` command-line tool.
@main
struct MultipeerTool {
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
    ]

    static var help: String {
        var text = "usage: multipeer COMMAND [OPTIONS]\n\ncommands:\n"
        for command in commands {
            text += "  \(command.name.padding(toLength: 10, withPad: " ", startingAt: 0))\(command.summary)\n"
        }
        text += "\n"
        for command in commands { text += "  \(command.usage)\n" }
        return text
    }

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        guard let name = arguments.first, !["-h", "--help", "help"].contains(name) else {
            Output.line(help)
            exit(arguments.isEmpty ? 64 : 0)
        }
        arguments.removeFirst()
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
