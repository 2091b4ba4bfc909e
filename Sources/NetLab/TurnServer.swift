public import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A coturn TURN relay (Debian `coturn`) for one test or benchmark: long-term credentials for one user, TCP relaying, no TLS,
/// configured in a temporary folder, listening where the test says (loopback, or an address inside a lab
/// namespace when started through `prefix`), stopped and removed by ``stop()``.
public final class TurnServer: @unchecked Sendable {
    // Safety of @unchecked Sendable: every property is set in init and only read afterwards, but `output`, which
    // only `stop()` writes; the process is a LabProcess, which is Sendable.

    /// Why coturn cannot run here (not installed), or nil.
    public static let unavailableReason: String? =
        KnotServer.path(of: "turnserver") == nil ? "turnserver is not installed (apt-get install coturn)" : nil

    /// Where it listens.
    public let address: String
    /// Its port.
    public let port: UInt16
    /// The user.
    public let username: String
    /// The user's password.
    public let password: String
    /// The folder holding its configuration and database.
    public let folder: URL
    private let process: LabProcess

    /// Starts a relay.
    /// - Parameters:
    ///   - address: Where it listens and relays from (an address of the namespace it runs in).
    ///   - port: Its port; 0 picks a free one on loopback.
    ///   - prefix: Arguments that run it somewhere else, such as `["ip", "netns", "exec", NAME]`.
    ///   - username: The user.
    ///   - password: The password.
    public init(
        address: String = "127.0.0.1", port: UInt16 = 0, prefix: [String] = [], username: String = "peer",
        password: String = "relay-\(UInt32.random(in: 0...UInt32.max))"
    ) throws {
        if let reason = Self.unavailableReason { throw KnotServerError(reason) }
        self.address = address
        self.port = port == 0 ? try KnotServer.freeLoopbackPort() : port
        self.username = username
        self.password = password
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-turn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // A port range of its own per server, so relays of tests running at once never contend for one.
        let base = Int.random(in: 20...590) * 100
        let configuration = """
            listening-ip=\(address)
            listening-port=\(self.port)
            relay-ip=\(address)
            min-port=\(base)
            max-port=\(base + 99)
            lt-cred-mech
            user=\(username):\(password)
            realm=lab.test
            \(address.hasPrefix("127.") ? "allow-loopback-peers" : "")
            no-tls
            no-dtls
            no-udp-relay
            no-cli
            no-rfc5780
            no-stun-backward-compatibility
            fingerprint
            log-file=stdout
            simple-log
            pidfile=\(folder.path)/turnserver.pid
            userdb=\(folder.path)/turndb

            """
        try configuration.write(to: folder.appendingPathComponent("turn.conf"), atomically: true, encoding: .utf8)
        let command =
            prefix + [KnotServer.path(of: "turnserver")!, "-c", folder.appendingPathComponent("turn.conf").path]
        process = try ProcessLauncher.launch(KnotServer.resolve(command[0]), Array(command.dropFirst()))
        // Ready when it accepts TCP connections on its port.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if prefix.isEmpty
                ? Self.accepts(port: self.port) : (try? Self.listening(prefix: prefix, port: self.port)) == true
            {
                return
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        stop()
        throw KnotServerError("turnserver did not listen on \(address):\(self.port) within 10 s")
    }

    /// What coturn logged (read after ``stop()``).
    public private(set) var output = ""

    /// Stops the relay and removes its folder. Idempotent.
    public func stop() {
        if let log = KnotServer.end(process, folder: folder) { output = log }
    }

    deinit { stop() }

    /// Whether something accepts TCP on 127.0.0.1:`port`.
    static func accepts(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// Whether a TCP socket listens on `port` where `prefix` runs (`ss -ltn` there).
    static func listening(prefix: [String], port: UInt16) throws -> Bool {
        let result = try KnotServer.run(prefix + ["ss", "-Hltn", "sport = :\(port)"])
        return result.status == 0 && !result.stdout.isEmpty
    }
}
