import Foundation
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

/// Runs the discovery scenarios of ours and the baseline in one network-namespace lab, interleaved run by run.
///
/// Host 0 (and 2) run browsers, host 1 (and 3) single advertisers, hosts 1-5 the crowd of scenario 5. Every
/// timing starts at `ContinuousClock.now` taken just before the spawn or signal and ends at the instant the
/// ``TimedLines`` reader thread took the matching line off the pipe.
final class DiscoveryBenchmark {
    let lab: NetLab
    let paths: BenchmarkPaths
    let options: BenchmarkOptions
    /// Rows collected so far, in report order.
    var rows: [ResultRow] = []
    /// Extra report lines (explanations, diagnostics).
    var notes: [String] = []
    private var counter = 0

    init(lab: NetLab, paths: BenchmarkPaths, options: BenchmarkOptions) {
        self.lab = lab
        self.paths = paths
        self.options = options
    }

    /// The tools in the order of run `run`: alternating, so neither always goes first.
    func order(_ run: Int) -> [DiscoveryTool] { run % 2 == 0 ? [.ours, .baseline] : [.baseline, .ours] }

    /// A fresh instance name.
    func uniqueName(_ prefix: String) -> String {
        counter += 1
        return "\(prefix)-\(counter)"
    }

    /// Prints progress on stderr (the report goes to stdout).
    func progress(_ text: String) {
        FileHandle.standardError.write(Data("[bench] \(text)\n".utf8))
    }

    /// Spawns a command on a host and starts stamping its lines.
    func spawn(host: Int, _ command: (String, [String])) throws -> (TimedLines, ContinuousClock.Instant) {
        let start = ContinuousClock.now
        let process = try lab.spawn(host: host, command.0, command.1)
        return (TimedLines(process), start)
    }

    /// Starts an advertiser and waits until it reports being announced.
    func startAdvertiser(_ tool: DiscoveryTool, name: String, host: Int) throws -> TimedLines {
        let (lines, _) = try spawn(host: host, tool.advertise(name: name, host: lab.hosts[host], paths: paths))
        guard lines.next(within: .seconds(20), where: { $0.hasPrefix(tool.announcedPrefix) }) != nil else {
            let process = lines.process
            throw BenchmarkError(
                "\(tool.label) advertiser \(name) did not announce within 20 s; stdout \(process.lines), "
                    + "stderr: \(process.standardError)")
        }
        return lines
    }

    /// Starts a long-running browser.
    func startBrowser(_ tool: DiscoveryTool, host: Int, lostTimeout: Int? = nil) throws -> TimedLines {
        try spawn(host: host, tool.browse(timeout: 3600, host: lab.hosts[host], paths: paths, lostTimeout: lostTimeout))
            .0
    }

    /// Waits for `event` about `name` and returns its delay after `start` in seconds, or nil after `cap`.
    func delay(
        _ lines: TimedLines, _ event: String, _ name: String, since start: ContinuousClock.Instant, cap: Duration
    ) -> Double? {
        let deadline = start + cap
        while let line = lines.next(before: deadline) {
            if BrowseEvent.matches(line.text, event, name) { return (line.time - start).seconds }
        }
        return nil
    }

    /// Stops a process politely (SIGTERM), then by force after `grace`.
    func stop(_ lines: TimedLines, grace: Duration = .seconds(5)) {
        lines.process.signal(SIGTERM)
        if lines.process.waitForExit(timeout: grace) == nil { lines.process.forceKill() }
    }

    /// Sleeps the calling thread.
    func pause(_ duration: Duration) {
        Thread.sleep(forTimeInterval: duration.seconds)
    }
}

extension Duration {
    /// This duration in seconds.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
