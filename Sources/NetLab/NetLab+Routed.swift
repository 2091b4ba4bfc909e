import Foundation
import Glibc

extension NetLab {
    /// Creates a lab of several subnets joined by a router: the switch namespace holds one bridge per subnet, with
    /// the router's address (`.1`) on each, and forwards IPv4 between them (unicast only: nothing routes multicast,
    /// so multicast DNS stays on each subnet, as on real routed networks). Hosts get a default route through it.
    /// IPv4 only.
    ///
    /// The router runs what the tests put there (``spawnOnRouter(_:_:environment:)``): a DNS server, a TURN relay,
    /// its firewall (``separateSubnets()``) and NAT (``masquerade(subnet:)``).
    /// - Parameter subnets: How many hosts each subnet has; hosts are numbered across subnets in order.
    /// - Returns: The running lab.
    /// - Throws: ``NetLabError`` if the lab is unavailable, a setup command fails, or a host cannot reach the router.
    public static func createRouted(subnets: [Int]) throws -> NetLab {
        if let reason = unavailableReason { throw NetLabError.unavailable(reason) }
        precondition((2...8).contains(subnets.count), "a routed lab has 2 to 8 subnets")
        precondition(subnets.reduce(0, +) <= maximumHosts, "a lab has at most \(maximumHosts) hosts")
        installEmergencyCleanup()
        let id = "\(getpid())x\(String(UInt16.random(in: 0...UInt16.max), radix: 16))"
        // Distinct /24s of 198.18.0.0/15, one per subnet.
        var numbers = Set<Int>()
        while numbers.count < subnets.count { numbers.insert(Int.random(in: 0..<512)) }
        let prefixes = numbers.sorted().map { "198.\(18 + $0 / 256).\($0 % 256)" }
        let lab = NetLab(routedID: id, subnetPrefixes: prefixes)
        do {
            var script = lab.switchScript()
            var index = 0
            var made: [Host] = []
            for (subnet, count) in subnets.enumerated() {
                for _ in 0..<count {
                    script += lab.hostScript(index: index, subnet: subnet)
                    made.append(lab.makeHost(index: index, subnet: subnet))
                    index += 1
                }
            }
            try ProcessLauncher.check("/bin/sh", ["-ec", script])
            lab.setHosts(made)
            for host in made {
                guard try lab.routerReaches(host) else {
                    throw NetLabError.noConnectivity("the router cannot reach \(host)")
                }
            }
        } catch {
            lab.teardown()
            throw error
        }
        return lab
    }

    /// The router's address on a subnet (`.1` of its /24).
    public func routerAddress(subnet: Int) -> String { "\(subnetPrefixes[subnet]).1" }

    /// The router's namespace (the switch namespace of a routed lab).
    public var routerNamespace: String { switchNamespace }

    /// Starts a process in the router's namespace; tracked and killed at teardown like a host's.
    public func spawnOnRouter(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil
    ) throws -> LabProcess {
        try spawn(namespace: switchNamespace, executable, arguments, environment: environment, interactive: false)
    }

    /// Runs a command in the router's namespace to completion (firewall rules, say).
    /// - Throws: ``NetLabError`` when it fails, with its output.
    @discardableResult
    public func runOnRouter(_ executable: String, _ arguments: [String]) throws -> String {
        try ProcessLauncher.check(Self.ipPath!, ["netns", "exec", switchNamespace, executable] + arguments)
    }

    /// Drops everything the router would forward between subnets (each host still reaches the router itself).
    public func separateSubnets() throws {
        try runOnRouter("iptables", ["-P", "FORWARD", "DROP"])
    }

    /// Forwards between subnets again (undoes ``separateSubnets()``, keeps NAT rules).
    public func joinSubnets() throws {
        try runOnRouter("iptables", ["-P", "FORWARD", "ACCEPT"])
    }

    /// Puts a subnet behind NAT: its hosts' connections to other subnets leave with the router's address
    /// (masquerade), and connections from other subnets to it are dropped unless they answer one of its own.
    public func masquerade(subnet: Int) throws {
        let prefix = "\(subnetPrefixes[subnet]).0/24"
        try runOnRouter(
            "iptables", ["-t", "nat", "-A", "POSTROUTING", "-s", prefix, "!", "-d", prefix, "-j", "MASQUERADE"])
        try runOnRouter(
            "iptables",
            [
                "-A", "FORWARD", "-o", "br\(subnet)", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j",
                "ACCEPT",
            ])
        try runOnRouter("iptables", ["-A", "FORWARD", "-o", "br\(subnet)", "-j", "DROP"])
    }

    /// Whether the router's TCP probe to a host is answered (refused on port 9).
    private func routerReaches(_ host: Host) throws -> Bool {
        for attempt in 0..<20 {
            if attempt > 0 { usleep(100_000) }
            let result = try ProcessLauncher.run(
                Self.ipPath!,
                ["netns", "exec", switchNamespace, "timeout", "2", "/bin/bash", "-c", "echo > /dev/tcp/\(host.ipv4)/9"])
            if result.stderr.contains("Connection refused") { return true }
        }
        return false
    }
}
