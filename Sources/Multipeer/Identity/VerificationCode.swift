/// A short code two users compare to confirm that their devices are talking to each other and not to a
/// man in the middle, as Bluetooth pairing screens do.
///
/// The code is six decimal digits taken from SHA-256 over a fixed label and the two fingerprints in
/// ascending byte order, so both sides compute the same code whichever is `a` and whichever is `b`. Six
/// digits give an attacker who controls one fingerprint a one-in-a-million chance per attempt of matching
/// a given code; they are meant for a person to compare, not as a secret.
public enum VerificationCode {
    /// The number of digits in a code.
    public static let digitCount = 6
    /// Separates this use of SHA-256 from any other hash of two fingerprints.
    static let label = Array("swift-multipeer verification code v1".utf8)

    /// The verification code for a pair of peers.
    ///
    /// - Parameters:
    ///   - a: One peer's fingerprint.
    ///   - b: The other peer's fingerprint.
    /// - Returns: Six decimal digits, with leading zeros; the same for `(a, b)` and `(b, a)`.
    public static func between(_ a: PeerFingerprint, _ b: PeerFingerprint) -> String {
        let (first, second) = a.bytes.lexicographicallyPrecedes(b.bytes) ? (a, b) : (b, a)
        let digest = SHA256.hash(label + first.bytes + second.bytes)
        // 2^64 is so much larger than 10^6 that reducing modulo 10^6 leaves no visible bias.
        let value = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        var modulus: UInt64 = 1
        for _ in 0..<digitCount { modulus *= 10 }
        let digits = String(value % modulus)
        return String(repeating: "0", count: digitCount - digits.count) + digits
    }
}
