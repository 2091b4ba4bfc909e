import Foundation
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

extension DiscoveryBenchmark {
    /// Scenarios 1 and 3 in the same runs: an advertiser starts next to a running browser (time to `found`), is
    /// left to finish announcing, then gets SIGTERM (time to `lost`, from its goodbye).
    func appearAndLeave() throws {
        progress("scenarios 1 and 3: advertiser starts / stops next to a running browser")
        let browsers = try Dictionary(
            uniqueKeysWithValues: DiscoveryTool.allCases.map { ($0, try startBrowser($0, host: 0)) })
        defer { browsers.values.forEach { stop($0) } }
        pause(.milliseconds(1500))
        var found: [DiscoveryTool: [Double?]] = [:]
        var lost: [DiscoveryTool: [Double?]] = [:]
        for run in 0..<options.runs {
            for tool in order(run) {
                let name = uniqueName("Appear")
                let (advertiser, start) = try spawn(
                    host: 1, tool.advertise(name: name, host: lab.hosts[1], paths: paths))
                let seen = delay(browsers[tool]!, "found", name, since: start, cap: .seconds(10))
                found[tool, default: []].append(seen)
                let announced = advertiser.next(within: .seconds(10), where: { $0.hasPrefix(tool.announcedPrefix) })
                if announced == nil || seen == nil {
                    notes.append(
                        "scenario 1 run \(run + 1) \(tool.label): announced \(announced != nil), found \(seen != nil)")
                }
                // Let the announcement sequence finish so the goodbye is measured from a steady state.
                pause(.milliseconds(1200))
                let signalled = ContinuousClock.now
                advertiser.process.signal(SIGTERM)
                lost[tool, default: []].append(delay(browsers[tool]!, "lost", name, since: signalled, cap: .seconds(5)))
                if advertiser.process.waitForExit(timeout: .seconds(5)) == nil { advertiser.process.forceKill() }
                progress(
                    "  run \(run + 1) \(tool.rawValue): found \(found[tool]!.last!.map { String(format: "%.3f", $0) } ?? "-") s, "
                        + "lost \(lost[tool]!.last!.map { String(format: "%.3f", $0) } ?? "-") s")
            }
        }
        rows.append(
            ResultRow(
                "1 browser running, advertiser starts", ours: found[.ours]!, baseline: found[.baseline]!, target: 1.0,
                cap: 10))
        rows.append(
            ResultRow(
                "3 advertiser stops (SIGTERM)", ours: lost[.ours]!, baseline: lost[.baseline]!, target: 0.3, cap: 5))
    }

    /// Scenario 2: a browser starts next to an announced advertiser (time to `found`), plus each tool's process
    /// start cost (spawn to exit of a browse with a zero timeout), measured in the same runs.
    func browserStarts() throws {
        progress("scenario 2: browser starts next to an announced advertiser")
        var advertisers: [DiscoveryTool: TimedLines] = [:]
        var names: [DiscoveryTool: String] = [:]
        for tool in DiscoveryTool.allCases {
            let name = uniqueName("Present")
            names[tool] = name
            advertisers[tool] = try startAdvertiser(tool, name: name, host: 1)
        }
        defer { advertisers.values.forEach { stop($0) } }
        pause(.milliseconds(2500))
        var found: [DiscoveryTool: [Double?]] = [:]
        var cost: [DiscoveryTool: [Double?]] = [:]
        for run in 0..<options.runs {
            for tool in order(run) {
                // RFC 6762 section 6: a responder multicasts a record at most once a second. A browser that starts
                // within a second of the previous one's query may have its multicast query ignored (python-zeroconf's
                // browser asks QM first; ours asks QU, answered by unicast), so every start gets a quiet second.
                pause(.milliseconds(1500))
                let (browser, start) = try spawn(host: 0, tool.browse(timeout: 30, host: lab.hosts[0], paths: paths))
                found[tool, default: []].append(delay(browser, "found", names[tool]!, since: start, cap: .seconds(10)))
                stop(browser)
                // Start cost: spawn to exit of the same browser with a zero timeout (no stamped reader attached,
                // so waitForExit is the only waiter on the process's semaphore).
                let costStart = ContinuousClock.now
                let process = try lab.spawn(
                    host: 0, tool.browse(timeout: 0, host: lab.hosts[0], paths: paths).0,
                    tool.browse(timeout: 0, host: lab.hosts[0], paths: paths).1)
                let status = process.waitForExit(timeout: .seconds(15))
                let elapsed = (ContinuousClock.now - costStart).seconds
                if status == nil { process.forceKill() }
                if status != 0 {
                    notes.append(
                        "scenario 2 start cost run \(run + 1) \(tool.label): exit status \(String(describing: status)): \(process.standardError.suffix(300))"
                    )
                }
                cost[tool, default: []].append(status == 0 ? elapsed : nil)
                progress(
                    "  run \(run + 1) \(tool.rawValue): found \(found[tool]!.last!.map { String(format: "%.3f", $0) } ?? "-") s, "
                        + "start cost \(String(format: "%.3f", elapsed)) s")
            }
        }
        func subtracted(_ tool: DiscoveryTool) -> [Double?] {
            zip(found[tool]!, cost[tool]!).map { f, c in
                guard let f, let c else { return nil }
                return f - c
            }
        }
        rows.append(
            ResultRow(
                "2 advertiser running, browser starts (raw)", ours: found[.ours]!, baseline: found[.baseline]!,
                target: 0.15, cap: 10))
        rows.append(
            ResultRow(
                "2a process start cost (browse --timeout 0)", ours: cost[.ours]!, baseline: cost[.baseline]!,
                target: nil))
        rows.append(
            ResultRow(
                "2b browser starts, minus start cost", ours: subtracted(.ours), baseline: subtracted(.baseline),
                target: nil))
    }

    /// Scenario 4: the advertiser is SIGKILLed (no goodbye); time until the browser reports it lost. Ours and the
    /// baseline run side by side (separate hosts and service types) to halve the wall time; the timestamps are
    /// per line, so waiting for one does not bias the other.
    func killedAdvertiser() throws {
        progress("scenario 4: advertiser SIGKILLed (no goodbye)")
        let cap = Duration.seconds(15)
        let hosts: [DiscoveryTool: (browser: Int, advertiser: Int)] = [.ours: (0, 1), .baseline: (2, 3)]
        let browsers = try Dictionary(
            uniqueKeysWithValues: DiscoveryTool.allCases.map { ($0, try startBrowser($0, host: hosts[$0]!.browser)) })
        defer { browsers.values.forEach { stop($0) } }
        pause(.milliseconds(1500))
        var lost: [DiscoveryTool: [Double?]] = [:]
        for run in 0..<options.runs {
            var advertisers: [DiscoveryTool: (TimedLines, String)] = [:]
            for tool in order(run) {
                let name = uniqueName("Killed")
                advertisers[tool] = (try startAdvertiser(tool, name: name, host: hosts[tool]!.advertiser), name)
            }
            for tool in DiscoveryTool.allCases {
                let name = advertisers[tool]!.1
                if delay(browsers[tool]!, "found", name, since: .now, cap: .seconds(10)) == nil {
                    notes.append("scenario 4 run \(run + 1) \(tool.label): \(name) never found")
                }
            }
            pause(.milliseconds(1200))
            var killed: [DiscoveryTool: ContinuousClock.Instant] = [:]
            for tool in order(run) {
                killed[tool] = .now
                advertisers[tool]!.0.process.signal(SIGKILL)
            }
            for tool in DiscoveryTool.allCases {
                lost[tool, default: []].append(
                    delay(browsers[tool]!, "lost", advertisers[tool]!.1, since: killed[tool]!, cap: cap))
            }
            for tool in DiscoveryTool.allCases { advertisers[tool]!.0.process.waitForExit(timeout: .seconds(5)) }
            progress(
                "  run \(run + 1): ours \(lost[.ours]!.last!.map { String(format: "%.3f", $0) } ?? "-") s, "
                    + "baseline \(lost[.baseline]!.last!.map { String(format: "%.3f s", $0) } ?? "not detected")")
        }
        rows.append(
            ResultRow(
                "4 advertiser killed (SIGKILL)", ours: lost[.ours]!, baseline: lost[.baseline]!, target: 10, cap: 15))
    }
}
