import Foundation
import NetLab

/// Finds the `multipeer` executable that `swift build`/`swift test` put next to the test bundle.
enum MultipeerBinary {
    /// The path of the built `multipeer`, or nil if it cannot be found (see ``missingMessage``).
    ///
    /// Looked for in `$MULTIPEER_BINARY`, next to the running test executable (`.build/<triple>/debug/`, the
    /// products directory the test bundle shares with it), then under the package's `.build` directory.
    static let path: String? = candidates().first { FileManager.default.isExecutableFile(atPath: $0) }

    /// What to tell the user when the binary is missing.
    static var missingMessage: String {
        "the `multipeer` executable was not found (looked in: \(candidates().joined(separator: ", "))); "
            + "build it with `swift build --product multipeer` or set MULTIPEER_BINARY"
    }

    /// The path, or an error telling where it was looked for.
    static func require() throws -> String {
        guard let path else { throw MissingBinary(message: missingMessage) }
        return path
    }

    /// Another executable of the package (the tutorial examples), found the same way.
    static func require(named name: String) throws -> String {
        let places = candidates(name)
        guard let path = places.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw MissingBinary(
                message: "the `\(name)` executable was not found (looked in: \(places.joined(separator: ", "))); "
                    + "build it with `swift build --product \(name)`")
        }
        return path
    }

    /// Why the discovery commands (`advertise`, `browse`) cannot be tested with the built binary, or nil.
    ///
    /// The binary's `--help` must mention both commands. It runs in a fresh, empty network namespace
    /// (`unshare --net`) so nothing it does can reach a real interface; that needs root, so without the lab
    /// (whose own reason then skips the test) only the binary's presence is checked. `MULTIPEER_REQUIRE_CLI=1`
    /// skips the check, to see the tests fail against an incomplete CLI.
    static let discoveryUnavailableReason: String? = {
        guard let path else { return missingMessage }
        if NetLab.unavailableReason != nil { return nil }
        if ProcessInfo.processInfo.environment["MULTIPEER_REQUIRE_CLI"] == "1" { return nil }
        let help = try? Subprocess.run("/usr/bin/unshare", ["--net", path, "--help"])
        let text = (help?.stdout ?? "") + (help?.stderr ?? "")
        guard text.contains("advertise"), text.contains("browse") else {
            return "`multipeer --help` does not list `advertise` and `browse` yet (CLI not merged); "
                + "set MULTIPEER_REQUIRE_CLI=1 to run these tests anyway"
        }
        return nil
    }()

    private static func candidates(_ name: String = "multipeer") -> [String] {
        var result: [String] = []
        if name == "multipeer", let explicit = ProcessInfo.processInfo.environment["MULTIPEER_BINARY"] {
            result.append(explicit)
        }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        result.append(executable.deletingLastPathComponent().appendingPathComponent(name).path)
        if let bundle = Bundle.main.executableURL {
            result.append(bundle.deletingLastPathComponent().appendingPathComponent(name).path)
        }
        let build = Repository.root.appendingPathComponent(".build")
        for configuration in ["debug", "release"] {
            result.append(build.appendingPathComponent("\(configuration)/\(name)").path)
            let triples = (try? FileManager.default.contentsOfDirectory(atPath: build.path)) ?? []
            for triple in triples.sorted() where triple.contains("-") {
                result.append(build.appendingPathComponent("\(triple)/\(configuration)/\(name)").path)
            }
        }
        var seen = Set<String>()
        return result.filter { seen.insert($0).inserted }
    }

    struct MissingBinary: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }
}
