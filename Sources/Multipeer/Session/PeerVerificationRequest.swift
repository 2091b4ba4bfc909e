/// What a session's verification hook is asked about a peer before it joins (Apple's certificate handler).
public struct PeerVerificationRequest: Sendable {
    /// The peer, with its identity proven (TLS) or only claimed (plaintext).
    public let peer: Peer
    /// Whether the identity is proven; when false, ``Peer/claimedFingerprint`` is what the peer *says*.
    public var isAuthenticated: Bool { peer.isAuthenticated }
    /// The connection's verification code, for people to compare; nil on plaintext.
    public let verificationCode: VerificationCode?
    /// How the connection is protected, such as `TLSv1.3 TLS_AES_128_GCM_SHA256` or `plaintext`.
    public let protection: String
}

/// A verification hook's answer.
public enum VerificationDecision: Sendable, Hashable {
    /// Let the peer in.
    case accept
    /// Keep the peer out; the reason reaches both sides.
    case refuse(reason: String)
}
