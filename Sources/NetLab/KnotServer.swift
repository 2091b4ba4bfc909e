public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A Knot DNS server (Debian `knot`) for one test or benchmark: an authoritative zone that accepts updates signed with one
/// TSIG key, configured in a temporary folder, listening where the test says (loopback, or an address inside a
/// lab namespace when started through `prefix`), stopped and removed by ``stop()``.
public final class KnotServer: @unchecked Sendable {
    // Safety of @unchecked Sendable: every property is set in init and only read afterwards, but `output`, which
    // only `stop()` writes; the process is a LabProcess, which is Sendable.

    /// Why Knot cannot run here (not installed), or nil.
    public static let unavailableReason: String? = {
        for (tool, package) in [("knotd", "knot"), ("kdig", "knot-dnsutils"), ("knsupdate", "knot-dnsutils")]
        where path(of: tool) == nil {
            return "\(tool) is not installed (apt-get install \(package))"
        }
        return nil
    }()

    /// The zone, such as `lab.test.`.
    public let zone: String
    /// The address the server listens on.
    public let address: String
    /// The port it listens on.
    public let port: UInt16
    /// The key's name.
    public let keyName: String
    /// The key's secret, base64.
    public let secret: String
    /// The folder holding the configuration, the zone file and the journal.
    public let folder: URL
    private let process: LabProcess

    /// The key as `nsupdate -y` and the library's key files take it.
    public var keyLine: String { "hmac-sha256:\(keyName):\(secret)" }

    /// Starts a server.
    /// - Parameters:
    ///   - zone: The zone it is authoritative for.
    ///   - address: Where it listens (it must be an address of the namespace it runs in).
    ///   - port: The port; 0 picks a free one on loopback (only for `address` 127.0.0.1).
    ///   - prefix: Arguments that run knotd somewhere else, such as `["ip", "netns", "exec", NAME]`.
    ///   - extraZone: Lines added to the zone file (records another implementation registered, say).
    ///   - keyName: The key's name.
    ///   - secret: The key's secret, base64; a random one by default.
    public init(
        zone: String = "lab.test.", address: String = "127.0.0.1", port: UInt16 = 0, prefix: [String] = [],
        extraZone: String = "", keyName: String = "mp-key.", secret: String? = nil
    ) throws {
        if let reason = Self.unavailableReason { throw KnotServerError(reason) }
        self.zone = zone
        self.address = address
        self.port = port == 0 ? try Self.freeLoopbackPort() : port
        self.keyName = keyName
        var random = [UInt8](repeating: 0, count: 32)
        for index in random.indices { random[index] = UInt8.random(in: 0...255) }
        self.secret = secret ?? Data(random).base64EncodedString()
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-knot-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let zoneName = zone.hasSuffix(".") ? String(zone.dropLast()) : zone
        let configuration = """
            server:
                rundir: "\(folder.path)"
                listen: \(address)@\(self.port)
            database:
                storage: "\(folder.path)"
                # A test's zone needs no durability: no disk flush per update (they take seconds under load).
                journal-db-mode: asynchronous
            key:
              - id: \(keyName)
                algorithm: hmac-sha256
                secret: \(self.secret)
            acl:
              - id: update
                key: \(keyName)
                action: update
            zone:
              - domain: \(zoneName)
                file: "\(folder.path)/zone"
                acl: update
                zonefile-sync: -1
            log:
              - target: stderr
                any: info

            """
        let zoneFile = """
            $ORIGIN \(zoneName).
            $TTL 60
            @ SOA ns.\(zoneName). admin.\(zoneName). 1 3600 600 86400 60
            @ NS ns
            ns A \(address)
            \(extraZone)

            """
        try configuration.write(to: folder.appendingPathComponent("knot.conf"), atomically: true, encoding: .utf8)
        try zoneFile.write(to: folder.appendingPathComponent("zone"), atomically: true, encoding: .utf8)
        let knotd = Self.path(of: "knotd")!
        let command = prefix + [knotd, "-c", folder.appendingPathComponent("knot.conf").path]
        process = try ProcessLauncher.launch(Self.resolve(command[0]), Array(command.dropFirst()))
        // Ready when it answers for its zone.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let answer = try? dig(["SOA", zoneName, "+short"], prefix: prefix), answer.contains("admin") { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        stop()
        throw KnotServerError("knotd did not answer for \(zone) at \(address)@\(self.port) within 10 s")
    }

    /// Runs `kdig @server` with `arguments`; returns its standard output.
    public func dig(_ arguments: [String], prefix: [String] = []) throws -> String {
        try Self.run(prefix + [Self.path(of: "kdig")!, "@\(address)", "-p", "\(port)"] + arguments).stdout
    }

    /// Runs `knsupdate` with the key and `commands` (the server and zone lines come first); returns the status
    /// and both outputs.
    public func nsupdate(_ commands: [String], keyLine: String? = nil, prefix: [String] = []) throws -> (
        status: Int32, output: String
    ) {
        let zoneName = zone.hasSuffix(".") ? String(zone.dropLast()) : zone
        let script =
            (["server \(address) \(port)", "zone \(zoneName)"] + commands + ["send", "quit"])
            .joined(separator: "\n") + "\n"
        let result = try Self.run(
            prefix + [Self.path(of: "knsupdate")!, "-y", keyLine ?? self.keyLine], input: script)
        return (result.status, result.stdout + result.stderr)
    }

    /// What knotd logged so far (read after ``stop()``).
    public private(set) var output = ""

    /// Stops the server and removes its folder. Idempotent.
    public func stop() {
        if let log = Self.end(process, folder: folder) { output = log }
    }

    /// Ends a server's process (SIGKILL: nothing of its state is kept, and SIGTERM takes knotd a second and a
    /// half) and removes its folder; returns what it wrote if it was still running.
    static func end(_ process: LabProcess, folder: URL) -> String? {
        defer { try? FileManager.default.removeItem(at: folder) }
        guard process.exitStatus == nil else { return nil }
        process.signal(SIGKILL)
        _ = process.waitForExit(timeout: .seconds(10))
        return (process.lines + [process.standardError]).joined(separator: "\n")
    }

    deinit { stop() }

    // MARK: Helpers

    /// A tool's path in the system's directories, or nil.
    public static func path(of tool: String) -> String? {
        for directory in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        where FileManager.default.isExecutableFile(atPath: "\(directory)/\(tool)") {
            return "\(directory)/\(tool)"
        }
        return nil
    }

    /// An executable's path: as given when absolute, else found in the system's directories.
    static func resolve(_ name: String) -> String { name.hasPrefix("/") ? name : path(of: name) ?? name }

    /// Runs a command to completion, with `input` on its standard input.
    static func run(_ command: [String], input: String? = nil) throws -> (status: Int32, stdout: String, stderr: String)
    {
        try ProcessLauncher.run(
            resolve(command[0]), Array(command.dropFirst()), stdin: input.map { Array($0.utf8) })
    }

    /// A TCP and UDP port free on 127.0.0.1 right now (bound and released; knotd binds it next).
    public static func freeLoopbackPort() throws -> UInt16 {
        for _ in 0..<50 {
            let port = UInt16.random(in: 20_000...60_000)
            let tcp = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            let udp = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            defer {
                close(tcp)
                close(udp)
            }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            let bound = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                    bind(tcp, socketAddress, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                        && bind(udp, socketAddress, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            if bound { return port }
        }
        throw KnotServerError("no free port on 127.0.0.1 after 50 tries")
    }
}

/// Why a ``KnotServer`` or ``TurnServer`` could not start.
public struct KnotServerError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
