public import Foundation
public import Multipeer
internal import MultipeerIO

/// A peer in the Multipeer Connectivity API.
///
/// Every `init(displayName:)` makes a new peer with a new identity (an Ed25519 key pair), even for a name used
/// before; peer IDs are equal when their identities are. To keep the same identity across launches, archive the
/// peer ID (`NSKeyedArchiver`, secure coding) and unarchive it on the next launch, as Apple's documentation
/// recommends: the archive holds the display name and the identity's fingerprint, never the private key, which
/// is saved on first archiving in this user's identity folder (``PeerIdentityStore/user``, mode 0600). An
/// archive unarchived where that key is not (another machine or user) is a peer ID of the same peer that
/// cannot start a session, like a remote peer's.
///
/// Remote peers' IDs are made by the framework (browsers, sessions), never with `init(displayName:)`.
open class MCPeerID: NSObject, NSCopying, NSSecureCoding, @unchecked Sendable {
    // Safety of @unchecked Sendable: every stored property is immutable.

    /// The peer's display name (at most 63 bytes of UTF-8).
    public let displayName: String
    /// The peer's identity: the fingerprint of its public key.
    public let fingerprint: PeerFingerprint
    /// The identity with its private key, for a peer ID made (or archived) here; nil for remote peers.
    let identity: PeerIdentity?
    /// The native peer, for remote peer IDs (with what the engine knows of its identity).
    let nativePeer: Peer

    /// Makes a new local peer with a new identity.
    ///
    /// Apple raises an exception for an empty name or one longer than 63 bytes of UTF-8; so does this (a fatal
    /// error naming the rule), and for control characters, which could forge lines in logs and terminals.
    public init(displayName: String) {
        let identity: PeerIdentity
        do {
            identity = try PeerIdentity.generate(displayName: displayName)
        } catch {
            invalidArgument("MCPeerID(displayName:): \(error.reason)")
        }
        self.displayName = displayName
        fingerprint = identity.fingerprint
        self.identity = identity
        nativePeer = Peer(identity: .proven(identity.fingerprint), displayName: displayName)
        super.init()
    }

    /// A remote peer as the engine reports it.
    init(peer: Peer) {
        displayName = peer.displayName
        fingerprint = peer.claimedFingerprint
        identity = nil
        nativePeer = peer
        super.init()
    }

    // MARK: Where archived identities are kept

    private static let store = Lock(PeerIdentityStore.user)

    /// Where archiving a local peer ID keeps its private key, and unarchiving looks for it (an addition):
    /// ``PeerIdentityStore/user`` (`$XDG_DATA_HOME/swift-multipeer/identities`) unless set.
    public static var identityStore: PeerIdentityStore {
        get { store.withLock { $0 } }
        set { store.withLock { $0 = newValue } }
    }

    // MARK: NSSecureCoding

    /// Peer IDs are archived with secure coding.
    public static var supportsSecureCoding: Bool { true }

    private static let nameKey = "MCPeerIDDisplayName"
    private static let fingerprintKey = "MCPeerIDFingerprint"

    /// Archives the display name and fingerprint; for a local peer, first saves its identity in this user's
    /// identity folder (so the archive brings the same identity back on a later launch). The private key is
    /// never in the archive: apps send archived peer IDs to other peers.
    open func encode(with coder: NSCoder) {
        if let identity {
            do {
                try Self.identityStore.save(identity)
            } catch {
                report("cannot keep \(displayName)'s identity: \(error.reason)", level: .error, peer: self)
            }
        }
        coder.encode(displayName as NSString, forKey: Self.nameKey)
        coder.encode(fingerprint.description as NSString, forKey: Self.fingerprintKey)
    }

    /// Whether this thread is unarchiving a peer ID. A peer ID's archive holds no other object than its two
    /// strings; one whose name or fingerprint refers back to the peer ID itself would otherwise be decoded again
    /// and again until the stack overflows (swift-corelibs-foundation checks an object's class once per archive,
    /// so asking for a string does not stop it).
    @TaskLocal private static var isUnarchiving = false

    /// Unarchives a peer ID; nil when the archive does not hold a valid display name and fingerprint (or holds a
    /// peer ID inside a peer ID). When this user's identity folder holds the fingerprint's key, the peer ID can
    /// start sessions again.
    public required init?(coder: NSCoder) {
        guard !Self.isUnarchiving,
            let (name, text) = Self.$isUnarchiving.withValue(true, operation: { Self.decodeFields(coder) }),
            (try? DisplayName.validate(name)) != nil,
            text.utf8.count < 128, let fingerprint = PeerFingerprint(text)
        else { return nil }
        self.fingerprint = fingerprint
        identity = try? Self.identityStore.identity(for: fingerprint)
        // Our own key: the name saved with it, not one an archive from elsewhere may claim for it.
        displayName = identity?.displayName ?? name
        nativePeer = Peer(
            identity: identity == nil ? .claimed(fingerprint) : .proven(fingerprint), displayName: displayName)
        super.init()
    }

    /// The archived display name and fingerprint text, nil unless both are strings.
    private static func decodeFields(_ coder: NSCoder) -> (String, String)? {
        guard let name = coder.decodeObject(of: NSString.self, forKey: nameKey) as String?,
            let text = coder.decodeObject(of: NSString.self, forKey: fingerprintKey) as String?
        else { return nil }
        return (name, text)
    }

    // MARK: NSObject

    /// Peer IDs are immutable: the copy is the same object.
    open func copy(with zone: NSZone? = nil) -> Any { self }

    /// Equal when both name the same identity.
    open override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? MCPeerID else { return false }
        return other.fingerprint == fingerprint
    }

    /// Hashes the identity.
    open override var hash: Int { fingerprint.hashValue }

    /// `MCPeerID(Alice, abcd-efgh-...)`.
    open override var description: String { "MCPeerID(\(displayName), \(fingerprint))" }
}
