/// One line of the report: a measurement of ours, the baseline's, and the target it is judged against.
struct ResultRow {
    /// How values are shown.
    enum Unit {
        /// Seconds, shown as `0.812 s`.
        case seconds
        /// Percent of one core.
        case percent
        /// Bytes.
        case bytes
    }

    /// The scenario number and label, e.g. `1 browser running, advertiser starts`.
    let label: String
    /// Per-run values of ours; nil for a run in which the event did not happen within `cap`.
    let ours: [Double?]
    /// Per-run values of the baseline; nil as for `ours`. Empty if there is no baseline.
    let baseline: [Double?]
    /// The upper bound ours must stay within (judged on the median), or nil for an informational row.
    let target: Double?
    /// How long a run waited before giving up (for "not detected within" wording).
    let cap: Double?
    /// The unit.
    let unit: Unit

    init(
        _ label: String, ours: [Double?], baseline: [Double?], target: Double?, cap: Double? = nil,
        unit: Unit = .seconds
    ) {
        self.label = label
        self.ours = ours
        self.baseline = baseline
        self.target = target
        self.cap = cap
        self.unit = unit
    }

    /// Whether the target is met: every run produced a value and the median is within the target.
    var met: Bool? {
        guard let target else { return nil }
        guard !ours.isEmpty, ours.allSatisfy({ $0 != nil }) else { return false }
        return Summary(ours.compactMap { $0 }).median <= target
    }

    func format(_ value: Double) -> String {
        switch unit {
        case .seconds: String(format: "%.3f s", value)
        case .percent: String(format: "%.2f %%", value)
        case .bytes: String(format: "%.0f B", value)
        }
    }

    private func describe(_ values: [Double?], detailed: Bool) -> String {
        let present = values.compactMap { $0 }
        let missing = values.count - present.count
        var missingText: String {
            let within = cap.map { " within \(String(format: "%.0f", $0)) s" } ?? ""
            return "\(missing)/\(values.count) not detected\(within)"
        }
        if present.isEmpty {
            return values.isEmpty
                ? "n/a" : "not detected" + (cap.map { " within \(String(format: "%.0f", $0)) s" } ?? "")
        }
        let summary = Summary(present)
        var text = format(summary.median)
        if detailed && summary.count > 1 {
            text += " (p90 \(format(summary.p90)), min \(format(summary.min)), max \(format(summary.max)))"
        }
        if missing > 0 { text += " [\(missingText)]" }
        return text
    }

    /// The report line.
    var line: String {
        var text = label.padding(toLength: 44, withPad: " ", startingAt: 0)
        text += "  ours " + describe(ours, detailed: true)
        if !baseline.isEmpty { text += "  baseline " + describe(baseline, detailed: false) }
        let oursPresent = ours.compactMap { $0 }
        let basePresent = baseline.compactMap { $0 }
        if !oursPresent.isEmpty, !basePresent.isEmpty, Summary(basePresent).median > 0 {
            text += String(format: "  ratio %.2f", Summary(oursPresent).median / Summary(basePresent).median)
        } else if !baseline.isEmpty {
            text += "  ratio n/a"
        }
        if let target {
            text += "  target <= \(format(target))  \(met == true ? "met" : "missed")"
        } else {
            text += "  (informational)"
        }
        return text
    }

    /// The per-run values, for `--verbose`.
    var rawLines: [String] {
        func list(_ values: [Double?]) -> String {
            values.map { $0.map(format) ?? "none" }.joined(separator: ", ")
        }
        var lines = ["    \(label) raw ours: \(list(ours))"]
        if !baseline.isEmpty { lines.append("    \(label) raw baseline: \(list(baseline))") }
        return lines
    }
}
