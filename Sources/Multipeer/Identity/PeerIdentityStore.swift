public import Foundation
internal import Glibc

/// A folder of saved identities, one file per identity named by its fingerprint: how an identity outlives the
/// process without its private key ever leaving this user's files (Apple's archived `MCPeerID` keeps a peer's
/// identity across launches; ours keeps the key here and archives only the fingerprint).
///
/// The folder is created with mode 0700 and every file with 0600 (``PeerIdentity/save(to:)``); a file is only
/// believed when the key inside has the fingerprint its name claims.
public struct PeerIdentityStore: Sendable {
    /// The folder.
    public let directory: URL

    /// A store in `directory`.
    public init(directory: URL) {
        self.directory = directory
    }

    /// This user's store: `$XDG_DATA_HOME/swift-multipeer/identities`, or
    /// `~/.local/share/swift-multipeer/identities` when `XDG_DATA_HOME` is unset or not absolute.
    public static var user: PeerIdentityStore {
        PeerIdentityStore(directory: dataDirectory.appendingPathComponent("identities", isDirectory: true))
    }

    /// `$XDG_DATA_HOME/swift-multipeer`, or `~/.local/share/swift-multipeer`.
    public static var dataDirectory: URL {
        let environment = ProcessInfo.processInfo.environment
        let base: URL
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            base = URL(fileURLWithPath: xdg, isDirectory: true)
        } else {
            base = FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(
                ".local/share", isDirectory: true)
        }
        return base.appendingPathComponent("swift-multipeer", isDirectory: true)
    }

    /// The file that holds (or would hold) the identity with `fingerprint`.
    public func path(for fingerprint: PeerFingerprint) -> String {
        directory.appendingPathComponent("\(fingerprint).identity").path
    }

    /// Saves `identity` (creating the folder, mode 0700); saving it again rewrites the same file.
    /// - Throws: ``IdentityError`` with `fileWriteFailed` naming the step that failed.
    public func save(_ identity: PeerIdentity) throws(IdentityError) {
        let folder = directory.path
        do {
            try FileManager.default.createDirectory(
                atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .fileWriteFailed(path: folder, detail: "cannot create the folder: \(error.localizedDescription)")
        }
        try identity.save(to: path(for: identity.fingerprint))
    }

    /// The saved identity with `fingerprint`, or nil when there is none (or the file holds another key).
    /// - Throws: ``IdentityError`` when a file exists but cannot be read or trusted (for example mode 0644).
    public func identity(for fingerprint: PeerFingerprint) throws(IdentityError) -> PeerIdentity? {
        let file = path(for: fingerprint)
        guard access(file, F_OK) == 0 else { return nil }
        let identity = try PeerIdentity.load(from: file)
        return identity.fingerprint == fingerprint ? identity : nil
    }
}
