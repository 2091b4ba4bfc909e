import Foundation
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

/// `multipeer-bench scaling`: from 2 to 64 peers (`--sizes`), each peer a process in a network namespace of its own
/// in one NetLab lab. Per number of peers and run:
///
/// 1. **Discovery**: every peer a `multipeer chat SERVICE --accept none` (it advertises and browses, invites
///    nobody), all spawned at once; timed from the first spawn until every peer has printed `found` for every
///    other. Baseline in the same run, order alternating run by run: `scripts/bench/zc_peer.py`, one
///    python-zeroconf 0.47 process per peer that registers itself and browses (resolving what it finds, as
///    `scripts/interop/zc_browse.py` does). At that moment, resident memory (`VmRSS`) and CPU time (utime+stime)
///    of every peer, process start included.
/// 2. **Mesh formation**: every peer a `multipeer chat SERVICE --accept all --invite` every other name (all
///    invite all: the heaviest way to form a mesh, every pair's invitation crossing the other's; the engine
///    resolves simultaneous invitations, and introductions connect members who joined through someone else);
///    timed from the first spawn until every peer has printed `connected` for every other; the same run's time
///    until every peer had printed `found` for every other stands beside it. Then each peer's `VmRSS` and CPU
///    time, and its CPU time over an idle window (`--idle`, default 20 s) with the session formed.
///
/// Per-peer figures are the median over the peers of a run; rows give the median over the runs. Every per-size
/// median also goes into the results file as a series, from which `scripts/plot.py` draws docs/scaling.svg.
enum ScalingBenchmark {
    /// The target of the mesh row: docs/BENCHMARKS.md, Sessions, benchmark 2: a mesh of 32 from a cold start
    /// within 5 s. No target was set for other sizes or for the other rows (informational).
    static func meshTarget(peers: Int) -> ConnectionRow.Target { peers == 32 ? .atMost(5e9) : .none }

    /// How long a discovery run may take before it counts as not complete.
    static let discoveryCap = Duration.seconds(60)
    /// How long a mesh may take to form before the run counts as not complete.
    static let meshCap = Duration.seconds(120)

    /// What one discovery run measured; per-peer lists hold one value per peer.
    struct DiscoveryRun {
        /// Seconds from the first spawn until every peer had found every other, or nil.
        var time: Double?
        /// Resident bytes of each peer at that moment.
        var resident: [Double] = []
        /// CPU seconds of each peer until then.
        var cpu: [Double] = []
    }

    /// What one mesh run measured.
    struct MeshRun {
        /// Seconds from the first spawn until every peer was connected to every other, or nil.
        var mesh: Double?
        /// Seconds until every peer had found every other, same run, or nil.
        var found: Double?
        /// Resident bytes of each peer when the mesh had formed, and after the idle window.
        var resident: [Double] = []
        var residentAfterIdle: [Double] = []
        /// CPU seconds of each peer until the mesh had formed.
        var cpu: [Double] = []
        /// Percent of one core each peer used over the idle window.
        var idle: [Double] = []
    }

    static func run(_ options: BenchmarkOptions) throws -> Bool {
        let paths = try BenchmarkPaths()
        let started = Date()
        let sizes = options.sizes.sorted()
        let idle = options.idleSeconds ?? (options.quick ? 5 : 20)
        let runs = options.runs
        print("multipeer-bench scaling: \(sizes) peers, \(runs) run(s) each, \(machineDescription())")
        print("started \(ISO8601DateFormatter().string(from: started)), load average \(loadAverage())")
        print("baseline: python-zeroconf 0.47, one scripts/bench/zc_peer.py process per peer, same lab, same runs")
        let lab = try NetLab.create(hosts: sizes.max()!, ipv6: false)
        defer { lab.teardown() }
        var notes: [String] = []
        var rows: [ConnectionRow] = []
        for size in sizes {
            let load = loadAverage()
            var ours: [DiscoveryRun] = []
            var zeroconf: [DiscoveryRun] = []
            var meshes: [MeshRun] = []
            for run in 0..<runs {
                for tool in run % 2 == 0 ? [DiscoveryTool.ours, .baseline] : [.baseline, .ours] {
                    let result = try discover(tool, lab: lab, paths: paths, size: size, run: run, notes: &notes)
                    if tool == .ours { ours.append(result) } else { zeroconf.append(result) }
                    Thread.sleep(forTimeInterval: 1)
                }
                // A mesh that did not form within the cap once is not tried again at this size: each try costs
                // the whole cap, and the note of the first says how far it got.
                if run > 0, meshes.allSatisfy({ $0.mesh == nil }) { continue }
                meshes.append(
                    try mesh(
                        lab: lab, paths: paths, size: size, run: run, idle: idle, inviteAll: options.inviteAll,
                        notes: &notes))
                Thread.sleep(forTimeInterval: 1)
            }
            let sizeRows = rowsFor(size: size, ours: ours, zeroconf: zeroconf, meshes: meshes)
            for row in sizeRows {
                print(row.line)
                ResultLog.shared.add(row.record)
            }
            rows += sizeRows
            ResultLog.shared.addPoint(point(size: size, ours: ours, zeroconf: zeroconf, meshes: meshes))
            notes.append(
                "\(size) peers: load average \(load) at the start; \(ours.compactMap(\.time).count)/\(runs) discovery "
                    + "runs (ours), \(zeroconf.compactMap(\.time).count)/\(runs) (python-zeroconf) and "
                    + "\(meshes.compactMap(\.mesh).count)/\(meshes.count) meshes complete"
                    + (meshes.count < runs ? " (not tried again after the first did not form)" : ""))
        }
        notes.append(
            "every peer in a namespace of its own on one lab bridge; ours: `multipeer chat` (release), discovery "
                + "runs with `--accept none`, mesh runs with `--accept all` and "
                + (options.inviteAll
                    ? "`--invite` every other peer (all invite all)"
                    : "`--invite` every other peer on the first peer only (the rest joins by introductions)")
                + ", `--timeout 60 --max-peers N`; per-peer values are the median over the peers of a run, rows "
                + "the median over runs; CPU = utime+stime from /proc/PID/stat (process start included), memory = "
                + "VmRSS from /proc/PID/status; idle window \(idle) s after the mesh formed")
        print("notes:")
        for note in notes { print("  " + note) }
        notes.forEach(ResultLog.shared.addNote)
        print("took \(Int(-started.timeIntervalSinceNow)) s, load average \(loadAverage())")
        return true
    }

    // MARK: The runs

    /// Every peer advertises and browses; no invitations.
    static func discover(
        _ tool: DiscoveryTool, lab: NetLab, paths: BenchmarkPaths, size: Int, run: Int, notes: inout [String]
    ) throws -> DiscoveryRun {
        let names = (0..<size).map { "P\($0)" }
        let crowd = try Crowd(names: names) { index, name in
            switch tool {
            case .ours:
                try lab.spawn(
                    host: index, paths.multipeer,
                    [
                        "chat", "mp-scale-\(size)-\(run)", "--name", name, "--interface", NetLab.interfaceName,
                        "--accept", "none", "--line",
                    ], interactive: true)
            case .baseline:
                try lab.spawn(
                    host: index, paths.python,
                    [paths.zeroconfPeer, name, "_zs\(size)x\(run)._tcp", "--interface-ip", lab.hosts[index].ipv4])
            }
        }
        defer { crowd.stop() }
        let done = crowd.wait(for: ["found "], cap: discoveryCap)
        var result = DiscoveryRun()
        guard let found = done["found "] ?? nil else {
            notes.append(
                "\(size) peers, run \(run + 1), \(tool.label): discovery not complete after "
                    + "\(discoveryCap.components.seconds) s; peers found per peer: \(crowd.spread("found "))")
            return result
        }
        result.time = (found - crowd.start).seconds
        result.resident = crowd.pids.compactMap(residentBytes)
        result.cpu = crowd.pids.compactMap(cpuSeconds)
        progress(
            "\(size) peers, run \(run + 1), \(tool.rawValue): all discovered after "
                + String(format: "%.3f s", result.time!))
        return result
    }

    /// Every peer invites every other and accepts everyone; then an idle window.
    static func mesh(
        lab: NetLab, paths: BenchmarkPaths, size: Int, run: Int, idle: Int, inviteAll: Bool, notes: inout [String]
    ) throws -> MeshRun {
        let names = (0..<size).map { "P\($0)" }
        let crowd = try Crowd(names: names) { index, name in
            // All invite all, or the first peer invites everyone and introductions do the rest.
            let invited = inviteAll ? names.filter { $0 != name } : (index == 0 ? Array(names.dropFirst()) : [])
            let invites = invited.flatMap { ["--invite", $0] }
            return try lab.spawn(
                host: index, paths.multipeer,
                [
                    "chat", "mp-mesh-\(size)-\(run)", "--name", name, "--interface", NetLab.interfaceName,
                    "--accept", "all", "--line", "--timeout", "60", "--max-peers", String(size),
                ] + invites, interactive: true)
        }
        defer { crowd.stop() }
        let droppedBefore = backlogDrops()
        let done = crowd.wait(for: ["found ", "connected "], cap: meshCap)
        let dropped = backlogDrops() - droppedBefore
        var result = MeshRun()
        result.found = (done["found "] ?? nil).map { ($0 - crowd.start).seconds }
        guard let meshed = done["connected "] ?? nil else {
            notes.append(
                "\(size) peers, run \(run + 1): mesh not complete after \(meshCap.components.seconds) s; "
                    + "members connected per peer: \(crowd.spread("connected ")), load average \(loadAverage()), "
                    + "\(dropped) packets dropped by the kernel's input backlog meanwhile (softnet_stat); "
                    + "lines by first word: \(crowd.histogram())")
            return result
        }
        result.mesh = (meshed - crowd.start).seconds
        result.resident = crowd.pids.compactMap(residentBytes)
        let before = crowd.pids.map(cpuSeconds)
        result.cpu = before.compactMap { $0 }
        progress(
            "\(size) peers, run \(run + 1): mesh formed after " + String(format: "%.3f s", result.mesh!)
                + ", idle \(idle) s")
        let idleStart = ContinuousClock.now
        Thread.sleep(forTimeInterval: Double(idle))
        let elapsed = (ContinuousClock.now - idleStart).seconds
        for (pid, start) in zip(crowd.pids, before) {
            if let start, let end = cpuSeconds(pid), elapsed > 0 { result.idle.append((end - start) / elapsed * 100) }
        }
        result.residentAfterIdle = crowd.pids.compactMap(residentBytes)
        if dropped > 0 {
            notes.append(
                "\(size) peers, run \(run + 1): \(dropped) packets dropped by the kernel's input backlog while the "
                    + "mesh formed (softnet_stat, whole machine)")
        }
        let lost = crowd.lines.filter { $0.hasPrefix("disconnected ") || $0.hasPrefix("lost ") }.count
        if lost > 0 { notes.append("\(size) peers, run \(run + 1): \(lost) disconnected/lost lines after forming") }
        return result
    }

    // MARK: Rows and series

    static func rowsFor(size: Int, ours: [DiscoveryRun], zeroconf: [DiscoveryRun], meshes: [MeshRun])
        -> [ConnectionRow]
    {
        let nanoseconds = 1e9
        func median(_ values: [Double]) -> Double? { values.isEmpty ? nil : Summary(values).median }
        func perRun(_ runs: [DiscoveryRun], _ key: KeyPath<DiscoveryRun, [Double]>, scale: Double = 1) -> [Double] {
            runs.compactMap { median($0[keyPath: key]).map { $0 * scale } }
        }
        func perMesh(_ key: KeyPath<MeshRun, [Double]>, scale: Double = 1) -> [Double] {
            meshes.compactMap { median($0[keyPath: key]).map { $0 * scale } }
        }
        let zeroconfName = "python-zeroconf, one process per peer"
        return [
            ConnectionRow(
                "\(size) peers: all discovered", ours: ours.compactMap(\.time).map { $0 * nanoseconds },
                baseline: zeroconf.compactMap(\.time).map { $0 * nanoseconds }, unit: .milliseconds,
                baselineName: zeroconfName),
            ConnectionRow(
                "\(size) peers: RSS per peer, discovery", ours: perRun(ours, \.resident),
                baseline: perRun(zeroconf, \.resident), unit: .mebibytes, baselineName: zeroconfName),
            ConnectionRow(
                "\(size) peers: CPU per peer to discover", ours: perRun(ours, \.cpu, scale: nanoseconds),
                baseline: perRun(zeroconf, \.cpu, scale: nanoseconds), unit: .milliseconds,
                baselineName: zeroconfName),
            ConnectionRow(
                "\(size) peers: full mesh", ours: meshes.compactMap(\.mesh).map { $0 * nanoseconds },
                baseline: meshes.filter { $0.mesh != nil }.compactMap(\.found).map { $0 * nanoseconds },
                unit: .milliseconds, target: meshTarget(peers: size), baselineName: "all found, same run"),
            ConnectionRow("\(size) peers: RSS per peer, meshed", ours: perMesh(\.resident), unit: .mebibytes),
            ConnectionRow(
                "\(size) peers: CPU per peer to form mesh", ours: perMesh(\.cpu, scale: nanoseconds),
                unit: .milliseconds),
            ConnectionRow("\(size) peers: idle CPU per peer, meshed", ours: perMesh(\.idle), unit: .percent),
        ]
    }

    /// The per-size medians for the plot (a key is left out when no run produced it).
    static func point(size: Int, ours: [DiscoveryRun], zeroconf: [DiscoveryRun], meshes: [MeshRun])
        -> [String: Double]
    {
        func median(_ values: [Double]) -> Double? { values.isEmpty ? nil : Summary(values).median }
        func ofRuns<Run>(_ runs: [Run], _ key: KeyPath<Run, [Double]>, scale: Double = 1) -> Double? {
            median(runs.compactMap { median($0[keyPath: key]) }).map { $0 * scale }
        }
        let mebibyte = 1.0 / 1_048_576
        let values: [String: Double?] = [
            "peers": Double(size),
            "discovery_s": median(ours.compactMap(\.time)),
            "discovery_zeroconf_s": median(zeroconf.compactMap(\.time)),
            "mesh_s": median(meshes.compactMap(\.mesh)),
            "mesh_found_s": median(meshes.compactMap(\.found)),
            "rss_discovery_mib": ofRuns(ours, \.resident, scale: mebibyte),
            "rss_zeroconf_mib": ofRuns(zeroconf, \.resident, scale: mebibyte),
            "rss_mesh_mib": ofRuns(meshes, \.resident, scale: mebibyte),
            "rss_mesh_idle_mib": ofRuns(meshes, \.residentAfterIdle, scale: mebibyte),
            "cpu_discovery_s": ofRuns(ours, \.cpu),
            "cpu_zeroconf_s": ofRuns(zeroconf, \.cpu),
            "cpu_mesh_s": ofRuns(meshes, \.cpu),
            "idle_cpu_pct": ofRuns(meshes, \.idle),
        ]
        return values.compactMapValues { $0 }
    }

    // MARK: Processes

    /// Prints progress on stderr (the report goes to stdout).
    static func progress(_ text: String) {
        FileHandle.standardError.write(Data("[scaling] \(text)\n".utf8))
    }

    /// Resident memory of a process in bytes (`VmRSS` of `/proc/PID/status`), or nil if it is gone.
    static func residentBytes(_ pid: Int32) -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kibibytes = line.split(separator: " ").dropFirst().first.flatMap({ Double($0) })
        else { return nil }
        return kibibytes * 1024
    }

    /// Packets the kernel dropped because a CPU's input backlog was full (`/proc/net/softnet_stat`, second
    /// column, summed over CPUs; the whole machine, every namespace).
    static func backlogDrops() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/net/softnet_stat", encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").reduce(0) { sum, line in
            let fields = line.split(separator: " ")
            return sum + (fields.count > 1 ? Int(fields[1], radix: 16) ?? 0 : 0)
        }
    }

    /// CPU time of a process in seconds (utime+stime), or nil if it is gone.
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let ticks = try? DiscoveryBenchmark.cpuTicks(pid) else { return nil }
        return Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The processes of one run, one per peer, and what each has printed about the others.
    final class Crowd {
        let names: [String]
        let processes: [TimedLines]
        /// Just before the first spawn.
        let start: ContinuousClock.Instant
        /// Per process and line prefix: the other peers named so far, and when the last new one came.
        private var named: [[String: Set<String>]]
        private var completed: [[String: ContinuousClock.Instant]]
        /// Every line read, for diagnostics.
        private(set) var lines: [String] = []

        init(names: [String], spawn: (Int, String) throws -> LabProcess) throws {
            self.names = names
            start = ContinuousClock.now
            var processes: [TimedLines] = []
            do {
                for (index, name) in names.enumerated() { processes.append(TimedLines(try spawn(index, name))) }
            } catch {
                Self.stop(processes)
                throw error
            }
            self.processes = processes
            named = Array(repeating: [:], count: names.count)
            completed = Array(repeating: [:], count: names.count)
        }

        var pids: [Int32] { processes.map(\.process.pid) }

        /// Reads what came in, without waiting.
        private func drain(_ prefixes: [String]) {
            for (index, process) in processes.enumerated() {
                while let line = process.next(before: .now) {
                    lines.append(line.text)
                    for prefix in prefixes where line.text.hasPrefix(prefix) {
                        let words = line.text.split(separator: " ")
                        guard words.count > 1, words[1] != names[index] else { continue }
                        named[index][prefix, default: []].insert(String(words[1]))
                        if named[index][prefix]!.count == names.count - 1, completed[index][prefix] == nil {
                            completed[index][prefix] = line.time
                        }
                    }
                }
            }
        }

        /// Waits until every process has named every other peer on lines starting with each prefix, or `cap`
        /// after the start.
        /// - Returns: Per prefix, when the last process completed it, or nil if some never did.
        func wait(for prefixes: [String], cap: Duration) -> [String: ContinuousClock.Instant?] {
            let deadline = start + cap
            func result() -> [String: ContinuousClock.Instant?] {
                Dictionary(
                    uniqueKeysWithValues: prefixes.map { prefix in
                        let times = completed.map { $0[prefix] }
                        return (prefix, times.contains { $0 == nil } ? nil : times.compactMap { $0 }.max())
                    })
            }
            while true {
                drain(prefixes)
                let now = result()
                if now.values.allSatisfy({ $0 != nil }) || ContinuousClock.now >= deadline { return now }
                Thread.sleep(forTimeInterval: 0.02)
            }
        }

        /// How many others each process has named with `prefix`: min, median and max.
        func spread(_ prefix: String) -> String {
            let counts = named.map { $0[prefix]?.count ?? 0 }.sorted()
            return "min \(counts.first ?? 0), median \(counts[counts.count / 2]), max \(counts.last ?? 0) of "
                + "\(names.count - 1)"
        }

        /// How many lines each first word began, most frequent first (what the peers were saying).
        func histogram() -> String {
            var counts: [String: Int] = [:]
            for line in lines { counts[String(line.split(separator: " ").first ?? ""), default: 0] += 1 }
            // One example line of every kind that is not part of forming the mesh.
            let usual: Set<String> = ["found", "connected", "invited", "accepted", "invitation", "connecting"]
            var examples: [String: String] = [:]
            for line in lines {
                let word = String(line.split(separator: " ").first ?? "")
                if !usual.contains(word), examples[word] == nil { examples[word] = line }
            }
            return counts.sorted { $0.value > $1.value }.prefix(8).map { "\($0.key) \($0.value)" }
                .joined(separator: ", ")
                + (examples.isEmpty ? "" : "; e.g. " + examples.values.sorted().joined(separator: " | "))
        }

        /// Stops every process: SIGTERM, then SIGKILL for those still running after 10 s.
        func stop() { Self.stop(processes) }

        private static func stop(_ processes: [TimedLines]) {
            for process in processes { process.process.signal(SIGTERM) }
            let deadline = ContinuousClock.now + .seconds(10)
            for process in processes {
                let left = max(.zero, ContinuousClock.now.duration(to: deadline))
                if process.process.waitForExit(timeout: left) == nil { process.process.forceKill() }
            }
        }
    }
}
