/// A failure that stops the benchmark (as opposed to a missed target, which is only reported).
struct BenchmarkError: Error, CustomStringConvertible {
    /// What went wrong.
    let message: String

    init(_ message: String) { self.message = message }

    var description: String { message }
}
