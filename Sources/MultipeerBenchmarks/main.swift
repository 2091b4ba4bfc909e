import Foundation
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

// multipeer-bench: discovery latency, scale, idle CPU and memory of ours against python-zeroconf, measured in the
// same run inside a throw-away network-namespace lab; `connection`: throughput, message rate, round trips, connect
// time and idle memory of PeerConnection on loopback against the baselines measured in the same runs
// (ConnectionBenchmark*.swift); `baseline`: the loopback TCP baselines alone (Baseline*.swift); `session`,
// `widearea`, `lock`; `scaling`: 2 to 64 `multipeer chat` peers in a lab (ScalingBenchmark.swift). With
// `--results FILE` every suite also writes its rows as JSON (ResultLog.swift). See docs/BENCHMARKS.md.

func machineDescription() -> String {
    "nproc \(ProcessInfo.processInfo.activeProcessorCount), kernel \(kernelRelease())"
}

/// The running kernel's release (`uname -r`).
func kernelRelease() -> String {
    var names = utsname()
    uname(&names)
    return withUnsafeBytes(of: &names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
}

func runDiscovery(_ options: BenchmarkOptions) throws {
    let paths = try BenchmarkPaths()
    var rows: [ResultRow] = []
    var notes: [String] = []
    let started = Date()
    if options.scenarios.contains(7) {
        let (row, memoryNotes) = try DiscoveryBenchmark.cacheMemory(paths: paths, instances: 1000)
        rows.append(row)
        notes += memoryNotes
    }
    if !options.scenarios.subtracting([7]).isEmpty {
        let lab = try NetLab.create(hosts: 6)
        defer { lab.teardown() }
        let benchmark = DiscoveryBenchmark(lab: lab, paths: paths, options: options)
        if options.scenarios.contains(1) || options.scenarios.contains(3) { try benchmark.appearAndLeave() }
        if options.scenarios.contains(2) { try benchmark.browserStarts() }
        if options.scenarios.contains(4) { try benchmark.killedAdvertiser() }
        if options.scenarios.contains(5) { try benchmark.crowd() }
        if options.scenarios.contains(6) { try benchmark.idleCPU() }
        rows = benchmark.rows + rows
        notes = benchmark.notes + notes
    }
    rows.sort { $0.label < $1.label }
    print("multipeer-bench discovery: \(options.runs) runs per scenario and tool, \(machineDescription())")
    print("started \(ISO8601DateFormatter().string(from: started)), took \(Int(-started.timeIntervalSinceNow)) s")
    print("baseline: python-zeroconf 0.47 (scripts/interop), same lab, interleaved run by run")
    for row in rows {
        print(row.line)
        ResultLog.shared.add(row.record)
    }
    if options.verbose {
        print("raw per-run values:")
        for row in rows { row.rawLines.forEach { print($0) } }
    }
    if !notes.isEmpty {
        print("notes:")
        for note in notes { print("  " + note) }
    }
    notes.forEach(ResultLog.shared.addNote)
}

let options: BenchmarkOptions
do {
    options = try BenchmarkOptions(arguments: Array(CommandLine.arguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("multipeer-bench: \(error)\n".utf8))
    exit(2)
}
let started = Date()
let loadAtStart = loadAverage()
var status: Int32 = 0
do {
    let succeeded: Bool
    switch options.suite {
    case "baseline": succeeded = runBaselines(options)
    case "connection": succeeded = try runConnection(options)
    case "session": succeeded = try runSession(options)
    case "lock":
        LockBenchmark.run(options)
        succeeded = true
    case "widearea": succeeded = WideAreaBenchmark.run(options)
    case "scaling": succeeded = try ScalingBenchmark.run(options)
    default:
        try runDiscovery(options)
        succeeded = true
    }
    status = succeeded ? 0 : 1
} catch {
    FileHandle.standardError.write(Data("multipeer-bench: \(error)\n".utf8))
    // What was measured before the error still goes into the results file, with the error as a failed row.
    ResultLog.shared.add(.failed("\(options.suite) (stopped)", error))
    status = error is BenchmarkError ? 2 : 1
}
if let path = options.resultsPath {
    do {
        try ResultLog.shared.write(to: path, options: options, started: started, loadAtStart: loadAtStart)
    } catch {
        FileHandle.standardError.write(Data("multipeer-bench: cannot write \(path): \(error)\n".utf8))
        status = 1
    }
}
exit(status)
