/// The peer at the other end of an established connection.
///
/// Its identity is ``fingerprint``, and only when the TLS handshake proved it: on a plaintext connection
/// `fingerprint` is nil and what the peer said about itself is in ``claimedFingerprint``, a claim anyone could
/// make.
public struct ConnectedPeer: Sendable, Hashable, CustomStringConvertible {
    /// The peer's identity, proven by the TLS handshake (the peer holds the private key). Nil on a plaintext
    /// connection, where nothing proves who the peer is.
    public let fingerprint: PeerFingerprint?
    /// The fingerprint the peer's hello named: the same as ``fingerprint`` with TLS; on a plaintext connection
    /// only a claim, which must never be used as an identity.
    public let claimedFingerprint: PeerFingerprint
    /// The name the peer asked to be shown as (a claim for people, never an identity).
    public let displayName: String
    /// Whether both sides proved knowledge of the same group secret.
    public let isGroupMember: Bool
    /// How the connection is protected, such as `TLSv1.3 TLS_AES_128_GCM_SHA256` or `plaintext`.
    public let protection: String
    /// The code two people compare to confirm that they talk to each other and not to a man in the middle:
    /// both ends of one connection show the same code, and every connection has its own. Nil on plaintext.
    public internal(set) var verificationCode: VerificationCode?
    /// The protocol's minor version the peer speaks.
    public let minorVersion: UInt8
    /// The optional features the peer announced.
    public let capabilities: PeerCapabilities
    /// The longest message the peer accepts, as its hello announced; longer data goes in a stream.
    public let maximumMessageLength: Int

    /// Whether the peer proved its identity (TLS).
    public var isAuthenticated: Bool { fingerprint != nil }

    /// The display name, fingerprint (or claim) and protection, for logs.
    public var description: String {
        guard let fingerprint else {
            return "\(displayName) [claims \(claimedFingerprint)] UNAUTHENTICATED, \(protection)"
        }
        return "\(displayName) [\(fingerprint)] authenticated, \(protection)"
    }
}

/// Optional features a peer announced when the connection was set up.
public struct PeerCapabilities: OptionSet, Hashable, Sendable {
    /// The capability bits, as on the wire.
    public let rawValue: UInt32

    /// Creates a set from its bits.
    /// - Parameter rawValue: The capability bits.
    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// The peer takes unreliable messages as UDP datagrams keyed from the TLS session.
    public static let unreliableDatagrams = PeerCapabilities(rawValue: 1 << 0)

    init(_ capabilities: Frame.Capabilities) {
        rawValue = capabilities.rawValue
    }
}

/// Error codes carried by `error` frames (see `docs/PROTOCOL.md` section 3).
enum WireErrorCode: UInt32 {
    case protocolViolation = 1
    case flowControlViolation = 2
    case groupSecretMismatch = 3
    case identityMismatch = 4
    case unsupportedVersion = 5
    case internalFailure = 6
    case resourceLimit = 7
}
