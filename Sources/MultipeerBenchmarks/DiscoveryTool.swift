import Foundation
import NetLab

/// One implementation under test: ours (`multipeer`) or the baseline (python-zeroconf 0.47 via the interop scripts).
///
/// Each tool uses a service type of its own so the two never see each other's traffic as answers.
enum DiscoveryTool: String, CaseIterable, Sendable {
    case ours
    case baseline

    /// The DNS-SD service type this tool advertises and browses in the benchmark.
    var serviceType: String {
        switch self {
        case .ours: "_mpbench._tcp"
        case .baseline: "_zcbench._tcp"
        }
    }

    /// The command line that advertises `name` on `host` (an executable and its arguments).
    func advertise(name: String, host: NetLab.Host, paths: BenchmarkPaths) -> (String, [String]) {
        switch self {
        case .ours:
            (
                paths.multipeer,
                [
                    "advertise", serviceType, "--name", name, "--info", "a=1", "--info", "b=two", "--port", "4242",
                    "--interface", host.interfaceName,
                ]
            )
        case .baseline:
            (
                paths.python,
                [paths.zeroconfRegister, name, serviceType, "4242", "a=1", "b=two", "--interface-ip", host.ipv4]
            )
        }
    }

    /// The line an advertiser prints once it is announced.
    var announcedPrefix: String {
        switch self {
        case .ours: "advertising "
        case .baseline: "registered "
        }
    }

    /// The command line that browses for `timeout` seconds on `host`, printing JSON event lines.
    func browse(timeout: Int, host: NetLab.Host, paths: BenchmarkPaths, lostTimeout: Int? = nil) -> (String, [String]) {
        switch self {
        case .ours:
            (
                paths.multipeer,
                ["browse", serviceType, "--json", "--timeout", String(timeout), "--interface", host.interfaceName]
                    + (lostTimeout.map { ["--lost-timeout", String($0)] } ?? [])
            )
        case .baseline:
            (
                paths.python,
                [paths.zeroconfBrowse, serviceType, "--timeout", String(timeout), "--interface-ip", host.ipv4]
            )
        }
    }

    /// A printable name for tables.
    var label: String {
        switch self {
        case .ours: "ours"
        case .baseline: "baseline (python-zeroconf)"
        }
    }
}

/// One event line of a browser (`multipeer browse --json` and `zc_browse.py` print the same two keys).
struct BrowseEvent {
    /// `found`, `updated` or `lost`.
    let event: String
    /// The instance name.
    let name: String

    /// Parses a JSON line, or returns nil for anything else.
    init?(_ line: String) {
        guard line.first == "{",
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let event = object["event"] as? String, let name = object["name"] as? String
        else { return nil }
        self.event = event
        self.name = name
    }

    /// Whether `line` reports `event` for `name`.
    static func matches(_ line: String, _ event: String, _ name: String) -> Bool {
        guard let parsed = BrowseEvent(line) else { return false }
        return parsed.event == event && parsed.name == name
    }
}
