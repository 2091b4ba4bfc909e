/// Order statistics of a set of measurements (seconds).
struct Summary {
    /// The measurements, sorted.
    let sorted: [Double]

    init(_ values: [Double]) { sorted = values.sorted() }

    /// Whether there is nothing to summarize.
    var isEmpty: Bool { sorted.isEmpty }
    /// The number of measurements.
    var count: Int { sorted.count }
    /// The median (mean of the two middle values for an even count).
    var median: Double {
        guard !sorted.isEmpty else { return .nan }
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
    /// The 90th percentile, nearest rank.
    var p90: Double {
        guard !sorted.isEmpty else { return .nan }
        let rank = Int((0.9 * Double(sorted.count)).rounded(.up))
        return sorted[Swift.max(0, Swift.min(sorted.count - 1, rank - 1))]
    }
    /// The smallest value.
    var min: Double { sorted.first ?? .nan }
    /// The largest value.
    var max: Double { sorted.last ?? .nan }
}
