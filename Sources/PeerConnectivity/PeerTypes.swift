public import Foundation
public import MultipeerConnectivity

/// The service type peers connect over (1-15 letters of either case, digits and hyphens; case does not matter).
public typealias ServiceType = String

/// Discovery metadata advertised in the DNS-SD TXT record: public and unauthenticated.
public typealias PeerDiscoveryInfo = [String: String]

/// A message type for ``PeerConnectionManager/sendMessage(_:toPeers:)`` and
/// ``PeerConnectionManager/observeMessages(ofType:forKey:listener:)``: sent as JSON, routed by ``messageType``.
public protocol PeerMessage: Codable {
    /// The name receivers route by; the type's name by default.
    static var messageType: String { get }
}

extension PeerMessage {
    /// The type's name.
    public static var messageType: String { String(describing: Self.self) }
}

/// How a manager connects to the peers it finds.
public enum PeerConnectionType: Int, Sendable {
    /// Everyone invites every peer found; invitations are answered by the ``PeerInvitationPolicy``.
    case automatic = 0
    /// Invitations are the application's: found peers are reported and invited only by ``PeerConnectionManager/invitePeer(_:withContext:timeout:)``,
    /// and invitations arrive as ``PeerConnectionEvent/receivedInvitation(peer:withContext:invitationHandler:)``
    /// (Apple's browser view controller and invitation alert do not exist on Linux).
    case inviteOnly
    /// No behaviour of its own: as ``inviteOnly``.
    case custom
}

/// The original library's choice of Apple framework; here both name the same implementation (the native
/// `Multipeer` engine), which has streams, resources and discovery info on either.
public enum PeerConnectionBackend: Equatable, Sendable {
    /// The default.
    case multipeerConnectivity
    /// Accepted for source compatibility; the same implementation.
    case networkFramework
}

/// Whether connections prove a shared key.
public enum PeerConnectionNetworkSecurity: Equatable, Sendable {
    /// No shared key (connections still use TLS unless the encryption preference is `.none`).
    case unauthenticated
    /// Every peer must prove this key (at least 32 bytes), over TLS, whatever the backend.
    case preSharedKey(Data)
}

/// How invitations are answered in `.automatic` mode.
public enum PeerInvitationPolicy {
    /// The application answers through the ``PeerConnectionEvent/receivedInvitation(peer:withContext:invitationHandler:)`` handler.
    case manual
    /// Every invitation is accepted.
    case acceptAll
    /// Every invitation is declined.
    case rejectAll
    /// The closure decides from the inviter and its context.
    case custom((Peer, Data?) -> Bool)
}

/// How peers' certificates are judged when they join.
public enum PeerCertificatePolicy {
    /// Every peer is let in.
    case acceptAll
    /// Nobody is let in.
    case rejectAll
    /// Only peers whose identity TLS proved (plaintext peers have no certificate).
    case requireCertificate
    /// The closure decides and calls its handler exactly once.
    case custom((Peer, [Any]?, @escaping (Bool) -> Void) -> Void)
}

/// The security of a manager's session.
public struct PeerSecurityConfiguration {
    /// The session's encryption preference.
    public var encryptionPreference: MCEncryptionPreference
    /// Accepted and kept; the peer's own key proves its identity (see `MCSession.securityIdentity`).
    public var securityIdentity: [Any]?
    /// How peers' certificates are judged.
    public var certificatePolicy: PeerCertificatePolicy

    /// A configuration.
    public init(
        encryptionPreference: MCEncryptionPreference, securityIdentity: [Any]?, certificatePolicy: PeerCertificatePolicy
    ) {
        self.encryptionPreference = encryptionPreference
        self.securityIdentity = securityIdentity
        self.certificatePolicy = certificatePolicy
    }

    /// `.optional` encryption, every certificate accepted (the original library's default).
    public static var `default`: PeerSecurityConfiguration {
        PeerSecurityConfiguration(encryptionPreference: .optional, securityIdentity: nil, certificatePolicy: .acceptAll)
    }

    /// `.required` encryption, every certificate accepted.
    public static var encrypted: PeerSecurityConfiguration {
        PeerSecurityConfiguration(encryptionPreference: .required, securityIdentity: nil, certificatePolicy: .acceptAll)
    }
}

/// A peer: the local user or a nearby one, with its status when the value was made. Equal by identity (the
/// peer ID's fingerprint), whatever the status.
public struct Peer: Hashable, @unchecked Sendable {
    // Safety of @unchecked Sendable: MCPeerID is immutable.

    /// A peer's status.
    public enum Status: Sendable, Hashable {
        /// The local user.
        case currentUser
        /// Connected to the session.
        case connected
        /// Being connected.
        case connecting
        /// Not (or no longer) in the session.
        case notConnected
    }

    /// The name the peer shows.
    public var displayName: String { peerID.displayName }
    /// The status when this value was made.
    public let status: Status
    /// The Multipeer Connectivity peer ID.
    public let peerID: MCPeerID

    /// A peer for a peer ID.
    public init(peerID: MCPeerID, status: Status) {
        self.peerID = peerID
        self.status = status
    }

    /// Whether `displayName` is 1 to 63 bytes of UTF-8.
    public static func isValidDisplayName(_ displayName: String) -> Bool {
        !displayName.isEmpty && displayName.utf8.count <= 63
    }

    /// `displayName` cut to 63 bytes of UTF-8 on a character boundary, without control characters; `fallback`
    /// (cut the same way) when nothing is left, and "Peer" when that is empty too.
    public static func sanitizedDisplayName(_ displayName: String, fallback: String = "Peer") -> String {
        func prefix(_ text: String) -> String {
            var result = ""
            var bytes = 0
            for character in text
            where !character.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
                let count = String(character).utf8.count
                guard bytes + count <= 63 else { break }
                result.append(character)
                bytes += count
            }
            return result
        }
        let name = prefix(displayName)
        if !name.isEmpty { return name }
        let other = prefix(fallback)
        return other.isEmpty ? "Peer" : other
    }

    /// Equal when both are the same peer (by identity).
    public static func == (a: Peer, b: Peer) -> Bool { a.peerID == b.peerID }
    /// Hashes the identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(peerID) }
}

/// What a manager reports to its listeners, in order.
public enum PeerConnectionEvent {
    /// The manager is ready to start (also after a stop).
    case ready
    /// Advertising and browsing started.
    case started
    /// The manager stopped.
    case ended
    /// Something failed (discovery did not start, a message that did not decode, ...).
    case error(any Error)
    /// A peer's status changed (see its `status`), with the peers connected now.
    case devicesChanged(peer: Peer, connectedPeers: [Peer])
    /// A peer sent data (every message, including events and typed messages).
    case receivedData(peer: Peer, data: Data)
    /// A peer sent an event dictionary (``PeerConnectionManager/sendEvent(_:toPeers:)``).
    case receivedEvent(peer: Peer, eventInfo: [String: Any])
    /// A peer sent a typed message (``PeerConnectionManager/sendMessage(_:toPeers:)``).
    case receivedMessage(peer: Peer, messageType: String, data: Data)
    /// A peer opened a byte stream (an `InputStream`).
    case receivedStream(peer: Peer, stream: Stream, name: String)
    /// A peer started sending a resource.
    case startedReceivingResource(peer: Peer, name: String, progress: Progress)
    /// A resource arrived (the file is the application's: move it or delete it), or failed.
    case finishedReceivingResource(peer: Peer, name: String, url: URL?, error: (any Error)?)
    /// A peer's certificate was judged by the policy (for observation; the handler does nothing).
    case receivedCertificate(peer: Peer, certificate: [Any]?, handler: (Bool) -> Void)
    /// A nearby peer was found.
    case foundPeer(peer: Peer)
    /// A nearby peer was found, with its discovery info.
    case foundPeerWithDiscoveryInfo(peer: Peer, discoveryInfo: PeerDiscoveryInfo?)
    /// A nearby peer is gone.
    case lostPeer(peer: Peer)
    /// The nearby peers changed.
    case nearbyPeersChanged(foundPeers: [Peer])
    /// A peer invites this one; call the handler with the answer (it decides only with `.manual`, `.inviteOnly` and
    /// `.custom`; otherwise the policy already answered).
    case receivedInvitation(peer: Peer, withContext: Data?, invitationHandler: (Bool) -> Void)
}

/// A listener of a manager's events.
public typealias PeerConnectionEventListener = (PeerConnectionEvent) -> Void
