import Foundation
import Glibc
import MultipeerIO

/// A throw-away network of Linux network namespaces for end-to-end tests and benchmarks.
///
/// Layout: a "switch" namespace `mpl<id>-sw` holds a bridge `br0` (multicast snooping off, forward delay 0, no
/// STP, no IPv6 of its own); every host `i` is a namespace `mpl<id>-h<i>` whose interface `lab0` is a veth
/// linked to port `h<i>` of the bridge, with `198.(18|19).X.(i+10)/24`, optionally `fdXX:…::(i+10)/64` (no
/// duplicate address detection, usable at once), loopback up and a route for 224.0.0.0/4 on `lab0`.
/// Every link is created inside a lab namespace, so the root namespace never gains a link, address or route;
/// multicast stays on the bridge. `<id>` embeds the creating process id, so ``sweepStale()`` can tell
/// leftovers of dead runs from labs of live ones, and a random part, so labs of one process never collide.
///
/// `Sendable` is checked by the compiler: the identity is immutable and the changing part (hosts, processes,
/// torn-down flag) sits behind a `Lock`.
public final class NetLab: Sendable {
    /// The name every host interface has.
    public static let interfaceName = "lab0"
    /// The most hosts a lab can have: addresses end in `index + 10` inside one /24.
    public static let maximumHosts = 240

    /// The unique part of every namespace name of this lab, `<pid>x<random hex>`.
    public let id: String
    /// The namespace holding the bridge.
    public let switchNamespace: String
    /// The first three octets of the lab's IPv4 /24, e.g. `198.18.7` (of its first subnet, in a routed lab).
    public let ipv4Prefix: String
    /// The first three octets of each subnet's /24: one for a flat lab; one per bridge of a routed lab.
    public let subnetPrefixes: [String]
    /// Whether the switch namespace routes between subnets (``createRouted(subnets:)``).
    public let isRouted: Bool
    /// The lab's IPv6 /64 (the first four groups, e.g. `fd12:3456:789a:1`), nil without IPv6.
    public let ipv6Prefix: String?

    private struct State {
        var hosts: [Host] = []
        var processes: [LabProcess] = []
        var tornDown = false
        /// Processes started so far (each gets a data folder of its own).
        var started = 0
    }

    private let state = Lock(State())

    private init(id: String, subnetPrefixes: [String], ipv6Prefix: String?, routed: Bool) {
        self.id = id
        self.switchNamespace = "\(Self.namePrefix)\(id)-sw"
        self.ipv4Prefix = subnetPrefixes[0]
        self.subnetPrefixes = subnetPrefixes
        self.ipv6Prefix = ipv6Prefix
        isRouted = routed
    }

    deinit { teardown() }

    // MARK: Availability

    /// Why the lab cannot run here (not root, `ip` missing, network namespaces unsupported), or nil if it can.
    ///
    /// Computed once per process; the check creates and deletes one namespace.
    public static var unavailableReason: String? { availability }

    private static let availability: String? = {
        guard geteuid() == 0 else {
            return "NetLab needs root to create network namespaces (running as uid \(geteuid())); "
                + "run the end-to-end tests as root, e.g. `sudo swift test --filter EndToEndTests`"
        }
        guard ipPath != nil else { return "`ip` from iproute2 is not installed (apt-get install iproute2)" }
        guard FileManager.default.fileExists(atPath: "/proc/self/ns/net") else {
            return "this kernel has no network namespaces (/proc/self/ns/net is missing)"
        }
        for tool in ["/bin/sh", "/bin/bash"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing"
        }
        let probe = "\(namePrefix)\(getpid())x0-probe"
        do {
            try ProcessLauncher.check(ipPath!, ["netns", "add", probe])
            try ProcessLauncher.check(ipPath!, ["netns", "delete", probe])
        } catch {
            return "cannot create a network namespace here: \(error)"
        }
        return nil
    }()

    static let namePrefix = "mpl"

    static let ipPath: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    // MARK: Creation

    /// Creates a lab of `hosts` namespaces joined by a bridge, and checks that host 0 reaches host 1.
    /// - Parameters:
    ///   - hosts: The number of hosts (1 through ``maximumHosts``).
    ///   - ipv6: Whether hosts get a unique local IPv6 address (and IPv6 at all).
    /// - Returns: The running lab; call ``teardown()`` (or use ``withNetLab(hosts:ipv6:_:)``) when done.
    /// - Throws: ``NetLabError`` if the lab is unavailable, a setup command fails, or the hosts cannot reach
    ///   each other. Whatever was created is removed before throwing.
    public static func create(hosts: Int, ipv6: Bool = true) throws -> NetLab {
        if let reason = unavailableReason { throw NetLabError.unavailable(reason) }
        precondition((1...maximumHosts).contains(hosts), "a lab has 1 to \(maximumHosts) hosts")
        installEmergencyCleanup()
        let id = "\(getpid())x\(String(UInt16.random(in: 0...UInt16.max), radix: 16))"
        // 198.18.0.0/15 is 512 /24s; a random one keeps concurrent labs apart even in captures.
        let subnet = Int.random(in: 0..<512)
        let ipv4Prefix = "198.\(18 + subnet / 256).\(subnet % 256)"
        // Groups without leading zeros: the canonical text form (RFC 5952) that `ip` and peers print.
        let ipv6Prefix: String? =
            ipv6
            ? String(
                format: "fd%02x:%x:%x:%x", UInt8.random(in: 0...255), UInt16.random(in: 0...UInt16.max),
                UInt16.random(in: 0...UInt16.max), UInt16.random(in: 0...UInt16.max))
            : nil
        let lab = NetLab(id: id, subnetPrefixes: [ipv4Prefix], ipv6Prefix: ipv6Prefix, routed: false)
        do {
            var script = lab.switchScript()
            for index in 0..<hosts { script += lab.hostScript(index: index, subnet: 0) }
            try ProcessLauncher.check("/bin/sh", ["-ec", script])
            lab.state.withLock { s in s.hosts = (0..<hosts).map { lab.makeHost(index: $0, subnet: 0) } }
            if hosts >= 2 {
                guard try lab.isReachable(from: 0, to: 1, attempts: 20) else {
                    throw NetLabError.noConnectivity("host 0 cannot reach host 1 at \(lab.hosts[1].ipv4)")
                }
            }
        } catch {
            lab.teardown()
            throw error
        }
        return lab
    }

    /// The lab's hosts, in index order.
    public var hosts: [Host] { state.withLock { $0.hosts } }

    /// Adds one host to the running lab (to test interfaces and peers appearing).
    /// - Returns: The new host, whose index is the previous host count.
    /// - Throws: ``NetLabError`` if a setup command fails.
    /// - Parameter subnet: The subnet it joins (0 in a flat lab).
    @discardableResult
    public func addHost(subnet: Int = 0) throws -> Host {
        let index = hosts.count
        precondition(index < Self.maximumHosts, "a lab has at most \(Self.maximumHosts) hosts")
        precondition(subnetPrefixes.indices.contains(subnet), "the lab has \(subnetPrefixes.count) subnets")
        try ProcessLauncher.check("/bin/sh", ["-ec", hostScript(index: index, subnet: subnet)])
        let host = makeHost(index: index, subnet: subnet)
        state.withLock { $0.hosts.append(host) }
        return host
    }

    /// Takes a host's `lab0` down (peers see it vanish; its sockets see the interface go away).
    /// - Parameter host: The host index.
    /// - Throws: ``NetLabError`` if `ip` fails.
    public func setLinkDown(host: Int) throws {
        let ns = try self.host(host).namespace
        try ProcessLauncher.check(Self.ipPath!, ["-n", ns, "link", "set", Self.interfaceName, "down"])
    }

    /// Brings a host's `lab0` back up and restores what a link-down removes (the multicast route, and in a routed
    /// lab the default route).
    /// - Parameter host: The host index.
    /// - Throws: ``NetLabError`` if `ip` fails.
    public func setLinkUp(host: Int) throws {
        let entry = try self.host(host)
        let ns = entry.namespace
        let ip = Self.ipPath!
        let lab0 = Self.interfaceName
        var script = """
            \(ip) -n \(ns) link set \(lab0) up
            \(ip) -n \(ns) route replace 224.0.0.0/4 dev \(lab0)

            """
        if let gateway = entry.gateway { script += "\(ip) -n \(ns) route replace default via \(gateway)\n" }
        try ProcessLauncher.check("/bin/sh", ["-ec", script])
    }

    // MARK: Processes

    /// Starts a process inside a host's namespace (`ip netns exec NS executable arguments…`).
    ///
    /// The process is tracked and killed by ``teardown()``; its stdout and stderr are captured.
    /// - Parameters:
    ///   - host: The host index.
    ///   - executable: A path, or a name looked up in `PATH`.
    ///   - arguments: The arguments.
    ///   - environment: Variables added to (or replacing those of) the test process's environment.
    ///   - interactive: Gives the process a stdin pipe for ``LabProcess/writeLine(_:)`` (else /dev/null).
    /// - Returns: A handle to read the output, signal the process and wait for it.
    /// - Throws: ``NetLabError`` if the lab was torn down or the process cannot start.
    public func spawn(
        host: Int, _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        interactive: Bool = false
    ) throws -> LabProcess {
        try spawn(
            namespace: try self.host(host).namespace, executable, arguments, environment: environment,
            interactive: interactive)
    }

    /// Starts a tracked process in one of the lab's namespaces (a host's, or the router's).
    func spawn(
        namespace ns: String, _ executable: String, _ arguments: [String], environment: [String: String]?,
        interactive: Bool
    ) throws -> LabProcess {
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment ?? [:] { env[key] = value }
        return try state.withLock { s in
            guard !s.tornDown else { throw NetLabError.unavailable("the lab \(id) was torn down") }
            // Each process has a data folder of its own (`XDG_DATA_HOME`, where peers keep their identity), so
            // processes of one lab are different peers unless the caller says otherwise.
            s.started += 1
            if environment?["XDG_DATA_HOME"] == nil {
                env["XDG_DATA_HOME"] = dataRoot.appendingPathComponent("p\(s.started)").path
            }
            let process = try ProcessLauncher.launch(
                Self.ipPath!, ["netns", "exec", ns, executable] + arguments, environment: env, interactive: interactive)
            s.processes.removeAll { $0.exitStatus != nil }
            s.processes.append(process)
            return process
        }
    }

    /// Runs a process inside a host's namespace to completion.
    /// - Parameters:
    ///   - host: The host index.
    ///   - executable: A path, or a name looked up in `PATH`.
    ///   - arguments: The arguments.
    ///   - environment: Variables added to the test process's environment.
    ///   - timeout: How long the process may run before it is killed.
    /// - Returns: The exit status (128 + signal if a signal ended it), stdout and stderr.
    /// - Throws: ``NetLabError/Code/timedOut`` if it ran too long, or a spawn error.
    public func run(
        host: Int, _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        timeout: Duration = .seconds(30)
    ) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try spawn(host: host, executable, arguments, environment: environment)
        guard let status = process.waitForExit(timeout: timeout) else {
            process.forceKill()
            throw NetLabError.timedOut(process.commandLine, after: timeout)
        }
        process.waitForStandardErrorClosed(timeout: .seconds(1))
        return (status, process.lines.joined(separator: "\n"), process.standardError)
    }

    /// Checks that a TCP connection attempt from one host to another gets an answer (refused: nothing
    /// listens on port 9, which proves packets travel both ways with no tool beyond bash).
    /// - Parameters:
    ///   - from: The source host index.
    ///   - to: The destination host index.
    ///   - ipv6: Whether to use the IPv6 addresses.
    ///   - attempts: How many tries, 100 ms apart, before giving up.
    /// - Returns: Whether the destination answered.
    /// - Throws: ``NetLabError`` if a command cannot run.
    public func isReachable(from: Int, to: Int, ipv6: Bool = false, attempts: Int = 3) throws -> Bool {
        let destination = try host(to)
        guard let address = ipv6 ? destination.ipv6 : destination.ipv4 else { return false }
        for attempt in 0..<attempts {
            if attempt > 0 { usleep(100_000) }
            let result = try run(
                host: from, "timeout", ["2", "/bin/bash", "-c", "echo > /dev/tcp/\(address)/9"],
                timeout: .seconds(5))
            if result.stderr.contains("Connection refused") { return true }
        }
        return false
    }

    // MARK: Teardown

    /// Kills every tracked process and every process left in the lab's namespaces, then deletes the namespaces
    /// (which removes their veth pairs and the bridge). Idempotent; also run by `deinit`.
    public func teardown() {
        let (processes, namespaces) = state.withLock { s -> ([LabProcess], [String]) in
            guard !s.tornDown else { return ([], []) }
            s.tornDown = true
            defer { s.processes.removeAll() }
            return (s.processes, [switchNamespace] + s.hosts.map(\.namespace))
        }
        guard !namespaces.isEmpty else { return }
        for process in processes { process.signal(SIGKILL) }
        // Hosts that failed half-way through creation are not in `hosts`: delete by prefix.
        Self.deleteNamespaces(Self.labNamespaces().filter { $0.hasPrefix("\(Self.namePrefix)\(id)-") })
        for process in processes { process.waitForExit(timeout: .seconds(5)) }
        try? FileManager.default.removeItem(at: dataRoot)
    }

    /// A routed lab (see ``createRouted(subnets:)``), not yet built.
    convenience init(routedID id: String, subnetPrefixes: [String]) {
        self.init(id: id, subnetPrefixes: subnetPrefixes, ipv6Prefix: nil, routed: true)
    }

    /// Records the hosts a creation made.
    func setHosts(_ hosts: [Host]) { state.withLock { $0.hosts = hosts } }

    /// Where the lab's processes keep their data (removed at teardown).
    private var dataRoot: URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("\(Self.namePrefix)\(id)-data", isDirectory: true)
    }

    // MARK: Private

    private func host(_ index: Int) throws -> Host {
        let hosts = self.hosts
        guard hosts.indices.contains(index) else { throw NetLabError.noSuchHost(index, count: hosts.count) }
        return hosts[index]
    }

    func makeHost(index: Int, subnet: Int) -> Host {
        Host(
            index: index, namespace: "\(Self.namePrefix)\(id)-h\(index)", interfaceName: Self.interfaceName,
            ipv4: "\(subnetPrefixes[subnet]).\(index + 10)", ipv6: ipv6Prefix.map { "\($0)::\(index + 10)" },
            subnet: subnet, gateway: isRouted ? routerAddress(subnet: subnet) : nil)
    }

    func switchScript() -> String {
        let ip = Self.ipPath!
        let sw = switchNamespace
        var script = """
            \(ip) netns add \(sw)
            \(ip) netns exec \(sw) /bin/sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
            echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
            \(ip) -n \(sw) link set lo up

            """
        for subnet in subnetPrefixes.indices {
            script += """
                \(ip) -n \(sw) link add br\(subnet) type bridge mcast_snooping 0 forward_delay 0 stp_state 0
                \(ip) -n \(sw) link set br\(subnet) up

                """
            if isRouted { script += "\(ip) -n \(sw) addr add \(routerAddress(subnet: subnet))/24 dev br\(subnet)\n" }
        }
        if isRouted { script += "\(ip) netns exec \(sw) /bin/sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'\n" }
        return script
    }

    func hostScript(index: Int, subnet: Int) -> String {
        let ip = Self.ipPath!
        let host = makeHost(index: index, subnet: subnet)
        let ns = host.namespace
        let lab0 = Self.interfaceName
        let sysctls =
            ipv6Prefix == nil
            ? "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"
            : "for c in all default; do echo 0 > /proc/sys/net/ipv6/conf/$c/accept_dad; "
                + "echo 1 > /proc/sys/net/ipv6/conf/$c/keep_addr_on_down; done"
        var script = """
            \(ip) netns add \(ns)
            \(ip) netns exec \(ns) /bin/sh -c '\(sysctls)'
            \(ip) -n \(switchNamespace) link add h\(index) type veth peer name \(lab0) netns \(ns)
            \(ip) -n \(switchNamespace) link set h\(index) master br\(subnet) up
            \(ip) -n \(ns) link set lo up
            \(ip) -n \(ns) addr add \(host.ipv4)/24 dev \(lab0)

            """
        if let v6 = host.ipv6 { script += "\(ip) -n \(ns) addr add \(v6)/64 dev \(lab0) nodad\n" }
        script += """
            \(ip) -n \(ns) link set \(lab0) up
            \(ip) -n \(ns) route add 224.0.0.0/4 dev \(lab0)

            """
        if let gateway = host.gateway { script += "\(ip) -n \(ns) route add default via \(gateway)\n" }
        return script
    }
}

/// Creates a lab, runs `body` with it and tears the lab down on every exit path, throwing included.
/// - Parameters:
///   - hosts: The number of hosts.
///   - ipv6: Whether hosts get IPv6 addresses.
///   - body: The code that uses the lab.
/// - Returns: What `body` returns.
/// - Throws: What ``NetLab/create(hosts:ipv6:)`` or `body` throws.
public func withNetLab<T>(
    hosts: Int, ipv6: Bool = true, _ body: (NetLab) async throws -> T
) async throws -> T {
    let lab = try NetLab.create(hosts: hosts, ipv6: ipv6)
    defer { lab.teardown() }
    return try await body(lab)
}
