/// The 24 bytes each side sends first on a new TCP connection, in plaintext, before any TLS record: they
/// settle whether the connection runs TLS or plaintext, so a `.required` peer and a `.none` peer refuse each
/// other with a reason instead of failing in a confusing way (see `docs/PROTOCOL.md` section 3).
///
/// ```
/// offset  size  field
///  0      4     magic "MPCP" (0x4D 0x50 0x43 0x50)
///  4      1     preamble version: 1
///  5      1     kind: 1 = offer (dialer to acceptor), 2 = answer (acceptor to dialer)
///  6      1     the sender's EncryptionPreference: 0 none, 1 optional, 2 required
///  7      1     offer: 0; answer: the outcome (1 TLS, 2 plaintext, 0x80 encryption mismatch,
///               0x81 busy, 0x82 unsupported preamble version, 0x83 full)
///  8      16    a fresh random nonce (part of the fixed layout; nothing is derived from it)
/// ```
///
/// The dialer sends its offer and waits for the answer; the acceptor answers only after reading the offer,
/// except when it is too busy to take the handshake or full, when it answers at once. After a refusal the acceptor
/// closes the connection.
struct Preamble: Hashable, Sendable {
    /// Which side sent it.
    enum Kind: UInt8, Sendable {
        case offer = 1
        case answer = 2
    }

    /// What the acceptor decided.
    enum Outcome: UInt8, Sendable {
        /// The offer has no outcome.
        case none = 0
        case tls = 1
        case plaintext = 2
        case encryptionMismatch = 0x80
        case busy = 0x81
        case unsupportedVersion = 0x82
        /// The acceptor already has its maximum number of connections.
        case full = 0x83
    }

    /// The preamble's size in bytes.
    static let length = 24
    /// The magic bytes "MPCP".
    static let magic: [UInt8] = [0x4D, 0x50, 0x43, 0x50]
    /// The preamble version this implementation speaks.
    static let version: UInt8 = 1
    /// The nonce's size in bytes.
    static let nonceLength = 16

    var kind: Kind
    var preference: EncryptionPreference
    var outcome: Outcome
    var nonce: [UInt8]

    /// The wire bytes.
    var bytes: [UInt8] {
        var bytes = Self.magic
        bytes.reserveCapacity(Self.length)
        bytes += [Self.version, kind.rawValue, preference.rawValue, outcome.rawValue]
        bytes += nonce
        return bytes
    }

    /// Why a preamble could not be read.
    enum DecodingError: Error, Equatable {
        /// The first bytes are not the magic: the far side is not a swift-multipeer peer.
        case notAPeer
        /// A preamble of another version.
        case unsupportedVersion(UInt8)
        /// A field holds a value this version does not define.
        case malformed(String)
    }

    /// Decodes exactly ``length`` bytes.
    /// - Parameters:
    ///   - bytes: The 24 bytes received.
    ///   - expected: The kind the receiver expects.
    static func decode(_ bytes: ArraySlice<UInt8>, expected: Kind) throws(DecodingError) -> Preamble {
        precondition(bytes.count == length, "a preamble is exactly \(length) bytes")
        let base = bytes.startIndex
        guard Array(bytes[base..<base + 4]) == magic else { throw .notAPeer }
        guard bytes[base + 4] == version else { throw .unsupportedVersion(bytes[base + 4]) }
        guard let kind = Kind(rawValue: bytes[base + 5]), kind == expected else {
            throw .malformed("kind \(bytes[base + 5]) where \(expected.rawValue) was expected")
        }
        guard let preference = EncryptionPreference(rawValue: bytes[base + 6]) else {
            throw .malformed("encryption preference \(bytes[base + 6])")
        }
        guard let outcome = Outcome(rawValue: bytes[base + 7]), (outcome == .none) == (kind == .offer) else {
            throw .malformed("outcome \(bytes[base + 7]) in an \(kind == .offer ? "offer" : "answer")")
        }
        return Preamble(kind: kind, preference: preference, outcome: outcome, nonce: Array(bytes[(base + 8)...]))
    }

    /// The acceptor's decision for a dialer's preference: TLS whenever both allow it, plaintext when both
    /// allow only that in common, otherwise a mismatch.
    static func negotiate(dialer: EncryptionPreference, acceptor: EncryptionPreference) -> Outcome {
        if dialer.allowsEncryption && acceptor.allowsEncryption { return .tls }
        if dialer.allowsPlaintext && acceptor.allowsPlaintext { return .plaintext }
        return .encryptionMismatch
    }
}
