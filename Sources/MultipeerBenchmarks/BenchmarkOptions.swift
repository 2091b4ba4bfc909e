/// The command line of `multipeer-bench`.
struct BenchmarkOptions {
    static let usage = """
        usage: multipeer-bench discovery [--runs N] [--quick] [--verbose] [--only LIST]
               multipeer-bench --only baseline [--quick]     (or: multipeer-bench baseline)
          --runs N     timed runs per scenario and tool (default 10)
          --quick      3 runs and 20 advertisers instead of 50; for baseline, about a quarter of the work
          --verbose    print every run's raw numbers
          --only LIST  comma-separated scenario numbers to run (1-7), e.g. --only 1,2; or `baseline` alone:
                       the loopback TCP baselines (iperf3, raw TCP pump, raw framed messages, raw ping-pong)
        """

    /// The benchmark to run: `discovery` or `baseline`.
    var suite = "discovery"
    /// Whether `--quick` was given.
    var quick = false
    /// Timed runs per scenario and tool.
    var runs = 10
    /// How many advertisers scenario 5 starts.
    var advertisers = 50
    /// Whether to print per-run raw numbers.
    var verbose = false
    /// The scenarios to run.
    var scenarios: Set<Int> = Set(1...7)

    init(arguments: [String]) throws {
        var rest = arguments[...]
        // `--only baseline` may stand in for the suite name.
        if rest.starts(with: ["--only", "baseline"]) { rest = ["baseline"] + rest.dropFirst(2) }
        guard let suite = rest.popFirst(), !suite.hasPrefix("-") else { throw BenchmarkError(Self.usage) }
        guard suite == "discovery" || suite == "baseline" else {
            throw BenchmarkError("unknown benchmark '\(suite)'\n\(Self.usage)")
        }
        self.suite = suite
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
            case "--verbose", "-v":
                verbose = true
            case "--only":
                guard let text = rest.popFirst() else { throw BenchmarkError("--only wants a list such as 1,2") }
                if text == "baseline" && suite == "baseline" { continue }
                let numbers = text.split(separator: ",").compactMap { Int($0) }
                guard !numbers.isEmpty, numbers.allSatisfy({ (1...7).contains($0) }) else {
                    throw BenchmarkError("--only wants scenario numbers 1-7, not '\(text)'")
                }
                scenarios = Set(numbers)
            case "--help", "-h":
                throw BenchmarkError(Self.usage)
            default:
                throw BenchmarkError("unknown option '\(argument)'\n\(Self.usage)")
            }
        }
    }
}
