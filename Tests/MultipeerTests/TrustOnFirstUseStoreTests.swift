import Foundation
import Testing

@testable import Multipeer

/// The trust store's file says what the names said, nothing more.
@Suite("Trust on first use")
struct TrustOnFirstUseStoreTests {
    static func withStorePath(_ body: (String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tofu-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await body(directory.appendingPathComponent("known-peers").path)
    }

    static func request(_ fingerprint: PeerFingerprint, _ name: String) -> PeerVerificationRequest {
        PeerVerificationRequest(
            peer: Peer(identity: .proven(fingerprint), displayName: name), verificationCode: nil, protection: "test")
    }

    @Test func aNameWithALineBreakCannotPlantAnEntryForAnotherName() async throws {
        try await Self.withStorePath { path in
            let alice = try PeerIdentity.generate(displayName: "Alice")
            let eve = try PeerIdentity.generate(displayName: "Eve")
            let store = try TrustOnFirstUseStore(path: path)
            #expect(await store.verify(Self.request(alice.fingerprint, "Alice")) == .accept)
            // Eve's name carries a line that, read back, would say Eve's key is Alice.
            let forged = "Eve\n\(eve.fingerprint) Alice"
            guard case .refuse(let reason) = await store.verify(Self.request(eve.fingerprint, forged)) else {
                Issue.record("a name breaking the display-name rules was accepted")
                return
            }
            #expect(reason.contains("display name"), "\(reason)")
            #expect(store.fingerprint(for: forged) == nil)
            let reopened = try TrustOnFirstUseStore(path: path)
            #expect(reopened.fingerprint(for: "Alice") == alice.fingerprint)
            #expect(
                try String(contentsOfFile: path, encoding: .utf8) == "\(alice.fingerprint) Alice\n")
        }
    }

    @Test func aFileWithAnEntryBreakingTheNameRulesIsRefusedWhenRead() async throws {
        try await Self.withStorePath { path in
            let alice = try PeerIdentity.generate(displayName: "Alice")
            try "\(alice.fingerprint) Al\u{1B}[2Jice\n".write(toFile: path, atomically: true, encoding: .utf8)
            #expect(throws: IdentityError.self) { _ = try TrustOnFirstUseStore(path: path) }
        }
    }
}
