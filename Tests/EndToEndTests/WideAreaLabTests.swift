import Foundation
import NetLab
import TestIsolation
import Testing

/// Peers on different subnets: a router namespace that forwards unicast but not multicast, with Knot (the zone
/// `lab.test`, updates signed with one TSIG key) and coturn on it. `multipeer chat` finds peers through the DNS
/// server, links directly where the router forwards, through the relay where a firewall rule or NAT stands in the
/// way, and says what the DNS server refused.
@Suite(.tags(.needsCLI), .serialized, .oneLabAtATime)
struct WideAreaLabTests {
    static let service = "mp-wide-e2e"

    /// The servers on the router and the files the peers' options name.
    struct Servers {
        let lab: NetLab
        let knot: KnotServer
        let turn: TurnServer
        let folder: URL

        var router: String { lab.routerAddress(subnet: 0) }
        var keyFile: String { folder.appendingPathComponent("tsig.key").path }
        var passwordFile: String { folder.appendingPathComponent("relay.password").path }

        /// `--domain`, `--dns-server`, `--dns-key`, and the relay's three options when asked for.
        func options(relay: Bool, keyFile: String? = nil) -> [String] {
            var options = ["--domain", "lab.test", "--dns-server", router, "--dns-key", keyFile ?? self.keyFile]
            if relay {
                options += [
                    "--relay", "\(router):\(turn.port)", "--relay-user", turn.username, "--relay-password-file",
                    passwordFile,
                ]
            }
            return options
        }

        func stop() {
            knot.stop()
            turn.stop()
            try? FileManager.default.removeItem(at: folder)
        }
    }

    /// A routed lab with Knot and coturn on the router, and the key and password files (mode 0600).
    static func withServers(subnets: [Int], _ body: (Servers) async throws -> Void) async throws {
        let lab = try NetLab.createRouted(subnets: subnets)
        defer { lab.teardown() }
        let prefix = ["ip", "netns", "exec", lab.routerNamespace]
        let router = lab.routerAddress(subnet: 0)
        let knot = try KnotServer(address: router, port: 53, prefix: prefix)
        let turn = try TurnServer(address: router, port: 3478, prefix: prefix)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-wide-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let servers = Servers(lab: lab, knot: knot, turn: turn, folder: folder)
        defer { servers.stop() }
        for (path, text) in [(servers.keyFile, knot.keyLine), (servers.passwordFile, turn.password)] {
            _ = FileManager.default.createFile(
                atPath: path, contents: Data((text + "\n").utf8), attributes: [.posixPermissions: 0o600])
        }
        try await body(servers)
    }

    static func chat(_ lab: NetLab, host: Int, name: String, _ options: [String]) throws -> LabProcess {
        try lab.spawn(
            host: host, try MultipeerBinary.require(),
            ["chat", service, "--name", name, "--interface", NetLab.interfaceName, "--log-level=info"] + options,
            interactive: true)
    }

    /// Waits for a line on stdout (or stderr, with `stderr: true`) containing `text`.
    @discardableResult
    static func expect(
        _ process: LabProcess, _ text: String, stderr: Bool = false, within timeout: Duration = .seconds(30),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> Bool {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        func seen() -> Bool {
            stderr ? process.standardError.contains(text) : process.lines.contains { $0.contains(text) }
        }
        while !seen(), ContinuousClock.now < deadline, process.exitStatus == nil {
            try? await Task.sleep(for: .milliseconds(50))
        }
        if seen() { return true }
        let what = "no \(stderr ? "stderr " : "")line with '\(text)' from \(process.commandLine)"
        let output = "\(process.lines) \(process.standardError.suffix(3000))"
        Issue.record("\(what): \(output)", sourceLocation: sourceLocation)
        return false
    }

    static func leave(_ processes: LabProcess...) async {
        for process in processes { process.closeInput() }
        for process in processes { _ = await process.exited(within: .seconds(15)) }
    }

    @Test(.requires(.netLab, .discoveryCLI, .wideAreaServers))
    func peersOnRoutedSubnetsFindEachOtherThroughDNSAndLinkDirectly() async throws {
        try await Self.withServers(subnets: [1, 1]) { servers in
            let lab = servers.lab
            let alpha = try Self.chat(lab, host: 0, name: "Alpha", ["--accept", "all"] + servers.options(relay: false))
            let bravo = try Self.chat(
                lab, host: 1, name: "Bravo", ["--invite", "Alpha"] + servers.options(relay: false))
            // Multicast does not cross the router: Bravo can only have found Alpha through the DNS server.
            await Self.expect(alpha, "registered Alpha", stderr: true)
            await Self.expect(bravo, "found Alpha")
            await Self.expect(bravo, "connected Alpha")
            await Self.expect(alpha, "connected Bravo")
            // Linked directly: Bravo's connection is to Alpha's own address.
            await Self.expect(bravo, "\(lab.hosts[0].ipv4):", stderr: true)
            #expect(!bravo.standardError.contains("through the relay"))
            bravo.writeLine("hello across the router")
            await Self.expect(alpha, "message Bravo: hello across the router")
            // The zone holds Alpha's records; after it leaves, they are gone.
            let typeName = "_\(Self.service)._tcp.lab.test."
            #expect(
                try servers.knot.dig(
                    [typeName, "PTR", "+short"], prefix: ["ip", "netns", "exec", lab.routerNamespace]
                ).contains("alpha"))
            await Self.leave(alpha, bravo)
            let ptr = try servers.knot.dig(
                [typeName, "PTR", "+short"], prefix: ["ip", "netns", "exec", lab.routerNamespace])
            #expect(ptr.isEmpty, "records left after both peers stopped: \(ptr)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .wideAreaServers))
    func subnetsCutOffFromEachOtherLinkThroughTheRelayAndResumeAfterACut() async throws {
        try await Self.withServers(subnets: [1, 1]) { servers in
            let lab = servers.lab
            try lab.separateSubnets()
            // A silent link counts as lost after 1 s here (6 s by default), so a 3 s cut makes both reconnect.
            let quick = ["--silence-timeout", "1"]
            let alpha = try Self.chat(
                lab, host: 0, name: "Alpha", ["--accept", "all"] + quick + servers.options(relay: true))
            let bravo = try Self.chat(
                lab, host: 1, name: "Bravo", ["--invite", "Alpha"] + quick + servers.options(relay: true))
            await Self.expect(alpha, "relayed at", stderr: true)
            await Self.expect(bravo, "connected Alpha", within: .seconds(45))
            await Self.expect(alpha, "connected Bravo")
            await Self.expect(bravo, "through the relay", stderr: true)
            await Self.expect(alpha, "came through the relay", stderr: true)
            for index in 0..<20 { bravo.writeLine("relayed \(index)") }
            await Self.expect(alpha, "message Bravo: relayed 19")
            let lines = alpha.lines.filter { $0.hasPrefix("message Bravo: relayed ") }
            #expect(lines == (0..<20).map { "message Bravo: relayed \($0)" })
            // A cut of Bravo's link longer than the 6 s after which a silent link counts as lost: both keep each
            // other `reconnecting` (10 s of grace), Bravo redials through the relay once its link is back, and what
            // was sent meanwhile arrives, once.
            try lab.setLinkDown(host: 1)
            bravo.writeLine("sent during the cut")
            try await Task.sleep(for: .seconds(3))
            try lab.setLinkUp(host: 1)
            await Self.expect(alpha, "reconnecting Bravo", within: .seconds(5))
            if !(await Self.expect(alpha, "reconnected Bravo", within: .seconds(20))) {
                Issue.record("Bravo's side: \(bravo.lines) \(bravo.standardError.suffix(6000))")
            }
            await Self.expect(alpha, "message Bravo: sent during the cut", within: .seconds(45))
            #expect(alpha.lines.filter { $0 == "message Bravo: sent during the cut" }.count == 1)
            #expect(!alpha.lines.contains { $0.hasPrefix("disconnected Bravo") }, "\(alpha.lines)")
            await Self.leave(alpha, bravo)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .wideAreaServers))
    func aFileCrossesTheRelayWithItsChecksum() async throws {
        try await Self.withServers(subnets: [1, 1]) { servers in
            let lab = servers.lab
            try lab.separateSubnets()
            let binary = try MultipeerBinary.require()
            let folder = servers.folder.appendingPathComponent("files")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let source = folder.appendingPathComponent("photo.bin")
            var bytes = [UInt8](repeating: 0, count: 3 << 20)
            for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 2_654_435_761 >> 13) }
            try Data(bytes).write(to: source)
            let inbox = folder.appendingPathComponent("inbox")
            try FileManager.default.createDirectory(at: inbox, withIntermediateDirectories: true)
            let receiver = try lab.spawn(
                host: 0, binary,
                [
                    "receive", "--service", Self.service, "--name", "Keeper", "--dir", inbox.path, "--yes",
                    "--interface", NetLab.interfaceName, "--log-level=info",
                ] + servers.options(relay: true))
            let sender = try lab.spawn(
                host: 1, binary,
                [
                    "send", source.path, "--to", "Keeper", "--service", Self.service, "--name", "Giver",
                    "--interface", NetLab.interfaceName, "--log-level=info",
                ] + servers.options(relay: true))
            let status = await sender.exited(within: .seconds(90))
            #expect(status == 0, "\(sender.lines) \(sender.standardError.suffix(3000))")
            // `sent NAME SIZE sha256 DIGEST to PEER`
            let words = sender.lines.first { $0.hasPrefix("sent ") }?.split(separator: " ").map(String.init) ?? []
            let digest = words.firstIndex(of: "sha256").flatMap { $0 + 1 < words.count ? words[$0 + 1] : nil }
            await Self.expect(receiver, "received photo.bin")
            #expect(digest != nil && receiver.lines.contains { $0.contains(digest!) }, "\(receiver.lines)")
            #expect(try Data(contentsOf: inbox.appendingPathComponent("photo.bin")) == Data(bytes))
            #expect(sender.standardError.contains("through the relay"))
            receiver.signal(SIGINT)
            _ = await receiver.exited(within: .seconds(10))
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .wideAreaServers))
    func aPeerBehindNATIsReachedThroughTheRelay() async throws {
        try await Self.withServers(subnets: [1, 1]) { servers in
            let lab = servers.lab
            // Bravo's subnet is behind NAT: Bravo reaches Alpha, Alpha cannot open a connection to Bravo.
            try lab.masquerade(subnet: 1)
            let bravo = try Self.chat(lab, host: 1, name: "Bravo", ["--accept", "all"] + servers.options(relay: true))
            await Self.expect(bravo, "relayed at", stderr: true)
            let alpha = try Self.chat(
                lab, host: 0, name: "Alpha", ["--invite", "Bravo"] + servers.options(relay: true))
            await Self.expect(alpha, "found Bravo")
            await Self.expect(alpha, "connected Bravo", within: .seconds(45))
            await Self.expect(alpha, "through the relay", stderr: true)
            alpha.writeLine("through the NAT")
            await Self.expect(bravo, "message Alpha: through the NAT")
            await Self.leave(alpha, bravo)
        }
    }

    @Test(.requires(.netLab, .wideAreaServers))
    func anAppleStyleAppReadsTheServersFromTheEnvironment() async throws {
        // The tutorials' ConnectedColors, unchanged, on two subnets cut off from each other: the environment names
        // the DNS server, its key and the relay, and the two find each other through the one and link through the
        // other.
        try await Self.withServers(subnets: [1, 1]) { servers in
            let lab = servers.lab
            try lab.separateSubnets()
            let binary = try MultipeerBinary.require(named: "ConnectedColors")
            let environment = [
                "MULTIPEER_INTERFACE": NetLab.interfaceName, "MULTIPEER_DOMAIN": "lab.test",
                "MULTIPEER_DNS_SERVER": servers.router, "MULTIPEER_DNS_KEY": servers.keyFile,
                "MULTIPEER_RELAY": "\(servers.router):\(servers.turn.port)",
                "MULTIPEER_RELAY_USER": servers.turn.username,
                "MULTIPEER_RELAY_PASSWORD_FILE": servers.passwordFile, "MULTIPEER_LOG": "info",
            ]
            func home(_ name: String) throws -> [String: String] {
                let folder = servers.folder.appendingPathComponent("home-\(name)")
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                return ["HOME": folder.path, "XDG_CONFIG_HOME": folder.path, "XDG_DATA_HOME": folder.path]
            }
            let ann = try lab.spawn(
                host: 0, binary, ["Ann"], environment: environment.merging(try home("Ann")) { $1 }, interactive: true)
            let ben = try lab.spawn(
                host: 1, binary, ["Ben"], environment: environment.merging(try home("Ben")) { $1 }, interactive: true)
            await Self.expect(ann, "connected: Ben", within: .seconds(60))
            await Self.expect(ben, "connected: Ann", within: .seconds(60))
            #expect(ann.writeLine("yellow"))
            await Self.expect(ben, "color yellow")
            #expect((ann.standardError + ben.standardError).contains("through the relay"))
            await Self.leave(ann, ben)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .wideAreaServers))
    func aWrongKeyIsRefusedWithTheReasonAndTheLinkStillWorks() async throws {
        try await Self.withServers(subnets: [2, 1]) { servers in
            let lab = servers.lab
            let wrong = servers.folder.appendingPathComponent("wrong.key").path
            _ = FileManager.default.createFile(
                atPath: wrong,
                contents: Data("hmac-sha256:mp-key.:\(Data(repeating: 9, count: 32).base64EncodedString())\n".utf8),
                attributes: [.posixPermissions: 0o600])
            let alpha = try Self.chat(
                lab, host: 0, name: "Alpha", ["--accept", "all"] + servers.options(relay: false, keyFile: wrong))
            await Self.expect(alpha, "BADSIG", stderr: true)
            await Self.expect(alpha, "NOTAUTH", stderr: true)
            // Nothing entered the zone; a peer on Alpha's own subnet still finds it by multicast DNS.
            let ptr = try servers.knot.dig(
                ["_\(Self.service)._tcp.lab.test.", "PTR", "+short"],
                prefix: ["ip", "netns", "exec", lab.routerNamespace])
            #expect(ptr.isEmpty)
            let neighbour = try Self.chat(lab, host: 1, name: "Nell", ["--invite", "Alpha"])
            await Self.expect(neighbour, "connected Alpha")
            // A key file others can read is refused before anything is sent.
            let open = servers.folder.appendingPathComponent("open.key").path
            _ = FileManager.default.createFile(
                atPath: open, contents: Data(servers.knot.keyLine.utf8), attributes: [.posixPermissions: 0o644])
            let refused = try lab.run(
                host: 2, try MultipeerBinary.require(),
                ["chat", Self.service, "--name", "Oscar"] + servers.options(relay: false, keyFile: open))
            #expect(refused.status == 64 && refused.stderr.contains("chmod 600"), "\(refused.stderr)")
            await Self.leave(alpha, neighbour)
        }
    }
}
