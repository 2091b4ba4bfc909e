import Foundation
import NetLab
import TestIsolation
import Testing

/// The lab itself: layout, connectivity, multicast, isolation from the root namespace, cleanup.
@Suite(.requiresNetLab, .serialized, .ownThread)  // namespaces are made and removed by blocking calls
struct NetLabTests {
    init() {
        // Leftovers of killed runs would only confuse the namespace listings below.
        NetLab.sweepStale()
    }

    @Test func hostsReachEachOtherOverIPv4AndIPv6() async throws {
        try await withNetLab(hosts: 3) { lab in
            #expect(lab.hosts.map(\.index) == [0, 1, 2])
            #expect(lab.hosts.allSatisfy { $0.interfaceName == "lab0" && $0.ipv4.hasPrefix("198.1") })
            #expect(Set(lab.hosts.map(\.namespace)).count == 3)
            for from in 0..<3 {
                for to in 0..<3 where to != from {
                    let overIPv4 = try lab.isReachable(from: from, to: to)
                    let overIPv6 = try lab.isReachable(from: from, to: to, ipv6: true)
                    #expect(overIPv4, "IPv4 \(from) -> \(to)")
                    #expect(overIPv6, "IPv6 \(from) -> \(to)")
                }
            }
        }
    }

    @Test func hostsHaveTheDocumentedAddressesAndMulticastRoute() async throws {
        try await withNetLab(hosts: 2) { lab in
            let host = lab.hosts[1]
            let addresses = try lab.run(host: 1, "ip", ["-o", "addr", "show", "dev", "lab0"]).stdout
            #expect(addresses.contains("inet \(host.ipv4)/24"))
            let ipv6 = try #require(host.ipv6)
            #expect(addresses.contains("inet6 \(ipv6)/64"))
            #expect(!addresses.contains("tentative"), "DAD is off, so the address is usable at once")
            let routes = try lab.run(host: 1, "ip", ["route", "show"]).stdout
            #expect(routes.contains("224.0.0.0/4 dev lab0"))
            let loopback = try lab.run(host: 1, "ip", ["-o", "link", "show", "dev", "lo"]).stdout
            #expect(loopback.contains("UP"))
        }
    }

    @Test func multicastFromOneHostReachesAllOthers() async throws {
        try await withNetLab(hosts: 3) { lab in
            let group = "239.255.77.\(Int.random(in: 1...254))"
            var receivers: [LabProcess] = []
            for index in 1...2 {
                let receiver = try lab.spawn(
                    host: index, Repository.python, ["-c", Self.multicastReceiver, group, lab.hosts[index].ipv4])
                #expect(await receiver.nextLine(timeout: .seconds(10)) == "ready", "\(receiver.standardError)")
                receivers.append(receiver)
            }
            let sender = try lab.spawn(
                host: 0, Repository.python, ["-c", Self.multicastSender, group, lab.hosts[0].ipv4])
            for receiver in receivers {
                let line = await receiver.nextLine(timeout: .seconds(10))
                #expect(line == "hello-from \(lab.hosts[0].ipv4)", "\(receiver.standardError)")
            }
            sender.signal(SIGTERM)
        }
    }

    @Test func nothingIsAddedToTheRootNamespace() async throws {
        let before = try Self.rootNamespaceSnapshot()
        try await withNetLab(hosts: 3) { lab in
            _ = try lab.addHost()
            let during = try Self.rootNamespaceSnapshot()
            #expect(during == before)
        }
        #expect(try Self.rootNamespaceSnapshot() == before)
    }

    @Test func teardownRemovesEveryNamespaceEvenWhenTheBodyThrows() async throws {
        struct Boom: Error {}
        var labID = ""
        var process: LabProcess?
        await #expect(throws: Boom.self) {
            try await withNetLab(hosts: 2) { lab in
                labID = lab.id
                process = try lab.spawn(host: 1, "sleep", ["600"])
                #expect(Self.namespaces(of: lab.id).count == 3)
                throw Boom()
            }
        }
        #expect(!labID.isEmpty)
        #expect(Self.namespaces(of: labID).isEmpty)
        #expect(process?.exitStatus != nil, "the tracked process was killed")
    }

    @Test func teardownIsIdempotent() throws {
        let lab = try NetLab.create(hosts: 1, ipv6: false)
        #expect(lab.hosts[0].ipv6 == nil)
        lab.teardown()
        lab.teardown()
        #expect(Self.namespaces(of: lab.id).isEmpty)
        #expect(throws: NetLabError.self) { try lab.spawn(host: 0, "true", []) }
    }

    @Test func addedHostJoinsAndLinksGoDownAndUp() async throws {
        try await withNetLab(hosts: 2) { lab in
            let added = try lab.addHost()
            #expect(added.index == 2)
            #expect(try lab.isReachable(from: 0, to: 2, attempts: 10))
            try lab.setLinkDown(host: 1)
            #expect(try !lab.isReachable(from: 0, to: 1, attempts: 1))
            try lab.setLinkUp(host: 1)
            #expect(try lab.isReachable(from: 0, to: 1, attempts: 10))
            let routes = try lab.run(host: 1, "ip", ["route", "show"]).stdout
            #expect(routes.contains("224.0.0.0/4 dev lab0"))
        }
    }

    @Test func processesStreamLinesTakeSignalsAndReportStatus() async throws {
        try await withNetLab(hosts: 1) { lab in
            let script = "trap 'echo got-term; exit 3' TERM; echo one; echo two; while :; do sleep 0.05; done"
            let process = try lab.spawn(host: 0, "/bin/bash", ["-c", script])
            #expect(process.readLine(timeout: .seconds(5)) == "one")
            #expect(await process.nextLine(timeout: .seconds(5)) == "two")
            #expect(process.readLine(timeout: .milliseconds(100)) == nil)
            process.signal(SIGTERM)
            #expect(await process.nextLine(timeout: .seconds(5)) == "got-term")
            #expect(process.waitForExit(timeout: .seconds(5)) == 3)
            #expect(process.lines == ["one", "two", "got-term"])

            let killed = try lab.spawn(host: 0, "sleep", ["600"])
            killed.signal(SIGKILL)
            #expect(await killed.exited(within: .seconds(5)) == 128 + SIGKILL)

            let result = try lab.run(host: 0, "/bin/sh", ["-c", "echo out; echo err >&2; exit 7"])
            #expect(result.status == 7 && result.stdout == "out" && result.stderr == "err\n")
            #expect(throws: NetLabError.self) {
                try lab.run(host: 0, "sleep", ["10"], timeout: .milliseconds(200))
            }
        }
    }

    @Test func sweepRemovesNamespacesOfDeadProcessesOnly() throws {
        // A pid above the kernel's pid_max cannot be alive.
        let dead = "mpl99999999x1-h0"
        _ = try Subprocess.run("/usr/sbin/ip", ["netns", "add", dead])
        let live = try NetLab.create(hosts: 1)
        defer { live.teardown() }
        let swept = NetLab.sweepStale()
        #expect(swept.contains(dead))
        #expect(!Self.allNamespaces().contains(dead))
        #expect(Self.namespaces(of: live.id).count == 2)
    }

    @Test func setupAndTeardownAreQuick() throws {
        for hosts in [2, 10] {
            let clock = ContinuousClock()
            var lab: NetLab?
            let setup = try clock.measure { lab = try NetLab.create(hosts: hosts) }
            let teardown = clock.measure { lab?.teardown() }
            print("NetLab with \(hosts) hosts: setup \(setup), teardown \(teardown)")
            #expect(setup < .seconds(10) && teardown < .seconds(10))
        }
    }

    // MARK: Helpers

    static let multicastReceiver = """
        import socket, sys
        group, ip = sys.argv[1], sys.argv[2]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", 5599))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + socket.inet_aton(ip))
        s.settimeout(15)
        print("ready", flush=True)
        data, source = s.recvfrom(512)
        print(data.decode(), flush=True)
        """

    static let multicastSender = """
        import socket, sys, time
        group, ip = sys.argv[1], sys.argv[2]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ip))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        for _ in range(50):
            s.sendto(("hello-from " + ip).encode(), (group, 5599))
            time.sleep(0.1)
        """

    /// Links, addresses and routes of the root namespace, in a form that ignores counters and timers.
    static func rootNamespaceSnapshot() throws -> [String] {
        var snapshot: [String] = []
        for arguments in [["-o", "link"], ["-o", "addr"], ["route"], ["-6", "route"]] {
            let output = try Subprocess.run("/usr/sbin/ip", arguments).stdout
            snapshot += output.split(separator: "\n").map { line in
                // Address lifetimes count down; everything else must stay identical.
                String(line).replacingOccurrences(
                    of: #"(valid|preferred)_lft \S+"#, with: "$1_lft", options: .regularExpression)
            }
        }
        return snapshot
    }

    static func allNamespaces() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/run/netns")) ?? []).sorted()
    }

    static func namespaces(of labID: String) -> [String] {
        allNamespaces().filter { $0.hasPrefix("mpl\(labID)-") }
    }
}
