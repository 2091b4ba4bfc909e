import Foundation

/// One line of the `connection` report: ours per run, the baseline per run (measured in the same runs), the
/// ratio of the medians, and the target with its verdict.
struct ConnectionRow {
    /// How values are shown. Values are stored in the base unit (bytes/s, messages/s, nanoseconds, bytes).
    enum Unit {
        /// Bytes per second, shown as `2.41 GB/s`.
        case bytesPerSecond
        /// Messages per second, shown as `1.23 M msgs/s`.
        case messagesPerSecond
        /// Nanoseconds, shown as `24.1 µs`.
        case microseconds
        /// Nanoseconds, shown as `1.234 ms`.
        case milliseconds
        /// Bytes, shown as `41.2 KiB`.
        case kibibytes
        /// Bytes, shown as `12.3 MiB`.
        case mebibytes
        /// Percent of one core, shown as `0.25 %`.
        case percent

        /// Whether a larger value is better (throughput) rather than worse (latency, memory).
        var higherIsBetter: Bool {
            switch self {
            case .bytesPerSecond, .messagesPerSecond: true
            case .microseconds, .milliseconds, .kibibytes, .mebibytes, .percent: false
            }
        }

        /// `value` in this unit with its symbol.
        func format(_ value: Double) -> String {
            switch self {
            case .bytesPerSecond: String(format: "%.2f GB/s", value / 1e9)
            case .messagesPerSecond: String(format: "%.3f M msgs/s", value / 1e6)
            case .microseconds: String(format: "%.1f µs", value / 1e3)
            case .milliseconds: String(format: "%.3f ms", value / 1e6)
            case .kibibytes: String(format: "%.1f KiB", value / 1024)
            case .mebibytes: String(format: "%.1f MiB", value / 1_048_576)
            case .percent: String(format: "%.2f %%", value)
            }
        }
    }

    /// What ours is judged against (always on the median of ours).
    enum Target {
        /// Informational: no verdict.
        case none
        /// Ours ≥ this many times the baseline's median.
        case atLeastTimesBaseline(Double)
        /// Ours ≤ this many times the baseline's median.
        case atMostTimesBaseline(Double)
        /// Ours ≥ this value (base unit).
        case atLeast(Double)
        /// Ours ≤ this value (base unit).
        case atMost(Double)
    }

    /// The benchmark number and label, e.g. `1 bulk stream, TLS`.
    let label: String
    /// Ours, one value per run.
    let ours: [Double]
    /// The baseline, one value per run (empty when there is none).
    let baseline: [Double]
    /// The unit of both.
    let unit: Unit
    /// The target.
    let target: Target
    /// What the baseline is, for the raw lines (for example `iperf3`).
    let baselineName: String

    init(
        _ label: String, ours: [Double], baseline: [Double] = [], unit: Unit, target: Target = .none,
        baselineName: String = ""
    ) {
        self.label = label
        self.ours = ours
        self.baseline = baseline
        self.unit = unit
        self.target = target
        self.baselineName = baselineName
    }

    /// The median of ours/baseline medians, or nil without a baseline.
    var ratio: Double? {
        guard !ours.isEmpty, !baseline.isEmpty else { return nil }
        let base = Summary(baseline).median
        return base > 0 ? Summary(ours).median / base : nil
    }

    /// Whether the target is met, or nil for an informational row.
    var met: Bool? {
        guard !ours.isEmpty else { return target.isNone ? nil : false }
        let median = Summary(ours).median
        switch target {
        case .none: return nil
        case .atLeast(let bound): return median >= bound
        case .atMost(let bound): return median <= bound
        case .atLeastTimesBaseline(let factor): return ratio.map { $0 >= factor } ?? false
        case .atMostTimesBaseline(let factor): return ratio.map { $0 <= factor } ?? false
        }
    }

    /// The target in words, e.g. `>= 0.60x baseline` or `<= 5.000 ms`.
    var targetText: String {
        switch target {
        case .none: ""
        case .atLeast(let bound): ">= " + unit.format(bound)
        case .atMost(let bound): "<= " + unit.format(bound)
        case .atLeastTimesBaseline(let factor): String(format: ">= %.2fx baseline", factor)
        case .atMostTimesBaseline(let factor): String(format: "<= %.2fx baseline", factor)
        }
    }

    /// The report line.
    var line: String {
        var text = label.padding(toLength: 40, withPad: " ", startingAt: 0)
        if ours.isEmpty {
            text += "  ours n/a"
        } else {
            let summary = Summary(ours)
            text += "  ours " + unit.format(summary.median)
            if summary.count > 1 {
                let range = "min \(unit.format(summary.min)), max \(unit.format(summary.max))"
                text += unit.higherIsBetter ? " (\(range))" : " (p90 \(unit.format(summary.p90)), \(range))"
            }
        }
        if !baseline.isEmpty { text += "  baseline " + unit.format(Summary(baseline).median) }
        if let ratio { text += String(format: "  ratio %.2f", ratio) }
        if let met {
            text += "  target \(targetText)  \(met ? "MET" : "MISSED")"
        } else {
            text += "  (informational)"
        }
        return text
    }

    /// Every run's values, for `--verbose`.
    var rawLines: [String] {
        var lines = ["    \(label) raw ours: " + ours.map(unit.format).joined(separator: ", ")]
        if !baseline.isEmpty {
            let name = baselineName.isEmpty ? "baseline" : "baseline (\(baselineName))"
            lines.append("    \(label) raw \(name): " + baseline.map(unit.format).joined(separator: ", "))
        }
        return lines
    }
}

extension ConnectionRow.Target {
    /// Whether this is `.none`.
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}
