extension Summary {
    /// The nearest-rank percentile: the smallest value with at least `fraction` of the values at or below it
    /// (`percentile(0.5)` of an even count is the lower middle value, unlike ``median``).
    /// - Parameter fraction: The percentile as a fraction, in 0...1 (0.99 for p99).
    /// - Returns: The value, or NaN when there are no values.
    func percentile(_ fraction: Double) -> Double {
        precondition((0...1).contains(fraction), "percentile wants a fraction in 0...1")
        guard !sorted.isEmpty else { return .nan }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[Swift.max(0, Swift.min(sorted.count - 1, rank - 1))]
    }

    /// Summarizes integer samples such as ``Baseline/rawPingPong(rounds:payload:warmup:)``'s nanoseconds.
    /// - Parameter samples: The values.
    init(_ samples: [UInt64]) {
        self.init(samples.map { Double($0) })
    }
}
