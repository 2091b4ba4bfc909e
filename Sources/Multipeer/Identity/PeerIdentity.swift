internal import MultipeerIO
internal import Synchronization

/// A peer's identity: an Ed25519 key pair, the fingerprint of its public key, and a display name.
///
/// The fingerprint identifies the peer; the display name is only for people. An identity made with
/// ``generate(displayName:)`` is ephemeral (``isEphemeral``) until it is saved with ``save(to:)``; the
/// equivalent of archiving an `MCPeerID` is saving the identity and loading it with ``load(from:)`` on the
/// next run, so other peers recognise it.
public final class PeerIdentity: Sendable {
    /// The name other peers show for this peer.
    public let displayName: String
    /// The SHA-256 of ``publicKey``: the peer's identity.
    public let fingerprint: PeerFingerprint
    /// The raw 32-byte Ed25519 public key.
    public let publicKey: [UInt8]
    let key: EVPKey
    private let ephemeral: Atomic<Bool>
    /// The TLS contexts made for this identity (see ``TLSContexts/of(_:)``), shared by its connections.
    let tlsContexts = Lock<TLSContexts?>(nil)

    private init(displayName: String, key: EVPKey, ephemeral: Bool) throws(IdentityError) {
        self.displayName = displayName
        self.key = key
        publicKey = try key.rawPublicKey()
        fingerprint = PeerFingerprint(publicKey: publicKey)
        self.ephemeral = Atomic(ephemeral)
    }

    /// Whether the identity exists only in memory: true for a generated identity until it is saved, false
    /// for a loaded or saved one.
    public var isEphemeral: Bool {
        ephemeral.load(ordering: .acquiring)
    }

    /// Generates a new identity with a fresh random Ed25519 key pair.
    ///
    /// - Parameter displayName: The name other peers show; see ``DisplayName`` for the rules.
    /// - Returns: An ephemeral identity.
    /// - Throws: ``IdentityError`` if the display name breaks a rule (`.displayNameEmpty`,
    ///   `.displayNameTooLong`, `.displayNameInvalid`) or OpenSSL cannot make a key (`.keyGenerationFailed`).
    public static func generate(displayName: String) throws(IdentityError) -> PeerIdentity {
        try DisplayName.validate(displayName)
        return try PeerIdentity(displayName: displayName, key: .generateEd25519(), ephemeral: true)
    }

    /// The same key under another display name (ephemeral until saved), for a program that keeps one identity
    /// but lets its user choose the name each time.
    /// - Throws: ``IdentityError`` if the name breaks a ``DisplayName`` rule.
    public func renamed(_ displayName: String) throws(IdentityError) -> PeerIdentity {
        try DisplayName.validate(displayName)
        return try PeerIdentity(displayName: displayName, key: key, ephemeral: true)
    }

    /// Saves the identity (display name and private key) to a file only its owner can read.
    ///
    /// The file is written to a hidden temporary file next to `path` (mode 0600, locked while written), synced,
    /// renamed over `path` atomically (a symbolic link at `path` is replaced, never followed), and the directory is
    /// synced, so a crash leaves the old file or the new one; a temporary file left by an earlier crash is removed
    /// first. See the format in `IdentityFile.swift`. Afterwards ``isEphemeral`` is false.
    ///
    /// - Parameter path: Where to write the file; its directory must exist.
    /// - Throws: ``IdentityError`` with code `.fileWriteFailed(path:)` saying which step failed and why, or
    ///   `.openSSL` if the key cannot be encoded.
    public func save(to path: String) throws(IdentityError) {
        let contents = IdentityFile.encode(displayName: displayName, privateKeyPEM: try key.privateKeyPEM())
        try IdentityFile.write(contents, to: path)
        ephemeral.store(false, ordering: .releasing)
    }

    /// Loads an identity saved with ``save(to:)``.
    ///
    /// A symbolic link at `path` is refused, and a FIFO or device fails at once instead of blocking (the file is
    /// opened with `O_NOFOLLOW | O_NONBLOCK`).
    ///
    /// - Parameter path: The identity file.
    /// - Returns: The identity, not ephemeral.
    /// - Throws: ``IdentityError`` with code `.fileTooOpen(path:mode:)` if the file's mode grants any
    ///   permission to its group or others (the key may have been exposed; fix with `chmod 600`),
    ///   `.fileUnreadable(path:)` if it cannot be opened or read, `.fileMalformed(path:)` if its content is
    ///   not a valid identity file, `.notEd25519` if its key is of another kind.
    public static func load(from path: String) throws(IdentityError) -> PeerIdentity {
        let (displayName, pem) = try IdentityFile.decode(IdentityFile.read(path: path), path: path)
        let key: EVPKey
        do {
            key = try EVPKey.ed25519(privateKeyPEM: pem, describedAs: "'\(path)'")
        } catch  where error.code == .openSSL {
            throw .fileMalformed(path: path, detail: "its private key cannot be read: \(error.reason)")
        }
        return try PeerIdentity(displayName: displayName, key: key, ephemeral: false)
    }

    /// Signs `data` with the identity's private key.
    ///
    /// - Parameter data: The message; Ed25519 hashes it internally.
    /// - Returns: The 64-byte Ed25519 signature.
    /// - Throws: ``IdentityError`` with code `.openSSL` if OpenSSL fails.
    public func sign(_ data: [UInt8]) throws(IdentityError) -> [UInt8] {
        try key.sign(data)
    }

    /// Checks an Ed25519 signature.
    ///
    /// - Parameters:
    ///   - signature: The 64-byte signature.
    ///   - data: The message that was signed.
    ///   - publicKey: The signer's raw 32-byte Ed25519 public key.
    /// - Returns: true only if `signature` is a valid signature of `data` by `publicKey`; false for any
    ///   malformed input.
    public static func verify(signature: [UInt8], data: [UInt8], publicKey: [UInt8]) -> Bool {
        guard let key = EVPKey.ed25519(rawPublicKey: publicKey) else { return false }
        return key.verify(signature: signature, data: data)
    }
}
