internal import Glibc
internal import MultipeerIO

/// Remembers the fingerprint each display name was first seen with, and refuses, loudly, a peer that shows
/// up under a known name with another identity: the usual trust-on-first-use of SSH, for sessions.
///
/// Use ``verify(_:)`` as a session's ``SessionConfiguration/verifyPeer``. Every verdict other than `known` is
/// also reported on ``reports``, so an application can show "Alice's identity CHANGED" instead of a quiet
/// refusal. With a file, what was learnt survives restarts (written atomically, mode 0600, one
/// `FINGERPRINT NAME` line per peer; only names that follow the ``DisplayName`` rules are judged and written, and a
/// file with any other line is refused when read, so no name can make the file say what it did not).
public final class TrustOnFirstUseStore: Sendable {
    /// What the store concluded about a peer.
    public enum Verdict: Sendable, Hashable {
        /// A name never seen before: remembered with this fingerprint and accepted.
        case firstUse
        /// The name's remembered fingerprint: accepted.
        case known
        /// The name was remembered with another fingerprint: refused (``forget(_:)`` the name to accept the new one).
        case changed(previous: PeerFingerprint)
        /// A plaintext peer: its fingerprint is only a claim and cannot be checked; refused unless the store
        /// allows unauthenticated peers.
        case unauthenticated
    }

    /// A verdict about a peer, as ``reports`` delivers it.
    public struct Report: Sendable, Hashable, CustomStringConvertible {
        /// The peer.
        public let peer: Peer
        /// The verdict.
        public let verdict: Verdict

        /// A sentence for people; a change is in capitals.
        public var description: String {
            switch verdict {
            case .firstUse: "first use: \(peer.displayName) is \(peer.claimedFingerprint), remembered"
            case .known: "\(peer.displayName) is \(peer.claimedFingerprint), as remembered"
            case .changed(let previous):
                "IDENTITY CHANGED: \(peer.displayName) was \(previous) and is now \(peer.claimedFingerprint); "
                    + "refused (forget the name if the change is expected)"
            case .unauthenticated:
                "\(peer.displayName) is unauthenticated (plaintext): its identity cannot be checked"
            }
        }
    }

    /// The most names remembered; new names beyond it are accepted but not remembered.
    public static let maximumEntries = 10_000

    /// Verdicts other than `known`, newest kept when nobody reads (at most 256 wait).
    public let reports: AsyncStream<Report>
    private let sink: AsyncStream<Report>.Continuation
    private let path: String?
    private let allowUnauthenticated: Bool
    private let entries: Lock<[String: PeerFingerprint]>

    /// Opens a store.
    /// - Parameters:
    ///   - path: The file to load and save, created on first save; nil keeps the store in memory.
    ///   - allowUnauthenticated: Whether plaintext peers, whose identity cannot be checked, are accepted.
    /// - Throws: ``IdentityError`` when the file exists but cannot be read or is malformed.
    public init(path: String? = nil, allowUnauthenticated: Bool = false) throws(IdentityError) {
        self.path = path
        self.allowUnauthenticated = allowUnauthenticated
        (reports, sink) = AsyncStream<Report>.makeStream(bufferingPolicy: .bufferingNewest(256))
        var loaded: [String: PeerFingerprint] = [:]
        if let path, access(path, F_OK) == 0 {
            let bytes = try IdentityFile.read(path: path, limit: 1 << 20, holding: "a trust store")
            for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
                guard let space = line.firstIndex(of: " "), let fingerprint = PeerFingerprint(String(line[..<space]))
                else { throw .fileMalformed(path: path, detail: "a line is not 'FINGERPRINT NAME'") }
                let name = String(line[line.index(after: space)...])
                // Only names that follow the display-name rules are ever written: anything else was not.
                guard (try? DisplayName.validate(name)) != nil else {
                    throw .fileMalformed(path: path, detail: "a name breaks the display-name rules")
                }
                loaded[name] = fingerprint
            }
        }
        entries = Lock(loaded)
    }

    /// The fingerprint remembered for a display name.
    public func fingerprint(for displayName: String) -> PeerFingerprint? {
        entries.withLock { $0[displayName] }
    }

    /// Forgets a name, so the next peer with it is a first use.
    public func forget(_ displayName: String) throws(IdentityError) {
        entries.withLock { _ = $0.removeValue(forKey: displayName) }
        try save()
    }

    /// Judges a peer, remembering a first use.
    /// - Throws: ``IdentityError`` when the peer's display name breaks the ``DisplayName`` rules (such a name is never
    ///   remembered: a line break in it would read back as another entry), or when the file cannot be saved.
    public func evaluate(_ peer: Peer) throws(IdentityError) -> Verdict {
        try DisplayName.validate(peer.displayName)
        guard let fingerprint = peer.fingerprint else { return .unauthenticated }
        let verdict = entries.withLock { entries -> Verdict in
            switch entries[peer.displayName] {
            case nil:
                if entries.count < Self.maximumEntries { entries[peer.displayName] = fingerprint }
                return .firstUse
            case fingerprint: return .known
            case let previous?: return .changed(previous: previous)
            }
        }
        if verdict == .firstUse { try save() }
        return verdict
    }

    /// The verification hook: accepts first uses and known peers, refuses changed identities (and plaintext
    /// peers unless allowed), reporting every verdict but `known` on ``reports``.
    @Sendable public func verify(_ request: PeerVerificationRequest) async -> VerificationDecision {
        if let problem = Self.nameProblem(request.peer.displayName) {
            return .refuse(reason: "the peer's display name breaks the rules: \(problem)")
        }
        let verdict: Verdict
        do {
            verdict = try evaluate(request.peer)
        } catch {
            return .refuse(reason: "the trust store cannot be saved: \(error)")
        }
        let report = Report(peer: request.peer, verdict: verdict)
        if verdict != .known { sink.yield(report) }
        switch verdict {
        case .firstUse, .known: return .accept
        case .unauthenticated: return allowUnauthenticated ? .accept : .refuse(reason: report.description)
        case .changed: return .refuse(reason: report.description)
        }
    }

    private static func nameProblem(_ name: String) -> IdentityError? {
        do {
            try DisplayName.validate(name)
            return nil
        } catch {
            return error
        }
    }

    private func save() throws(IdentityError) {
        guard let path else { return }
        let text = entries.withLock { entries in
            entries.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)\n" }.joined()
        }
        try IdentityFile.write(Array(text.utf8), to: path)
    }
}
