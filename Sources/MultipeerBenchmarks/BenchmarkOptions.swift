import NetLab

/// The command line of `multipeer-bench`.
struct BenchmarkOptions {
    static let usage = """
        usage: multipeer-bench discovery [--runs N] [--quick] [--verbose] [--only LIST]
               multipeer-bench connection [--runs N] [--quick] [--verbose] [--only LIST] [--pairs N]
               multipeer-bench session [--runs N] [--quick] [--verbose] [--only LIST]
               multipeer-bench widearea [--runs N] [--only LIST]   (root, knot, coturn: a routed lab and loopback)
               multipeer-bench --only baseline [--quick]     (or: multipeer-bench baseline)
               multipeer-bench lock [--runs N]     (the project's Lock against Synchronization.Mutex)
               multipeer-bench scaling [--runs N] [--quick] [--sizes LIST] [--idle SECONDS] [--mesh all|one]
          every suite also takes --results FILE: its rows (ours, baseline, ratio, target, verdict) and the
                       machine as JSON, for scripts/bench/update_docs.py (scripts/bench.sh runs them all)
          --runs N     timed runs per scenario and tool (default 10 for discovery, 5 for connection)
          --quick      3 runs and less work per run: discovery starts 20 advertisers instead of 50, connection
                       moves a quarter of the bytes and messages; for baseline, about a quarter of the work
          --verbose    print every run's raw numbers (connection: and each measurement's start and end on stderr)
          --pairs N    connection benchmark 5: idle connection pairs to open (default 1000)
          --sizes LIST scaling: the numbers of peers, e.g. 2,4,8 (default 2,4,8,16,32,48,64)
          --idle S     scaling: the idle window after the mesh formed, in seconds (default 20, quick 5)
          --mesh MODE  scaling: `all` (default) every peer invites every other; `one` the first peer invites
                       everyone and introductions connect the rest
          --only LIST  comma-separated scenario numbers to run (discovery 1-7, connection 1-5, session 1-7,
                       widearea 1-5),
                       e.g. --only 1,2;
                       or `baseline` alone: the loopback TCP baselines (iperf3, raw TCP pump, raw framed
                       messages, raw ping-pong)
        """

    /// The benchmark to run: `discovery`, `connection`, `session`, `widearea`, `lock`, `scaling` or `baseline`.
    var suite = "discovery"
    /// Whether `--quick` was given.
    var quick = false
    /// Timed runs per scenario and tool (default 10 for discovery, 5 for connection, 3 with `--quick`).
    var runs = 10
    /// How many advertisers scenario 5 starts.
    var advertisers = 50
    /// Idle connection pairs of connection benchmark 5 (`--pairs`).
    var idlePairs = 1000
    /// Whether to print per-run raw numbers.
    var verbose = false
    /// The scenarios (benchmark numbers) to run; all of the suite's by default.
    var scenarios: Set<Int> = Set(1...7)
    /// Where to write the machine-readable results (`--results`), or nil.
    var resultsPath: String?
    /// The numbers of peers of the scaling suite (`--sizes`).
    var sizes = [2, 4, 8, 16, 32, 48, 64]
    /// Whether every peer of a scaling mesh invites every other (`--mesh all`) or only the first does (`one`).
    var inviteAll = true
    /// The scaling suite's idle window after the mesh formed, in seconds (`--idle`); nil for the default.
    var idleSeconds: Int?

    init(arguments: [String]) throws {
        var rest = arguments[...]
        // `--only baseline` may stand in for the suite name.
        if rest.starts(with: ["--only", "baseline"]) { rest = ["baseline"] + rest.dropFirst(2) }
        guard let suite = rest.popFirst(), !suite.hasPrefix("-") else { throw BenchmarkError(Self.usage) }
        guard ["discovery", "connection", "session", "baseline", "widearea", "lock", "scaling"].contains(suite) else {
            throw BenchmarkError("unknown benchmark '\(suite)'\n\(Self.usage)")
        }
        self.suite = suite
        let numbers = suite == "connection" ? 1...5 : 1...7
        scenarios = Set(numbers)
        if ["connection", "session", "widearea", "lock"].contains(suite) { runs = 5 }
        if suite == "scaling" { runs = 3 }
        var runsGiven = false
        while let argument = rest.popFirst() {
            switch argument {
            case "--runs":
                guard let text = rest.popFirst(), let value = Int(text), value > 0 else {
                    throw BenchmarkError("--runs wants a positive number")
                }
                runs = value
                runsGiven = true
            case "--quick":
                quick = true
                if !runsGiven { runs = 3 }
                advertisers = 20
            case "--pairs":
                guard let text = rest.popFirst(), let value = Int(text), value > 0 else {
                    throw BenchmarkError("--pairs wants a positive number")
                }
                idlePairs = value
            case "--results":
                guard let path = rest.popFirst() else { throw BenchmarkError("--results wants a file name") }
                resultsPath = path
            case "--sizes":
                guard let text = rest.popFirst() else { throw BenchmarkError("--sizes wants a list such as 2,4,8") }
                let chosen = text.split(separator: ",").compactMap { Int($0) }
                guard !chosen.isEmpty, chosen.allSatisfy({ (2...NetLab.maximumHosts).contains($0) }) else {
                    throw BenchmarkError(
                        "--sizes wants numbers of peers from 2 to \(NetLab.maximumHosts), not '\(text)'")
                }
                sizes = chosen
            case "--idle":
                guard let text = rest.popFirst(), let value = Int(text), value >= 0 else {
                    throw BenchmarkError("--idle wants a number of seconds")
                }
                idleSeconds = value
            case "--mesh":
                guard let text = rest.popFirst(), ["all", "one"].contains(text) else {
                    throw BenchmarkError("--mesh wants all or one")
                }
                inviteAll = text == "all"
            case "--verbose", "-v":
                verbose = true
            case "--only":
                guard let text = rest.popFirst() else { throw BenchmarkError("--only wants a list such as 1,2") }
                if text == "baseline" && suite == "baseline" { continue }
                let chosen = text.split(separator: ",").compactMap { Int($0) }
                guard !chosen.isEmpty, chosen.allSatisfy({ numbers.contains($0) }) else {
                    throw BenchmarkError(
                        "--only wants numbers \(numbers.lowerBound)-\(numbers.upperBound) for \(suite), not '\(text)'")
                }
                scenarios = Set(chosen)
            case "--help", "-h":
                throw BenchmarkError(Self.usage)
            default:
                throw BenchmarkError("unknown option '\(argument)'\n\(Self.usage)")
            }
        }
    }
}
