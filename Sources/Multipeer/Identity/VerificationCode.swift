/// A short code two people compare to confirm that their devices talk to each other and not to a man in the
/// middle, as Bluetooth pairing screens do.
///
/// The code belongs to one connection: it is derived from a value both ends export from the live TLS session
/// (RFC 8446 section 7.5) and from two random nonces, one per side, exchanged during the hello so that neither
/// side (nor an attacker in the middle) can choose its nonce after seeing the other's: the dialer commits to its
/// nonce (SHA-256) in its hello, the acceptor answers with its own, then the dialer reveals its nonce. Both ends
/// of a connection show the same code; two connections between the same peers show different codes. An attacker
/// who relays between two TLS sessions has two different exporter values, and his codes match by chance only:
/// one in a million per connection attempt, with nothing to compute offline (see `docs/SECURITY.md`).
public struct VerificationCode: Hashable, Sendable, CustomStringConvertible {
    /// The number of digits in a code.
    public static let digitCount = 6
    /// The TLS exporter label of the value the code is derived from.
    static let exporterLabel = "EXPORTER-swift-multipeer verification code"
    /// Bytes exported.
    static let exporterLength = 32
    /// Separates the code's HMAC from any other use of the exporter value.
    static let codeLabel = Array("swift-multipeer verification code v2".utf8)
    /// Separates the nonce commitment from any other hash.
    static let commitmentLabel = Array("swift-multipeer code commitment v1".utf8)

    /// The code's decimal digits, with leading zeros.
    public let digits: String

    /// The digits.
    public var description: String { digits }

    /// The code of a connection.
    /// - Parameters:
    ///   - exporterValue: The TLS exporter value for ``exporterLabel``.
    ///   - dialerNonce: The dialer's nonce.
    ///   - acceptorNonce: The acceptor's nonce.
    init(exporterValue: [UInt8], dialerNonce: [UInt8], acceptorNonce: [UInt8]) {
        let mac = HMACSHA256.mac(key: exporterValue, message: Self.codeLabel + dialerNonce + acceptorNonce)
        // 2^64 is so much larger than 10^6 that reducing modulo 10^6 leaves no visible bias.
        let value = mac.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        var modulus: UInt64 = 1
        for _ in 0..<Self.digitCount { modulus *= 10 }
        let text = String(value % modulus)
        digits = String(repeating: "0", count: Self.digitCount - text.count) + text
    }

    /// What the dialer's hello carries for its nonce: SHA-256 over a label and the nonce.
    static func commitment(to nonce: [UInt8]) -> [UInt8] {
        SHA256.hash(commitmentLabel + nonce)
    }
}
