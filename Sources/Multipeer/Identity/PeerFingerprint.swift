/// A peer's identity: the SHA-256 digest of its raw 32-byte Ed25519 public key.
///
/// The readable form (``description``) is the 32 bytes in lowercase RFC 4648 base32 (alphabet `a`–`z`,
/// `2`–`7`) without padding: 52 characters in 13 groups of 4 separated by `-`, 64 characters in all, e.g.
/// `eh7d-dx5b-ksrg-...-i74x-eg4q`. Base32 has no digits that look like letters (0, 1, 8) and fits exactly
/// the 64-character limit of a certificate's common name. ``init(_:)`` accepts exactly this form.
public struct PeerFingerprint: Hashable, Sendable, CustomStringConvertible {
    /// The size of a fingerprint in bytes.
    public static let byteCount = 32
    /// Characters per group in the readable form.
    static let groupLength = 4
    /// The RFC 4648 base32 alphabet, lowercase.
    static let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567".utf8)

    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// A fingerprint from its 32 digest bytes.
    ///
    /// - Parameter bytes: The SHA-256 digest of a raw Ed25519 public key.
    /// - Returns: nil unless `bytes` holds exactly 32 bytes.
    public init?(bytes: [UInt8]) {
        guard bytes.count == Self.byteCount else { return nil }
        self.bytes = bytes
    }

    /// Hashes the digest as a whole: its first 8 bytes, as one word (a SHA-256 digest is uniform, so they spread
    /// as well as all 32 would); sessions look members up by fingerprint on every message.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
    }

    /// Compares the 32 bytes, a word at a time.
    public static func == (a: PeerFingerprint, b: PeerFingerprint) -> Bool {
        a.bytes.withUnsafeBytes { x in
            b.bytes.withUnsafeBytes { y in
                x.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
                    == y.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
                    && x.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
                        == y.loadUnaligned(fromByteOffset: 8, as: UInt64.self)
                    && x.loadUnaligned(fromByteOffset: 16, as: UInt64.self)
                        == y.loadUnaligned(fromByteOffset: 16, as: UInt64.self)
                    && x.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
                        == y.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
            }
        }
    }

    /// The fingerprint of a raw 32-byte Ed25519 public key.
    init(publicKey: [UInt8]) {
        bytes = SHA256.hash(publicKey)
    }

    /// Parses the readable form that ``description`` produces.
    ///
    /// - Parameter text: 13 groups of 4 lowercase base32 characters separated by `-`.
    /// - Returns: nil if `text` is not exactly that form (including uppercase letters, missing or extra
    ///   separators, or a last character with bits set beyond the 256 the fingerprint has).
    public init?(_ text: String) {
        let characters = Array(text.utf8)
        let symbolCount = (Self.byteCount * 8 + 4) / 5
        let groupCount = (symbolCount + Self.groupLength - 1) / Self.groupLength
        guard characters.count == symbolCount + groupCount - 1 else { return nil }
        var symbols: [UInt8] = []
        symbols.reserveCapacity(symbolCount)
        for (index, character) in characters.enumerated() {
            if (index + 1) % (Self.groupLength + 1) == 0 {
                guard character == UInt8(ascii: "-") else { return nil }
            } else {
                guard let value = Self.alphabet.firstIndex(of: character) else { return nil }
                symbols.append(UInt8(value))
            }
        }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(Self.byteCount)
        var buffer: UInt32 = 0
        var bitCount = 0
        for symbol in symbols {
            buffer = buffer << 5 | UInt32(symbol)
            bitCount += 5
            if bitCount >= 8 {
                bitCount -= 8
                decoded.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bitCount)))
                buffer &= (1 << UInt32(bitCount)) - 1
            }
        }
        // The leftover bits are padding; a canonical encoding leaves them zero.
        guard buffer == 0 else { return nil }
        self.init(bytes: decoded)
    }

    /// The readable form: lowercase base32 without padding, in groups of 4 separated by `-`.
    public var description: String {
        var symbols: [UInt8] = []
        var buffer: UInt32 = 0
        var bitCount = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bitCount += 8
            while bitCount >= 5 {
                bitCount -= 5
                symbols.append(Self.alphabet[Int(buffer >> UInt32(bitCount) & 0x1f)])
            }
            buffer &= (1 << UInt32(bitCount)) - 1
        }
        if bitCount > 0 { symbols.append(Self.alphabet[Int(buffer << UInt32(5 - bitCount) & 0x1f)]) }
        var text: [UInt8] = []
        for (index, symbol) in symbols.enumerated() {
            if index > 0, index % Self.groupLength == 0 { text.append(UInt8(ascii: "-")) }
            text.append(symbol)
        }
        return String(decoding: text, as: UTF8.self)
    }
}
