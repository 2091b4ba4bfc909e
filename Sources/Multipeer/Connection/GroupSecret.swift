/// A pre-shared key that proves membership of an app's group, on top of each peer's identity.
///
/// When both peers are configured with a group secret, each sends in its hello
/// `HMAC-SHA-256(secret, "swift-multipeer group proof v1" || role || binding)`, where `role` is 1 for the
/// dialer and 2 for the acceptor and `binding` is the TLS exporter value for the label ``exporterLabel``
/// (RFC 8446 section 7.5), unique to this connection. The proof never reveals the secret, cannot be replayed on
/// another connection, and a man in the middle who relays it cannot use it, because his two TLS sessions have
/// different exporter values. A peer whose proof is missing or wrong is refused with
/// ``ConnectionError/Code/groupSecretMismatch``.
///
/// A group secret requires TLS: a connection configured with one refuses plaintext
/// (``ConnectionError/Code/plaintextRefused``), because a proof bound to anything both sides send in clear
/// proves nothing against an attacker who relays it, and `.none` with a group secret is an invalid
/// configuration.
public struct GroupSecret: Sendable, Hashable {
    /// The fewest bytes a secret may have.
    public static let minimumByteCount = 32
    /// The TLS exporter label of the binding value.
    static let exporterLabel = "EXPORTER-swift-multipeer group"
    static let proofContext = Array("swift-multipeer group proof v1".utf8)

    let bytes: [UInt8]

    /// A group secret from its bytes.
    /// - Parameter bytes: At least ``minimumByteCount`` bytes, random or derived from a strong passphrase.
    /// - Throws: ``ConnectionError`` with code `.invalidConfiguration` naming the rule when `bytes` is too short.
    public init(_ bytes: [UInt8]) throws(ConnectionError) {
        guard bytes.count >= Self.minimumByteCount else {
            throw ConnectionError(
                code: .invalidConfiguration,
                reason: "a group secret needs at least \(Self.minimumByteCount) bytes; this one has \(bytes.count)")
        }
        self.bytes = bytes
    }

    /// The proof one side sends.
    /// - Parameters:
    ///   - binding: The connection's 32-byte binding value.
    ///   - isDialer: Whether the proof is the dialer's.
    func proof(binding: [UInt8], isDialer: Bool) -> [UInt8] {
        HMACSHA256.mac(key: bytes, message: Self.proofContext + [isDialer ? 1 : 2] + binding)
    }

    /// Whether `proof` is the proof the other side must send.
    func verify(_ proof: [UInt8], binding: [UInt8], fromDialer: Bool) -> Bool {
        HMACSHA256.constantTimeEqual(proof, self.proof(binding: binding, isDialer: fromDialer))
    }
}
