/// One side's datagram secrets for a connection, split from the TLS session's exported keying material (see
/// ``DatagramFormat`` for the layout). Each direction has a base secret from which the keys of each generation
/// of packets are derived (``DatagramGenerationKeys``).
///
/// The secrets are secret: `description` names only the receive ids.
struct DatagramKeys: Sendable, CustomStringConvertible {
    /// The exporter label both sides pass to `SSL_export_keying_material`, with an empty context.
    static let exporterLabel = "EXPORTER-swift-multipeer datagram"
    /// Bytes of keying material to export: two base secrets and two receive ids.
    static let exportedLength = 2 * secretLength + 2 * connectionIDLength
    /// Bytes of a direction's base secret: one SHA-256 output, the HKDF pseudorandom key.
    static let secretLength = 32
    /// Bytes of a receive id.
    static let connectionIDLength = 8

    /// The base secret and receiver connection id of one direction.
    struct Direction: Sendable {
        /// The 32-byte base secret the direction's per-generation keys and IVs are derived from.
        let secret: [UInt8]
        /// The receive id of the side this direction goes to: written in each packet's header.
        let receiverID: UInt64
    }

    /// What this side seals with; `receiverID` is the far side's receive id.
    let sending: Direction
    /// What this side opens with; `receiverID` is this side's own receive id, to register with the endpoint.
    let receiving: Direction

    /// Splits exported keying material for one side.
    /// - Parameters:
    ///   - exported: ``exportedLength`` bytes from `SSL_export_keying_material` with ``exporterLabel``.
    ///   - isDialer: `true` on the side that opened the connection, `false` on the side that accepted it.
    init(exported: [UInt8], isDialer: Bool) {
        precondition(exported.count == Self.exportedLength, "datagram keys need exactly 80 exported bytes")
        var offset = 0
        func take(_ count: Int) -> [UInt8] {
            defer { offset += count }
            return Array(exported[offset..<offset + count])
        }
        func takeID() -> UInt64 {
            take(Self.connectionIDLength).reduce(0) { $0 << 8 | UInt64($1) }
        }
        let dialerToAcceptor = take(Self.secretLength)
        let acceptorToDialer = take(Self.secretLength)
        let dialerID = takeID()
        let acceptorID = takeID()
        let toAcceptor = Direction(secret: dialerToAcceptor, receiverID: acceptorID)
        let toDialer = Direction(secret: acceptorToDialer, receiverID: dialerID)
        sending = isDialer ? toAcceptor : toDialer
        receiving = isDialer ? toDialer : toAcceptor
    }

    /// A sealer for this side's outgoing packets, starting at counter 0.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the cipher cannot be set up.
    func makeSealer() throws(DatagramError) -> DatagramSealer {
        try DatagramSealer(secret: sending.secret, receiverID: sending.receiverID)
    }

    /// An opener for the packets sent to this side.
    /// - Parameter counters: Where the opener counts what it receives, for the connection's statistics.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the cipher cannot be set up.
    func makeOpener(counters: DatagramCounters = DatagramCounters()) throws(DatagramError) -> DatagramOpener {
        try DatagramOpener(secret: receiving.secret, receiverID: receiving.receiverID, counters: counters)
    }

    /// The receive ids, in hexadecimal; never the secrets.
    var description: String {
        func hex(_ id: UInt64) -> String {
            let digits = String(id, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        return "DatagramKeys(sending to \(hex(sending.receiverID)), receiving as \(hex(receiving.receiverID)))"
    }
}

/// The 12-byte GCM nonces of one direction: the IV XOR (4 zero bytes, then the counter as 8 big-endian bytes).
struct DatagramNonce: Sendable {
    private let prefix: UInt32
    private let suffix: UInt64

    /// Splits `iv` (12 bytes) into the part the counter leaves alone and the part it is XORed into.
    init(iv: [UInt8]) {
        precondition(iv.count == AES256GCM.nonceLength, "the datagram IV must be 12 bytes")
        prefix = iv[0..<4].reduce(0) { $0 << 8 | UInt32($1) }
        suffix = iv[4..<12].reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// Calls `body` with the nonce for `counter`, built on the stack.
    func withNonce<Result>(counter: UInt64, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let mixed = suffix ^ counter
        // Three 32-bit words in big-endian order: 12 contiguous bytes without padding.
        let words = (
            prefix.bigEndian, UInt32(truncatingIfNeeded: mixed >> 32).bigEndian,
            UInt32(truncatingIfNeeded: mixed).bigEndian
        )
        return withUnsafeBytes(of: words) { body($0) }
    }
}
