/// Whether a connection must, may or must not be encrypted, with the semantics of Apple's
/// `MCEncryptionPreference`.
///
/// Two peers settle the mode in the preamble, before any TLS byte (see `docs/PROTOCOL.md` section 3):
///
/// | dialer \ acceptor | `.required` | `.optional` | `.none` |
/// |---|---|---|---|
/// | `.required` | TLS | TLS | refused |
/// | `.optional` | TLS | TLS | plaintext |
/// | `.none`     | refused | plaintext | plaintext |
///
/// A refusal carries the reason ``ConnectionError/Code/encryptionMismatch(local:remote:)`` on both sides;
/// nothing ever downgrades silently, and a plaintext connection is marked unauthenticated in the API.
public enum EncryptionPreference: UInt8, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Plaintext TCP only: no confidentiality and no proof of identity. For trusted links and measurement.
    case none = 0
    /// TLS when the peer can, plaintext when it only accepts plaintext.
    case optional = 1
    /// TLS 1.3 with mutual authentication, always. The default.
    case required = 2

    /// Whether this side can run TLS.
    public var allowsEncryption: Bool { self != .none }
    /// Whether this side can run plaintext.
    public var allowsPlaintext: Bool { self != .required }

    /// `required`, `optional` or `none`.
    public var description: String {
        switch self {
        case .none: "none"
        case .optional: "optional"
        case .required: "required"
        }
    }
}
