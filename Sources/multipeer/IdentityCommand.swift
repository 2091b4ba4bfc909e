internal import Foundation
import Multipeer

/// `multipeer identity [show|create|export FILE]`: the user's identity, which every command uses unless given
/// `--identity FILE`.
struct IdentityCommand {
    static let usage = "multipeer identity [show | create [--name NAME] [--force] | export FILE] [--identity FILE]"
    static let summary = "show, create or export your identity (a key pair kept at mode 0600)"

    enum Action: Equatable {
        case show
        case create(name: String?, force: Bool)
        case export(String)
    }

    var action: Action
    var path: String

    init(arguments: [String]) throws(UsageError) {
        var arguments = CommandLineArguments(arguments)
        path = try arguments.value(of: "--identity") ?? ConnectionOptions.defaultIdentityPath
        let name = try arguments.value(of: "--name")
        let force = arguments.flag("--force")
        let verb = arguments.optionalPositional() ?? "show"
        switch verb {
        case "show": action = .show
        case "create": action = .create(name: name, force: force)
        case "export": action = .export(try arguments.positional("FILE"))
        default: throw UsageError("unknown action '\(verb)': show, create or export")
        }
        if name != nil, case .show = action { throw UsageError("--name goes with create") }
        try arguments.finish()
    }

    func run() -> Int32 {
        do {
            switch action {
            case .show:
                guard FileManager.default.fileExists(atPath: path) else {
                    Output.error(
                        "multipeer: there is no identity at \(path) yet; `multipeer identity create` makes one")
                    return 1
                }
                show(try PeerIdentity.load(from: path))
            case .create(let name, let force):
                if FileManager.default.fileExists(atPath: path), !force {
                    let existing = try PeerIdentity.load(from: path)
                    Output.error(
                        "multipeer: \(path) already holds \(existing.displayName)'s identity (\(existing.fingerprint)); "
                            + "--force replaces it, and peers that trust it will see a new peer")
                    return 1
                }
                let identity = try PeerIdentity.generate(displayName: name ?? ProcessInfo.processInfo.hostName)
                try FileManager.default.createDirectory(
                    atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
                try identity.save(to: path)
                show(identity)
            case .export(let target):
                guard FileManager.default.fileExists(atPath: path) else {
                    Output.error("multipeer: there is no identity at \(path) to export")
                    return 1
                }
                guard !FileManager.default.fileExists(atPath: target) else {
                    Output.error("multipeer: \(target) exists; export never replaces a file")
                    return 1
                }
                let identity = try PeerIdentity.load(from: path)
                try identity.save(to: target)
                Output.line(
                    "exported \(identity.displayName) \(identity.fingerprint) to \(target) (mode 0600: it holds the private key)"
                )
            }
            return 0
        } catch let error as IdentityError {
            Output.error("multipeer: \(error.reason)")
            return 1
        } catch {
            Output.error("multipeer: \(error.localizedDescription)")
            return 1
        }
    }

    private func show(_ identity: PeerIdentity) {
        Output.line("name \(Output.escaped(identity.displayName))")
        Output.line("fingerprint \(identity.fingerprint)")
        Output.line("file \(path)")
    }
}
