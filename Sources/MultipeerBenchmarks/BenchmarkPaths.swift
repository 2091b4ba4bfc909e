import Foundation

/// Where the programs under test live: the built `multipeer` next to this executable, the python-zeroconf
/// harness scripts in the repository, and Debian's python.
struct BenchmarkPaths {
    /// The `multipeer` executable.
    let multipeer: String
    /// Debian's python with python3-zeroconf 0.47 (not a pyenv shim).
    let python = "/usr/bin/python3"
    /// The repository root (the directory holding `Package.swift`).
    let repository: URL

    /// `scripts/interop/zc_register.py`.
    var zeroconfRegister: String { repository.appendingPathComponent("scripts/interop/zc_register.py").path }
    /// `scripts/interop/zc_browse.py`.
    var zeroconfBrowse: String { repository.appendingPathComponent("scripts/interop/zc_browse.py").path }
    /// `scripts/bench/zc_peer.py`.
    var zeroconfPeer: String { repository.appendingPathComponent("scripts/bench/zc_peer.py").path }
    /// `scripts/bench/zc_cache_memory.py`.
    var zeroconfCacheMemory: String { repository.appendingPathComponent("scripts/bench/zc_cache_memory.py").path }

    /// Finds everything, or explains what is missing.
    init() throws {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let directory = executable.deletingLastPathComponent()
        let fileManager = FileManager.default
        if let explicit = ProcessInfo.processInfo.environment["MULTIPEER_BINARY"] {
            multipeer = explicit
        } else {
            multipeer = directory.appendingPathComponent("multipeer").path
        }
        guard fileManager.isExecutableFile(atPath: multipeer) else {
            throw BenchmarkError(
                "`multipeer` not found at \(multipeer); build it with `swift build -c release` (or set MULTIPEER_BINARY)"
            )
        }
        var candidate = directory
        var root: URL?
        for _ in 0..<8 {
            if fileManager.fileExists(atPath: candidate.appendingPathComponent("Package.swift").path) {
                root = candidate
                break
            }
            candidate = candidate.deletingLastPathComponent()
        }
        if root == nil {
            let current = URL(fileURLWithPath: fileManager.currentDirectoryPath)
            if fileManager.fileExists(atPath: current.appendingPathComponent("Package.swift").path) { root = current }
        }
        guard let root else {
            throw BenchmarkError(
                "cannot find the repository (no Package.swift above \(directory.path) or in the current directory)")
        }
        repository = root
        guard fileManager.isExecutableFile(atPath: python) else {
            throw BenchmarkError("\(python) is missing (apt-get install python3 python3-zeroconf)")
        }
    }
}
