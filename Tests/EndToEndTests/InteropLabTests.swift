import Foundation
import NetLab
import TestIsolation
import Testing

/// Proves the lab and the harness with software we did not write: python-zeroconf and avahi find each other
/// across hosts, so a failure in the discovery tests points at our code, not at the lab.
@Suite(.tags(.interop))
struct InteropLabTests {
    @Test(.requires(.netLab, .pythonZeroconf)) func pythonZeroconfFindsPythonZeroconfAndSeesTheGoodbye() async throws {
        try await withNetLab(hosts: 2) { lab in
            let register = try await ZeroconfHarness.register(
                lab, host: 0, name: "Interop Zed", port: 4242, txt: ["a": "1", "color": "blue"])
            let browser = try ZeroconfHarness.browse(lab, host: 1, timeout: 20)
            let found = try #require(await ZeroconfHarness.nextEvent(browser, "found", name: "Interop Zed"))
            #expect(found.port == 4242)
            #expect(found.info == ["a": "1", "color": "blue"])
            #expect(found.addresses?.contains(lab.hosts[0].ipv4) == true)

            register.signal(SIGTERM)
            #expect(await register.exited(within: .seconds(10)) == 0, "\(register.standardError)")
            let lost = await ZeroconfHarness.nextEvent(browser, "lost", name: "Interop Zed", timeout: .seconds(3))
            #expect(lost != nil, "a goodbye is seen within 3 s")
        }
    }

    @Test(.requires(.netLab, .pythonZeroconf, .avahiDaemon)) func pythonZeroconfFindsAStaticAvahiService() async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let avahi = try AvahiHarness.start(lab, host: 0)
            defer { avahi.stop() }
            let browser = try ZeroconfHarness.browse(lab, host: 1, timeout: 20)
            let found = try #require(
                await ZeroconfHarness.nextEvent(browser, "found", name: "Avahi Chat"),
                "avahi said: \(avahi.process.standardError)")
            #expect(found.port == 4711)
            #expect(found.info?["origin"] == "avahi")
            #expect(found.addresses?.contains(lab.hosts[0].ipv4) == true)
        }
    }

    @Test(.requires(.netLab, .pythonZeroconf, .avahiDaemon, .avahiBrowse, .dbusDaemon))
    func avahiBrowseOnAPrivateBusFindsPythonZeroconf() async throws {
        try await withNetLab(hosts: 2) { lab in
            let register = try await ZeroconfHarness.register(
                lab, host: 0, name: "Zed For Avahi", port: 4243, txt: ["k": "v"])
            let avahi = try AvahiHarness.start(lab, host: 1, dbus: true, services: [])
            defer { avahi.stop() }
            // avahi-browse -t stops once its cache is complete; give the daemon a moment to start first.
            var resolved: String?
            for _ in 0..<10 where resolved == nil {
                try await Task.sleep(for: .milliseconds(500))
                let arguments = [
                    Repository.interopScript("avahi_browse_ns.sh"), lab.hosts[1].namespace, avahi.workDirectory,
                ]
                let result = try await offPool {
                    try lab.run(host: 1, "/bin/bash", arguments, timeout: .seconds(20))
                }
                resolved = result.stdout.split(separator: "\n").map(String.init).first {
                    $0.hasPrefix("=;lab0;IPv4;Zed\\032For\\032Avahi;_chat._tcp")
                }
            }
            let line = try #require(resolved, "avahi said: \(avahi.process.standardError)")
            #expect(line.contains(";\(lab.hosts[0].ipv4);4243;\"k=v\""))
            register.signal(SIGTERM)
        }
    }
}

/// Runs the python-zeroconf scripts of `scripts/interop` inside the lab.
enum ZeroconfHarness {
    /// Starts `zc_register.py` on a host and waits until it reports `registered`.
    static func register(
        _ lab: NetLab, host: Int, name: String, type: String = "_chat._tcp", port: Int,
        txt: [String: String] = [:]
    ) async throws -> LabProcess {
        let arguments =
            [Repository.interopScript("zc_register.py"), name, type, String(port)]
            + txt.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            + ["--interface-ip", lab.hosts[host].ipv4]
        let process = try lab.spawn(host: host, Repository.python, arguments, environment: ["PYTHONUNBUFFERED": "1"])
        // Probing and announcing take about 2 s in python-zeroconf.
        guard let line = await process.nextLine(timeout: .seconds(15)), line.hasPrefix("registered") else {
            throw HarnessError(message: "zc_register.py did not register: \(process.standardError)")
        }
        return process
    }

    /// Starts `zc_browse.py` on a host; it prints JSON events until `timeout` seconds have passed.
    static func browse(_ lab: NetLab, host: Int, type: String = "_chat._tcp", timeout: Int) throws -> LabProcess {
        try lab.spawn(
            host: host, Repository.python,
            [
                Repository.interopScript("zc_browse.py"), type, "--timeout", String(timeout), "--interface-ip",
                lab.hosts[host].ipv4,
            ],
            environment: ["PYTHONUNBUFFERED": "1"])
    }

    /// Runs `zc_browse.py` for `seconds` and returns every event it printed.
    static func browseEvents(_ lab: NetLab, host: Int, seconds: Int) async throws -> [BrowseEvent] {
        let browser = try browse(lab, host: host, timeout: seconds)
        _ = await browser.exited(within: .seconds(seconds + 15))
        return BrowseEvent.parse(browser.lines)
    }

    /// Reads a browser's output until an event of the given kind for the given name arrives.
    static func nextEvent(
        _ browser: LabProcess, _ kind: String, name: String, timeout: Duration = .seconds(15)
    ) async -> BrowseEvent? {
        let line = await browser.nextLine(timeout: timeout) { line in
            guard let event = BrowseEvent(line: line) else { return false }
            return event.event == kind && event.name == name
        }
        return line.flatMap { BrowseEvent(line: $0) }
    }
}

/// Runs `scripts/interop/avahi_ns.sh` inside the lab, with a work directory of its own.
struct AvahiHarness {
    /// The avahi-daemon process (through its wrapper).
    let process: LabProcess
    /// Holds its configuration, services and runtime directories (and the private bus socket).
    let workDirectory: String

    /// Starts avahi-daemon on a host publishing the given static service files (default: a `_chat._tcp`
    /// service named "Avahi Chat" on port 4711 with TXT origin=avahi) and waits until it is up.
    static func start(
        _ lab: NetLab, host: Int, dbus: Bool = false,
        services: [String] = [Repository.interopScript("chat.service")]
    ) throws -> AvahiHarness {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("avahi-\(UUID().uuidString)").path
        let arguments =
            [Repository.interopScript("avahi_ns.sh"), lab.hosts[host].namespace, work]
            + (dbus ? ["--dbus"] : []) + ["--host-name", "avahi-h\(host)-\(lab.id)"] + services
        let process = try lab.spawn(host: host, "/bin/bash", arguments)
        let harness = AvahiHarness(process: process, workDirectory: work)
        // avahi-daemon logs to stderr; wait for its startup message.
        let deadline = ContinuousClock.now + .seconds(15)
        while !process.standardError.contains("Server startup complete") {
            guard ContinuousClock.now < deadline, process.exitStatus == nil else {
                harness.stop()
                throw HarnessError(message: "avahi-daemon did not start: \(process.standardError)")
            }
            usleep(50_000)
        }
        return harness
    }

    /// Stops avahi-daemon (it sends goodbyes on SIGTERM) and removes its work directory.
    func stop() {
        process.signal(SIGTERM)
        if process.waitForExit(timeout: .seconds(5)) == nil { process.forceKill() }
        try? FileManager.default.removeItem(atPath: workDirectory)
    }
}

/// A harness process did not come up; the message carries its error output.
struct HarnessError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
