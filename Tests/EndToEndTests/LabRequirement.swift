import Foundation
import NetLab
import TestIsolation

/// Something an end-to-end test needs from the machine, and the sentence its skip prints when it is missing.
///
/// Each check looks at what the test will actually run, the way it will run it: executables on `PATH` (the
/// interop scripts start `avahi-daemon`, `dbus-daemon` and `avahi-browse` through `PATH`), Debian's
/// `/usr/bin/python3` importing `zeroconf` (with the test process's `PYTHONPATH`). A missing piece names the
/// Debian package that provides it; `scripts/test.sh`, run as root, installs them all.
enum LabRequirement: Sendable {
    /// The namespace lab: root, iproute2, network namespaces.
    case netLab
    /// The built `multipeer` with the `advertise` and `browse` commands.
    case discoveryCLI
    /// Debian's `/usr/bin/python3` (the flood driver and the port holder use only its standard library).
    case python3
    /// `/usr/bin/python3` with the `zeroconf` module (python3-zeroconf).
    case pythonZeroconf
    /// `avahi-daemon` (avahi-daemon).
    case avahiDaemon
    /// `avahi-browse` (avahi-utils).
    case avahiBrowse
    /// `dbus-daemon`, for avahi's private system bus (dbus).
    case dbusDaemon
    /// `tmux` (driving the full-screen interfaces).
    case tmux
    /// Knot DNS with `kdig` and `knsupdate` (knot, knot-dnsutils), coturn's `turnserver` (coturn) and `iptables`
    /// (iptables): the routed lab's servers and firewall.
    case wideAreaServers

    /// Why this requirement is not met here, or nil if it is. Each check runs once per test process.
    var unmetReason: String? {
        switch self {
        case .netLab: NetLab.unavailableReason
        case .discoveryCLI: MultipeerBinary.discoveryUnavailableReason
        case .python3: Self.python3Reason
        case .pythonZeroconf: Self.pythonZeroconfReason
        case .avahiDaemon: Self.avahiDaemonReason
        case .avahiBrowse: Self.avahiBrowseReason
        case .dbusDaemon: Self.dbusDaemonReason
        case .tmux: Self.tmuxReason
        case .wideAreaServers: Self.wideAreaReason
        }
    }

    /// Why the requirements are not all met (every unmet one, in order, each once), or nil if they are.
    static func unmetReason(of requirements: [LabRequirement]) -> String? {
        var reasons: [String] = []
        for requirement in requirements {
            if let reason = requirement.unmetReason, !reasons.contains(reason) { reasons.append(reason) }
        }
        return reasons.isEmpty ? nil : reasons.joined(separator: "; ")
    }

    /// The sentence for a missing package.
    static func notInstalled(_ what: String, package: String) -> String {
        "\(what) is not installed (apt-get install \(package))"
    }

    private static let python3Reason: String? =
        FileManager.default.isExecutableFile(atPath: Repository.python)
        ? nil : notInstalled(Repository.python, package: "python3")

    private static let pythonZeroconfReason: String? = {
        let missing = notInstalled("python3-zeroconf", package: "python3-zeroconf")
        guard FileManager.default.isExecutableFile(atPath: Repository.python) else { return missing }
        guard let result = try? Subprocess.run(Repository.python, ["-c", "import zeroconf"]) else { return missing }
        return result.status == 0 ? nil : missing
    }()

    private static let avahiDaemonReason = executableReason("avahi-daemon", package: "avahi-daemon")
    private static let avahiBrowseReason = executableReason("avahi-browse", package: "avahi-utils")
    private static let dbusDaemonReason = executableReason("dbus-daemon", package: "dbus")
    private static let tmuxReason = executableReason("tmux", package: "tmux")
    private static let wideAreaReason =
        KnotServer.unavailableReason ?? TurnServer.unavailableReason
        ?? executableReason("iptables", package: "iptables")

    /// Nil if `name` is an executable on `PATH`; otherwise says which package provides it, or, when it is
    /// installed in a directory `PATH` lacks (a non-login root shell without `/usr/sbin`), where it is.
    private static func executableReason(_ name: String, package: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        var directories = path.split(separator: ":").map(String.init)
        // The lab runs only as root, whose PATH on Debian has the sbin directories another user's lacks: look
        // there too, so a user without root is told about root, not about a PATH the tests will not use.
        if geteuid() != 0 { directories += ["/usr/sbin", "/sbin"] }
        if directories.contains(where: { FileManager.default.isExecutableFile(atPath: "\($0)/\(name)") }) {
            return nil
        }
        for directory in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        where !directories.contains(directory) && FileManager.default.isExecutableFile(atPath: "\(directory)/\(name)") {
            return "\(name) is installed in \(directory), which is not on PATH (\(path))"
        }
        return notInstalled(name, package: package)
    }
}
