import Foundation
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

extension DiscoveryBenchmark {
    /// Scenario 5: `options.advertisers` advertisers spread over hosts 1-5 are spawned at once next to a running
    /// browser on host 0; time from the first spawn until the browser has reported every one of them found.
    func crowd() throws {
        let count = options.advertisers
        progress("scenario 5: \(count) advertisers on 5 hosts, one browser")
        let cap = Duration.seconds(60)
        var all: [DiscoveryTool: [Double?]] = [:]
        for run in 0..<options.runs {
            for tool in order(run) {
                let browser = try startBrowser(tool, host: 0)
                pause(.milliseconds(1000))
                var expected = Set<String>()
                var advertisers: [TimedLines] = []
                let start = ContinuousClock.now
                for index in 0..<count {
                    let host = 1 + index % 5
                    let name = uniqueName("Crowd-h\(host)")
                    expected.insert(name)
                    advertisers.append(
                        try spawn(host: host, tool.advertise(name: name, host: lab.hosts[host], paths: paths)).0)
                }
                let spawned = (ContinuousClock.now - start).seconds
                var missing = expected
                var last: Double?
                let deadline = start + cap
                while !missing.isEmpty, let line = browser.next(before: deadline) {
                    if let event = BrowseEvent(line.text), event.event == "found", missing.remove(event.name) != nil,
                        missing.isEmpty
                    {
                        last = (line.time - start).seconds
                    }
                }
                all[tool, default: []].append(last)
                if !missing.isEmpty {
                    notes.append(
                        "scenario 5 run \(run + 1) \(tool.label): \(missing.count) of \(count) not found within 60 s")
                }
                progress(
                    "  run \(run + 1) \(tool.rawValue): all found after \(last.map { String(format: "%.3f", $0) } ?? "-") s "
                        + "(spawning took \(String(format: "%.3f", spawned)) s, \(count - missing.count)/\(count) found)"
                )
                for advertiser in advertisers { advertiser.process.signal(SIGTERM) }
                for advertiser in advertisers where advertiser.process.waitForExit(timeout: .seconds(10)) == nil {
                    advertiser.process.forceKill()
                }
                stop(browser)
            }
        }
        rows.append(
            ResultRow(
                "5 \(count) advertisers, all found", ours: all[.ours]!, baseline: all[.baseline]!, target: 3, cap: 60))
    }

    /// Scenario 6: CPU time of an announced responder over 10 s with one of our browsers (periodic and liveness
    /// queries) running next to it, from `/proc/PID/stat` utime+stime (clock ticks).
    func idleCPU() throws {
        progress("scenario 6: idle CPU of a responder over 10 s")
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let window = Duration.seconds(10)
        // Ours: advertiser on host 1, our browser on host 0; baseline: registrant on host 3, our browser on host 2
        // browsing the baseline's type (same querier for both, so both see the same query load).
        var advertisers: [DiscoveryTool: TimedLines] = [:]
        var browsers: [DiscoveryTool: TimedLines] = [:]
        defer {
            advertisers.values.forEach { stop($0) }
            browsers.values.forEach { stop($0) }
        }
        let placement: [DiscoveryTool: (browser: Int, advertiser: Int)] = [.ours: (0, 1), .baseline: (2, 3)]
        var names: [DiscoveryTool: String] = [:]
        for tool in DiscoveryTool.allCases {
            let name = uniqueName("Idle")
            names[tool] = name
            advertisers[tool] = try startAdvertiser(tool, name: name, host: placement[tool]!.advertiser)
            let host = lab.hosts[placement[tool]!.browser]
            let command = (
                paths.multipeer,
                ["browse", tool.serviceType, "--json", "--timeout", "3600", "--interface", host.interfaceName]
            )
            browsers[tool] = try spawn(host: host.index, command).0
        }
        for tool in DiscoveryTool.allCases
        where delay(browsers[tool]!, "found", names[tool]!, since: .now, cap: .seconds(10)) == nil {
            notes.append("scenario 6 \(tool.label): our browser never found \(names[tool]!)")
        }
        // Past the announcements and the browser's first queries.
        pause(.seconds(3))
        var before: [Int32: Int] = [:]
        let pids = DiscoveryTool.allCases.flatMap { [advertisers[$0]!.process.pid, browsers[$0]!.process.pid] }
        for pid in pids { before[pid] = try Self.cpuTicks(pid) }
        let start = ContinuousClock.now
        pause(window)
        let elapsed = (ContinuousClock.now - start).seconds
        var percent: [Int32: Double] = [:]
        var ticks: [Int32: Int] = [:]
        for pid in pids {
            ticks[pid] = try Self.cpuTicks(pid) - before[pid]!
            percent[pid] = Double(ticks[pid]!) / ticksPerSecond / elapsed * 100
        }
        let ours = advertisers[.ours]!.process.pid
        let baseline = advertisers[.baseline]!.process.pid
        rows.append(
            ResultRow(
                "6 idle responder CPU (10 s, browser nearby)", ours: [percent[ours]], baseline: [percent[baseline]],
                target: 100 / ticksPerSecond / elapsed, unit: .percent))
        notes.append(
            String(
                format:
                    "scenario 6: over %.1f s the responders used %d (ours) and %d (python-zeroconf) clock ticks of %.0f ms; "
                    + "our browsers next to them used %d and %d ticks. Resolution: 1 tick = %.0f ms = %.2f %% of one core over the window.",
                elapsed, ticks[ours]!, ticks[baseline]!, 1000 / ticksPerSecond, ticks[browsers[.ours]!.process.pid]!,
                ticks[browsers[.baseline]!.process.pid]!, 1000 / ticksPerSecond, 100 / ticksPerSecond / elapsed))
    }

    /// utime + stime of a process in clock ticks (fields 14 and 15 of `/proc/PID/stat`).
    static func cpuTicks(_ pid: Int32) throws -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { throw BenchmarkError("cannot read /proc/\(pid)/stat (did the process exit?)") }
        // After "pid (comm) ", fields start at 3 (state); utime is field 14, stime 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Int(fields[11]), let system = Int(fields[12]) else {
            throw BenchmarkError("unexpected /proc/\(pid)/stat: \(text)")
        }
        return user + system
    }
}
