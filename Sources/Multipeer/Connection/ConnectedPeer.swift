/// The peer at the other end of an established connection.
public struct ConnectedPeer: Sendable, Hashable, CustomStringConvertible {
    /// The peer's identity. Proven by the TLS handshake when ``isAuthenticated`` is true; only claimed by
    /// the peer's hello on a plaintext connection.
    public let fingerprint: PeerFingerprint
    /// The name the peer asked to be shown as.
    public let displayName: String
    /// Whether the peer proved it holds the private key of ``fingerprint`` (always true with TLS, never for
    /// plaintext).
    public let isAuthenticated: Bool
    /// Whether both sides proved knowledge of the same group secret.
    public let isGroupMember: Bool
    /// How the connection is protected, such as `TLSv1.3 TLS_AES_128_GCM_SHA256` or `plaintext`.
    public let protection: String
    /// The protocol version and optional features the peer announced.
    public let minorVersion: UInt8
    /// The optional features the peer announced.
    public let capabilities: Frame.Capabilities

    /// The display name, fingerprint and protection, for logs.
    public var description: String {
        "\(displayName) [\(fingerprint)] \(isAuthenticated ? "authenticated" : "UNAUTHENTICATED"), \(protection)"
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
