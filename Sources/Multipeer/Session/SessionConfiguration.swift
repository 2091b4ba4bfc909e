internal import Foundation
internal import Glibc

/// A session's settings: its security, its size, and how much it holds for a slow application.
public struct SessionConfiguration: Sendable {
    /// Apple's encryption preference: `.required` (the default) and `.optional` peers use TLS; `.none` and
    /// `.optional`, or two `.none` peers, talk in plaintext, where identities are only claims; `.required`
    /// and `.none` refuse each other.
    public var encryption: EncryptionPreference
    /// A secret every member must prove at connection time (requires TLS).
    public var groupSecret: GroupSecret?
    /// The most peers in the session, this one included (Apple's is 8; ours is configurable).
    public var maximumPeers = 64
    /// Asked about every peer before it joins (Apple's certificate handler); nil accepts every peer that
    /// passes the security rules. See ``TrustOnFirstUseStore`` for a ready-made hook.
    public var verifyPeer: (@Sendable (PeerVerificationRequest) async -> VerificationDecision)?
    /// The most received messages that wait for the application; the links' readers wait beyond it.
    public var receiveBufferMessages = 1_024
    /// The most bytes of received messages that wait for the application (at least one message always fits).
    public var receiveBufferBytes = 16 << 20
    /// The most unread events; later ones are dropped and counted.
    public var eventBufferLimit = 4_096
    /// How long a member whose link dropped is `reconnecting` (both sides redial it) before it becomes
    /// `notConnected` and its unacknowledged messages are reported ``SessionEvent/undelivered(_:_:reason:)``.
    public var reconnectGrace: Duration = .seconds(10)
    /// The folder received resources are saved in (created, mode 0700, on the first one); a file is never
    /// written outside it or over an existing file. A folder of this user in the temporary directory by default.
    public var resourceDirectory = SessionConfiguration.defaultResourceDirectory

    /// `swift-multipeer-resources-UID` in the temporary directory: it must be a private folder (0700) of this
    /// user, or resources are refused (another local user could otherwise plant a link there).
    public static let defaultResourceDirectory = FileManager.default.temporaryDirectory
        .appendingPathComponent("swift-multipeer-resources-\(getuid())").path
    /// The largest resource accepted from a peer, in bytes (1 TiB).
    public var maximumResourceSize: Int64 = 1 << 40
    /// The most bytes of reliable messages per member kept until the member acknowledges them (they are sent
    /// again after a reconnection); `send` waits beyond it. One message always fits.
    public var replayBufferBytes = 16 << 20

    /// Creates a configuration.
    /// - Parameters:
    ///   - encryption: The encryption preference.
    ///   - groupSecret: A secret every member must prove.
    public init(encryption: EncryptionPreference = .required, groupSecret: GroupSecret? = nil) {
        self.encryption = encryption
        self.groupSecret = groupSecret
    }

    /// Checks the rules, or throws which one is broken.
    func validate() throws(SessionError) {
        guard maximumPeers >= 2 else {
            throw SessionError(.invalidParameter, "maximumPeers is \(maximumPeers); a session needs at least 2")
        }
        guard receiveBufferMessages >= 1, receiveBufferBytes >= 1, eventBufferLimit >= 1, replayBufferBytes >= 1,
            reconnectGrace >= .zero
        else {
            throw SessionError(.invalidParameter, "buffer limits must be at least 1")
        }
        if encryption == .none, groupSecret != nil {
            throw SessionError(.invalidParameter, "a group secret needs TLS; encryption .none refuses it")
        }
    }
}
