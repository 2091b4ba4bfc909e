import Foundation

/// Paths inside the package checkout, found from this source file's location.
enum Repository {
    /// The package root (the directory holding Package.swift).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `scripts/interop`, the python-zeroconf and avahi harness.
    static let interop = root.appendingPathComponent("scripts/interop")

    /// The path of a script of the interop harness.
    static func interopScript(_ name: String) -> String { interop.appendingPathComponent(name).path }

    /// Debian's python with python3-zeroconf (not a pyenv shim that lacks the module).
    static let python = "/usr/bin/python3"
}
