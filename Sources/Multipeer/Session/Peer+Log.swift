internal import Logging

extension Peer {
    /// What the log says of this peer beside a message: its name and the fingerprint it claims.
    var logMetadata: Logger.Metadata { .peer(displayName, fingerprint: claimedFingerprint) }
}

extension ConnectedPeer {
    /// What the log says of this peer beside a message: its name and the fingerprint it claims.
    var logMetadata: Logger.Metadata { .peer(displayName, fingerprint: claimedFingerprint) }
}
