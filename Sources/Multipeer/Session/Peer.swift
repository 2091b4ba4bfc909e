/// A peer as the session layer shows it: an identity and a display name.
///
/// Two values with the same fingerprint are the same peer, whichever way each was learnt (a browser's `found`
/// event, an invitation, a session member), so the application can address a member with the value its browser
/// gave it. Whether the identity was *proven* is in ``identity``: only a TLS handshake proves it; what an
/// advertisement or a plaintext peer says is a claim.
public struct Peer: Sendable, Hashable, CustomStringConvertible {
    /// How much the peer's fingerprint is worth.
    public enum Identity: Sendable, Hashable {
        /// The peer proved it holds the key (TLS with mutual authentication).
        case proven(PeerFingerprint)
        /// The peer's DNS-SD advertisement names it: dialing the peer with a `.required` session makes it prove
        /// it, or fails with an identity mismatch.
        case advertised(PeerFingerprint)
        /// The peer said so on a plaintext connection: anyone could have.
        case claimed(PeerFingerprint)
    }

    /// The identity and how it is known.
    public let identity: Identity
    /// The name the peer asked to be shown as (never an identity).
    public let displayName: String

    /// Creates a peer value.
    /// - Parameters:
    ///   - identity: The identity and how it is known.
    ///   - displayName: The peer's display name.
    public init(identity: Identity, displayName: String) {
        self.identity = identity
        self.displayName = displayName
    }

    /// The fingerprint the peer is known by, proven or not: the key by which peers are compared.
    public var claimedFingerprint: PeerFingerprint {
        switch identity {
        case .proven(let f), .advertised(let f), .claimed(let f): f
        }
    }

    /// The proven identity, or nil when the fingerprint is only advertised or claimed.
    public var fingerprint: PeerFingerprint? {
        if case .proven(let f) = identity { f } else { nil }
    }

    /// Whether a TLS handshake proved the identity.
    public var isAuthenticated: Bool { fingerprint != nil }

    /// Compares by fingerprint only.
    public static func == (a: Peer, b: Peer) -> Bool { a.claimedFingerprint == b.claimedFingerprint }

    /// Hashes the fingerprint only.
    public func hash(into hasher: inout Hasher) { hasher.combine(claimedFingerprint) }

    /// The display name and a short fingerprint, marked when it is not proven.
    public var description: String {
        let short = String(claimedFingerprint.description.prefix(12))
        switch identity {
        case .proven: return "\(displayName) [\(short)]"
        case .advertised: return "\(displayName) [\(short), advertised]"
        case .claimed: return "\(displayName) [\(short), UNAUTHENTICATED claim]"
        }
    }

    /// The session-layer view of a connection's peer.
    init(_ connected: ConnectedPeer) {
        self.init(
            identity: connected.fingerprint.map(Identity.proven) ?? .claimed(connected.claimedFingerprint),
            displayName: connected.displayName)
    }
}
