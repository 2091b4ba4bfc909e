import Foundation
import MultipeerIO

/// The machine-readable side of a run (`--results FILE`): every row a suite prints, as one JSON document that
/// `scripts/bench/update_docs.py` turns into the generated tables of docs/BENCHMARKS.md.
///
/// Rows are added where they are printed (``ResultRow``, ``ConnectionRow`` and the suites that print their own
/// lines), so the file and the printed report always say the same thing. The targets stay where each row is
/// defined; this only carries the verdict out.
final class ResultLog: Sendable {
    /// One row: what was measured, ours and the baseline (median over the runs, as printed), the target and the
    /// verdict.
    struct Record: Sendable {
        /// The row's label, e.g. `1 browser running, advertiser starts`.
        var label: String
        /// Ours as printed (median with its unit).
        var ours: String
        /// The baseline as printed, or empty when the row has none.
        var baseline: String = ""
        /// What the baseline is (for example `iperf3`), or empty.
        var baselineName: String = ""
        /// ours / baseline (medians), or nil.
        var ratio: Double?
        /// The target in words (`<= 1.000 s`, `>= 0.60x baseline`), or empty for an informational row.
        var target: String = ""
        /// The verdict: true met, false missed, nil informational.
        var met: Bool?
        /// The number of runs behind the medians.
        var runs: Int

        /// A benchmark that did not produce its rows: missed, with the error in place of ours.
        static func failed(_ label: String, _ error: any Error) -> Record {
            Record(label: label, ours: "failed: \(error)", target: "runs", met: false, runs: 0)
        }
    }

    private struct State {
        var records: [Record] = []
        var series: [[String: Double]] = []
        var notes: [String] = []
    }

    private let state = Lock(State())

    /// The log every suite writes to.
    static let shared = ResultLog()

    /// Adds a row.
    func add(_ record: Record) { state.withLock { $0.records.append(record) } }

    /// Adds one point of a series (the scaling suite's per-size medians), for plots: keys are column names.
    func addPoint(_ point: [String: Double]) { state.withLock { $0.series.append(point) } }

    /// Adds a line of explanation that the generated section shows under its table.
    func addNote(_ note: String) { state.withLock { $0.notes.append(note) } }

    /// Writes the JSON document to `path`.
    /// - Parameters:
    ///   - path: The file to (over)write.
    ///   - options: The run's options (suite, runs, quick).
    ///   - started: When the suite started.
    ///   - loadAtStart: `/proc/loadavg`'s first three fields when the suite started.
    /// - Throws: When the file cannot be written.
    func write(to path: String, options: BenchmarkOptions, started: Date, loadAtStart: String) throws {
        let (records, series, notes) = state.withLock { ($0.records, $0.series, $0.notes) }
        let rows: [[String: Any]] = records.map { record in
            var row: [String: Any] = [
                "label": record.label, "ours": record.ours, "baseline": record.baseline,
                "baseline_name": record.baselineName, "target": record.target, "runs": record.runs,
                "verdict": record.met.map { $0 ? "met" : "missed" } ?? "informational",
            ]
            if let ratio = record.ratio, ratio.isFinite { row["ratio"] = ratio }
            return row
        }
        let document: [String: Any] = [
            "suite": options.suite, "quick": options.quick, "runs": options.runs,
            "arguments": Array(CommandLine.arguments.dropFirst()).joined(separator: " "),
            "started": ISO8601DateFormatter().string(from: started), "seconds": Int(-started.timeIntervalSinceNow),
            "load_start": loadAtStart, "load_end": loadAverage(),
            "nproc": ProcessInfo.processInfo.activeProcessorCount, "kernel": kernelRelease(), "rows": rows,
            "series": series, "notes": notes,
        ]
        let data = try JSONSerialization.data(withJSONObject: document, options: [.prettyPrinted, .sortedKeys])
        try data.write(to: URL(fileURLWithPath: path))
    }
}

extension ResultRow {
    /// This row for the results file.
    var record: ResultLog.Record {
        let oursPresent = ours.compactMap { $0 }
        let basePresent = baseline.compactMap { $0 }
        func median(_ values: [Double?], _ present: [Double]) -> String {
            if values.isEmpty { return "" }
            if present.isEmpty { return "not detected" + (cap.map { String(format: " within %.0f s", $0) } ?? "") }
            let missing = values.count - present.count
            return format(Summary(present).median) + (missing > 0 ? " (\(missing)/\(values.count) not detected)" : "")
        }
        var ratio: Double?
        if !oursPresent.isEmpty, !basePresent.isEmpty, Summary(basePresent).median > 0 {
            ratio = Summary(oursPresent).median / Summary(basePresent).median
        }
        return ResultLog.Record(
            label: label, ours: median(ours, oursPresent), baseline: median(baseline, basePresent), ratio: ratio,
            target: target.map { "<= " + format($0) } ?? "", met: met, runs: ours.count)
    }
}

extension ConnectionRow {
    /// This row for the results file.
    var record: ResultLog.Record {
        ResultLog.Record(
            label: label, ours: ours.isEmpty ? "n/a" : unit.format(Summary(ours).median),
            baseline: baseline.isEmpty ? "" : unit.format(Summary(baseline).median), baselineName: baselineName,
            ratio: ratio, target: targetText, met: met, runs: ours.count)
    }
}
