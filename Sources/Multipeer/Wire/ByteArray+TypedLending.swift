extension Array where Element == UInt8 {
    /// `withUnsafeBytes(_:)` for a body with a typed error: the error comes out with its type.
    ///
    /// Passing a typed-throws closure to the standard library's `withUnsafeBytes` (a `rethrows` function)
    /// crashes the Swift 6.3 compiler, so the body's outcome crosses it as a `Result`; this is the one place
    /// that does it.
    func withUnsafeBytesTyped<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        let outcome = withUnsafeBytes { bytes -> Result<R, E> in
            do throws(E) {
                return .success(try body(bytes))
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }
}
