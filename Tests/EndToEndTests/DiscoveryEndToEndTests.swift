import Foundation
import NetLab
import TestIsolation
import Testing

/// The `multipeer advertise`/`browse` command-line contract, across lab hosts.
///
/// Contract: `multipeer advertise SERVICE --name NAME [--info KEY=VALUE]... [--interface IFNAME]...` prints
/// `advertising NAME` once announced (`renamed OLD -> NEW` after a conflict) and exits 0 after goodbyes on
/// SIGINT/SIGTERM; `multipeer browse SERVICE [--json] [--timeout SECONDS] [--interface IFNAME]...` prints one
/// JSON object per event (`event`, `name`, `info`, `port`, `addresses`, `interface`) and exits 0 at the timeout.
/// Each test lists what it needs (`.requires`): the lab, a built binary whose `--help` lists both commands
/// (MULTIPEER_REQUIRE_CLI=1 skips that check), and for the interop tests python-zeroconf or avahi.
// Serialized: several of these spawn dozens of processes; run side by side on 2 cores they starve each other and
// the timing bounds below would measure the machine rather than the protocol.
@Suite(.tags(.needsCLI), .serialized, .oneLabAtATime)
struct DiscoveryEndToEndTests {
    @Test(.requires(.netLab, .discoveryCLI)) func twoHostsFindEachOther() async throws {
        try await withNetLab(hosts: 2) { lab in
            _ = try await CLI.advertise(lab, host: 0, name: "Alpha", info: ["color": "red"])
            _ = try await CLI.advertise(lab, host: 1, name: "Bravo", info: ["color": "blue"])
            async let seenFrom0 = CLI.browse(lab, host: 0, seconds: 5)
            async let seenFrom1 = CLI.browse(lab, host: 1, seconds: 5)
            let (events0, events1) = try await (seenFrom0, seenFrom1)

            let bravo = try #require(events0.first { $0.event == "found" && $0.name == "Bravo" })
            #expect(bravo.info?["color"] == "blue")
            #expect(bravo.interface == "lab0")
            #expect(bravo.addresses?.contains(lab.hosts[1].ipv4) == true)
            #expect((bravo.port ?? 0) > 0)
            let alpha = try #require(events1.first { $0.event == "found" && $0.name == "Alpha" })
            #expect(alpha.info?["color"] == "red")
            #expect(alpha.addresses?.contains(lab.hosts[0].ipv4) == true)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func stoppingAnAdvertiserSendsAGoodbye() async throws {
        try await withNetLab(hosts: 2) { lab in
            let advertiser = try await CLI.advertise(lab, host: 0, name: "Leaving")
            let browser = try CLI.startBrowse(lab, host: 1, seconds: 30)
            #expect(await CLI.nextEvent(browser, "found", name: "Leaving") != nil)
            let stopped = ContinuousClock.now
            advertiser.signal(SIGTERM)
            let lost = await CLI.nextEvent(browser, "lost", name: "Leaving", timeout: .seconds(2))
            #expect(lost != nil, "goodbye seen within 2 s (after \(ContinuousClock.now - stopped))")
            #expect(await advertiser.exited(within: .seconds(5)) == 0, "\(advertiser.standardError)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aKilledAdvertiserIsLostWithinTheDefaultBound() async throws {
        try await withNetLab(hosts: 2) { lab in
            let advertiser = try await CLI.advertise(lab, host: 0, name: "Vanishing")
            let browser = try CLI.startBrowse(lab, host: 1, seconds: 40)
            #expect(await CLI.nextEvent(browser, "found", name: "Vanishing") != nil)
            advertiser.signal(SIGKILL)
            let lost = await CLI.nextEvent(browser, "lost", name: "Vanishing", timeout: .seconds(11))
            #expect(lost != nil, "a silent peer is lost within 10 s")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aTXTUpdateIsSeenAsUpdated() async throws {
        try await withNetLab(hosts: 2) { lab in
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("mp-info-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: file) }
            try "status=online\n".write(to: file, atomically: true, encoding: .utf8)
            let advertiser = try lab.spawn(
                host: 0, try MultipeerBinary.require(),
                CLI.advertiseArguments(name: "Changer") + ["--info-file", file.path])
            #expect(await advertiser.nextLine(timeout: .seconds(15), where: { $0.hasPrefix("advertising ") }) != nil)
            let browser = try CLI.startBrowse(lab, host: 1, seconds: 30)
            let found = await CLI.nextEvent(browser, "found", name: "Changer")
            #expect(found?.info?["status"] == "online")
            try "status=busy\n".write(to: file, atomically: true, encoding: .utf8)
            advertiser.signal(SIGHUP)
            // Other updates (an IPv6 address learnt later) may come first; wait for the one with the new TXT.
            let signalled = ContinuousClock.now
            var updated: BrowseEvent?
            var seen: [String] = []
            while updated == nil, ContinuousClock.now - signalled < .seconds(10) {
                guard let line = await browser.nextLine(timeout: .milliseconds(100)) else { continue }
                seen.append("\(ContinuousClock.now - signalled): \(line.prefix(80))")
                guard let event = BrowseEvent(line: line) else { continue }
                if event.event == "updated" && event.name == "Changer" && event.info?["status"] == "busy" {
                    updated = event
                }
            }
            #expect(updated != nil, "read: \(seen); browser printed: \(browser.lines); advertiser: \(advertiser.lines)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .avahiDaemon, .pythonZeroconf), .tags(.interop))
    func sharesPort5353WithAvahiOnTheSameHost() async throws {
        try await withNetLab(hosts: 2) { lab in
            let avahi = try AvahiHarness.start(lab, host: 0)
            defer { avahi.stop() }
            // Our advertiser and browser run beside avahi-daemon on host 0; both stacks hold port 5353.
            _ = try await CLI.advertise(lab, host: 0, name: "Beside Avahi", info: ["v": "1"])
            async let local = CLI.browse(lab, host: 0, seconds: 6)
            async let remote = ZeroconfHarness.browseEvents(lab, host: 1, seconds: 6)
            let (localEvents, remoteEvents) = try await (local, remote)
            #expect(localEvents.contains { $0.event == "found" && $0.name == "Avahi Chat" }, "\(localEvents)")
            #expect(remoteEvents.contains { $0.event == "found" && $0.name == "Beside Avahi" }, "\(remoteEvents)")
            #expect(remoteEvents.contains { $0.event == "found" && $0.name == "Avahi Chat" }, "\(remoteEvents)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func anInterfaceThatComesUpIsPickedUpWhileRunning() async throws {
        try await withNetLab(hosts: 2) { lab in
            try lab.setLinkDown(host: 0)
            let advertiser = try lab.spawn(
                host: 0, try MultipeerBinary.require(), CLI.advertiseArguments(name: "Late Link"))
            let browser = try CLI.startBrowse(lab, host: 1, seconds: 30)
            try await Task.sleep(for: .seconds(2))
            #expect(!browser.lines.contains { $0.contains("Late Link") }, "nothing can cross a link that is down")
            try lab.setLinkUp(host: 0)
            let found = await CLI.nextEvent(browser, "found", name: "Late Link", timeout: .seconds(10))
            #expect(found != nil, "advertiser: \(advertiser.lines) \(advertiser.standardError)")
            #expect(found?.addresses?.contains(lab.hosts[0].ipv4) == true)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func sameNameOnTwoHostsIsRenamedOnce() async throws {
        try await withNetLab(hosts: 3) { lab in
            let first = try await CLI.advertise(lab, host: 0, name: "Twin")
            let second = try lab.spawn(host: 1, try MultipeerBinary.require(), CLI.advertiseArguments(name: "Twin"))
            _ = await second.nextLine(timeout: .seconds(15)) { $0.hasPrefix("advertising ") }
            let renames = (first.lines + second.lines).filter { $0.hasPrefix("renamed Twin -> ") }
            #expect(renames.count == 1, "first: \(first.lines), second: \(second.lines)")
            let events = try await CLI.browse(lab, host: 2, seconds: 5)
            let names = Set(events.filter { $0.event == "found" }.map(\.name))
            #expect(names.count == 2 && names.contains("Twin"), "\(names)")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func oneBrowserFindsFiftyAdvertisers() async throws {
        try await withNetLab(hosts: 6) { lab in
            let binary = try MultipeerBinary.require()
            var advertisers: [String: LabProcess] = [:]
            for host in 1...5 {
                for number in 0..<10 {
                    let name = "Peer-\(host)-\(number)"
                    advertisers[name] = try lab.spawn(host: host, binary, CLI.advertiseArguments(name: name))
                }
            }
            var silent: [String] = []
            for (name, advertiser) in advertisers.sorted(by: { $0.key < $1.key }) {
                let line = await advertiser.nextLine(timeout: .seconds(30)) { $0.hasPrefix("advertising ") }
                if line == nil { silent.append(name) }
            }
            #expect(silent.isEmpty, "never announced: \(silent)")
            let events = try await CLI.browse(lab, host: 0, seconds: 10)
            let names = Set(events.filter { $0.event == "found" }.map(\.name))
            #expect(names == Set(advertisers.keys), "missing: \(Set(advertisers.keys).subtracting(names).sorted())")
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .python3)) func aPortHeldWithoutSharingIsExplained() async throws {
        try await withNetLab(hosts: 1) { lab in
            // A socket on UDP 5353 that sets neither SO_REUSEADDR nor SO_REUSEPORT: nobody can bind beside it.
            let holder = try lab.spawn(
                host: 0, Repository.python,
                [
                    "-c",
                    "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                        + "s.bind(('0.0.0.0', 5353))\nprint('bound', flush=True)\ntime.sleep(60)",
                ])
            defer { holder.forceKill() }
            try #require(await holder.nextLine(timeout: .seconds(10)) == "bound", "\(holder.standardError)")
            let binary = try MultipeerBinary.require()
            let browse = ["browse", CLI.service, "--timeout", "1", "--interface", NetLab.interfaceName]
            for command in [browse, CLI.advertiseArguments(name: "Blocked")] {
                let result = try await offPool { try lab.run(host: 0, binary, command, timeout: .seconds(15)) }
                #expect(result.status == 1, "\(command[0]): \(result.stdout) \(result.stderr)")
                #expect(
                    result.stderr.hasPrefix("multipeer: opening the mDNS sockets failed: bind: "), "\(result.stderr)")
                #expect(result.stderr.contains("another program holds UDP port 5353 without sharing it"))
                #expect(!result.stderr.contains(".swift:"), "a person is not shown our source location")
            }
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .pythonZeroconf), .tags(.interop))
    func pythonZeroconfResolvesOurAdvertisement() async throws {
        try await withNetLab(hosts: 2) { lab in
            _ = try await CLI.advertise(lab, host: 0, name: "Ours", info: ["color": "green", "v": "1"])
            let browser = try ZeroconfHarness.browse(lab, host: 1, timeout: 20)
            let found = try #require(await ZeroconfHarness.nextEvent(browser, "found", name: "Ours"))
            #expect(found.info?["color"] == "green")
            #expect(found.info?["v"] == "1")
            #expect((found.port ?? 0) > 0)
            #expect(found.addresses?.contains(lab.hosts[0].ipv4) == true)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .pythonZeroconf), .tags(.interop)) func ourBrowserFindsPythonZeroconf()
        async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let register = try await ZeroconfHarness.register(lab, host: 0, name: "Zed", port: 4242, txt: ["k": "v"])
            let events = try await CLI.browse(lab, host: 1, seconds: 5)
            let zed = try #require(events.first { $0.event == "found" && $0.name == "Zed" })
            #expect(zed.port == 4242)
            #expect(zed.info?["k"] == "v")
            #expect(zed.addresses?.contains(lab.hosts[0].ipv4) == true)
            register.signal(SIGTERM)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI, .avahiDaemon), .tags(.interop)) func ourBrowserFindsAnAvahiStaticService()
        async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let avahi = try AvahiHarness.start(lab, host: 0)
            defer { avahi.stop() }
            let events = try await CLI.browse(lab, host: 1, seconds: 5)
            let service = try #require(events.first { $0.event == "found" && $0.name == "Avahi Chat" })
            #expect(service.port == 4711)
            #expect(service.info?["origin"] == "avahi")
            // avahi answers IPv4 and IPv6 separately, so `found` may carry one family and `updated` the other.
            let latest = events.last { ($0.event == "found" || $0.event == "updated") && $0.name == "Avahi Chat" }
            #expect(latest?.addresses?.contains(lab.hosts[0].ipv4) == true, "\(events)")
        }
    }
}

/// Runs the built `multipeer` inside the lab, always on `lab0`.
enum CLI {
    static let service = "chat"

    static func advertiseArguments(name: String, info: [String: String] = [:]) -> [String] {
        ["advertise", service, "--name", name]
            + info.sorted { $0.key < $1.key }.flatMap { ["--info", "\($0.key)=\($0.value)"] }
            + ["--interface", NetLab.interfaceName]
    }

    /// Starts an advertiser and waits until it says it is announced.
    static func advertise(
        _ lab: NetLab, host: Int, name: String, info: [String: String] = [:]
    ) async throws -> LabProcess {
        let process = try lab.spawn(
            host: host, try MultipeerBinary.require(), advertiseArguments(name: name, info: info))
        guard await process.nextLine(timeout: .seconds(15), where: { $0.hasPrefix("advertising ") }) != nil else {
            throw HarnessError(
                message:
                    "`multipeer advertise` did not announce; stdout: \(process.lines), stderr: \(process.standardError)"
            )
        }
        return process
    }

    /// Starts `multipeer browse --json` for `seconds`.
    static func startBrowse(_ lab: NetLab, host: Int, seconds: Int) throws -> LabProcess {
        try lab.spawn(
            host: host, try MultipeerBinary.require(),
            ["browse", service, "--json", "--timeout", String(seconds), "--interface", NetLab.interfaceName])
    }

    /// Runs `multipeer browse --json` for `seconds` and returns its events; it must exit 0 at its timeout.
    static func browse(_ lab: NetLab, host: Int, seconds: Int) async throws -> [BrowseEvent] {
        let browser = try startBrowse(lab, host: host, seconds: seconds)
        let status = await browser.exited(within: .seconds(seconds + 10))
        #expect(status == 0, "`multipeer browse` status \(String(describing: status)): \(browser.standardError)")
        return BrowseEvent.parse(browser.lines)
    }

    /// Reads a running browser's output until an event of the given kind for the given name arrives.
    static func nextEvent(
        _ browser: LabProcess, _ kind: String, name: String, timeout: Duration = .seconds(15)
    ) async -> BrowseEvent? {
        await ZeroconfHarness.nextEvent(browser, kind, name: name, timeout: timeout)
    }
}
