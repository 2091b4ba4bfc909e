internal import Foundation
import Multipeer

/// `multipeer identity [show|create|export FILE]`: the user's identity, which every command uses unless given
/// `--identity FILE`.
struct IdentityCommand {
    static let summary = "show, create or export your identity (a key pair kept at mode 0600)"

    enum Action: Equatable {
        case show
        case create(name: String?, force: Bool)
        case export(String)
    }

    var action: Action
    var path: String

    init(_ parsed: MultipeerTool.Identity) throws(UsageError) {
        path = parsed.identity ?? ConnectionOptions.defaultIdentityPath
        let verb = parsed.action ?? "show"
        switch verb {
        case "show": action = .show
        case "create": action = .create(name: parsed.name, force: parsed.force)
        case "export":
            guard let file = parsed.file else { throw UsageError("missing FILE") }
            action = .export(file)
        default: throw UsageError("unknown action '\(verb)': show, create or export")
        }
        if parsed.name != nil, case .show = action { throw UsageError("--name goes with create") }
        if let file = parsed.file, verb != "export" { throw UsageError("unexpected argument '\(file)'") }
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
