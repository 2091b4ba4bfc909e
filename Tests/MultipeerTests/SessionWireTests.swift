import Foundation
import MultipeerIO
import Testing

@testable import Multipeer

/// The session control messages: golden bytes, round trips, and every bound refused.
@Suite("Session wire")
struct SessionWireTests {
    static let id = [UInt8](repeating: 0xAB, count: 16)

    @Test func goldenInvite() throws {
        let message = SessionWire.encode(
            .invite(
                id: Self.id, timeoutMilliseconds: 30_000, serviceType: "_chat._tcp", context: [1, 2],
                encryption: .optional))
        #expect(message.kind == 1 && message.isCritical)
        let expected =
            Self.id + [0x00, 0x00, 0x75, 0x30, 0x00, 0x0A] + Array("_chat._tcp".utf8) + [0x00, 0x02, 1, 2] + [0x01]
        #expect(message.body == expected)
    }

    @Test func goldenAnswerLeaveAndDelivered() throws {
        #expect(
            SessionWire.encode(.inviteAnswer(id: Self.id, answer: .declined, reason: "no")).body
                == Self.id + [1, 0, 2] + Array("no".utf8))
        // An acceptance names the invitee's session and its secret after the (empty) reason.
        let session = SessionWire.SessionKey(
            id: [UInt8](repeating: 2, count: 16), secret: [UInt8](repeating: 3, count: 32))
        #expect(
            SessionWire.encode(.inviteAnswer(id: Self.id, answer: .accepted, reason: "", session: session)).body
                == Self.id + [0, 0, 0] + session.id + session.secret)
        #expect(SessionWire.encode(.leave(reason: "left")).body == [0, 4] + Array("left".utf8))
        #expect(
            SessionWire.encode(.delivered(epoch: 0x0A0B, messageID: 0x0102)).body
                == [0, 0, 0, 0, 0, 0, 0x0A, 0x0B, 0, 0, 0, 0, 0, 0, 1, 2])
    }

    @Test func everyMessageRoundTrips() throws {
        let fingerprint = try PeerIdentity.generate(displayName: "x").fingerprint
        let messages: [SessionWire.Message] = [
            .invite(
                id: Self.id, timeoutMilliseconds: 1, serviceType: "_a._tcp",
                context: [UInt8](repeating: 1, count: 8192),
                encryption: .none),
            .inviteAnswer(id: Self.id, answer: .alreadyConnected, reason: "é"),
            .inviteAnswer(
                id: Self.id, answer: .accepted, reason: "",
                session: SessionWire.SessionKey(id: Self.id, secret: [UInt8](repeating: 8, count: 32))),
            .inviteCancel(id: Self.id, reason: "late"),
            .join(linkID: Self.id, sessionID: Self.id, proof: [UInt8](repeating: 5, count: 32)),
            .joinAnswer(accepted: true, reason: ""),
            .sessions(listenPort: 4242, current: Self.id, secrets: [Self.id: [UInt8](repeating: 7, count: 32)]),
            .members([
                SessionWire.Member(
                    fingerprint: fingerprint, displayName: "Zoë", sessionID: Self.id,
                    addresses: [
                        SocketAddress(.v4(IPv4Address(10, 0, 0, 1)), port: 1),
                        SocketAddress(.v6(IPv6Address("fe80::1")!), port: 2),
                    ])
            ]),
            .leave(reason: "left"),
            .delivered(epoch: 7, messageID: .max),
        ]
        for message in messages {
            #expect(try SessionWire.decode(SessionWire.encode(message)) == message)
        }
    }

    @Test func longTextIsCutAtACharacterBoundary() throws {
        let long = String(repeating: "é", count: 400)  // 800 bytes
        let encoded = SessionWire.encode(.leave(reason: long))
        guard case .leave(let reason)? = try SessionWire.decode(encoded) else {
            Issue.record("not a leave")
            return
        }
        #expect(reason.utf8.count == 512 && reason == String(repeating: "é", count: 256))
    }

    @Test func boundsAreRefused() throws {
        func refused(_ kind: SessionWire.Kind, _ body: [UInt8], _ words: String) {
            do {
                _ = try SessionWire.decode(SessionMessage(kind: kind.rawValue, body: body))
                Issue.record("\(kind) accepted \(body.count) bytes")
            } catch {
                #expect(error.description.contains(words), "\(error)")
            }
        }
        refused(
            .invite, Self.id + [0, 0, 0, 1, 0, 0, 0x20, 0x01] + [UInt8](repeating: 0, count: 8193), "more than 8192")
        refused(.invite, Self.id + [0, 0, 0, 1, 0, 0, 0, 0, 3], "unknown encryption preference 3")
        refused(.invite, Self.id + [0, 0, 0, 1, 0, 0, 0, 0], "runs past the end")
        refused(.inviteAnswer, Self.id + [9, 0, 0], "unknown answer 9")
        refused(.inviteAnswer, Self.id + [0, 0, 0] + Self.id, "accepting session secret")
        refused(.inviteAnswer, Self.id + [1, 0, 0] + Self.id + [UInt8](repeating: 0, count: 32), "48 bytes after")
        refused(.join, Self.id, "runs past the end")
        refused(.leave, [0, 1, 0x41, 0], "1 bytes after the last field")
        refused(.leave, [0, 2, 0xC3, 0x28], "not UTF-8")
        refused(.members, [49], "49 members, more than 48")
        refused(.sessions, [0, 1] + Self.id + [65], "65 sessions, more than 64")
        refused(
            .sessions,
            [0, 1] + Self.id + [2] + Self.id + [UInt8](repeating: 0, count: 32) + Self.id
                + [UInt8](repeating: 0, count: 32), "listed twice")
        refused(.joinAnswer, [2, 0, 0], "accepted flag 2")
        let member = [UInt8](repeating: 1, count: 32) + [0, 1, 0x41] + Self.id
        refused(.members, [1] + member + [5], "5 addresses, more than 4")
        refused(.members, [1] + member + [1, 7], "address family 7")
        #expect(throws: SessionWireError.self) {
            _ = try SessionWire.decode(SessionMessage(kind: 999, isCritical: true, body: []))
        }
        #expect(try SessionWire.decode(SessionMessage(kind: 999, isCritical: false, body: [1, 2])) == nil)
    }

    @Test func trustOnFirstUseRemembersAndRefusesAChangeLoudly() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tofu-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("known-peers").path
        let store = try TrustOnFirstUseStore(path: path)
        let alice = try PeerIdentity.generate(displayName: "Alice")
        let impostor = try PeerIdentity.generate(displayName: "Alice")
        func request(_ identity: PeerIdentity, proven: Bool = true) -> PeerVerificationRequest {
            PeerVerificationRequest(
                peer: Peer(
                    identity: proven ? .proven(identity.fingerprint) : .claimed(identity.fingerprint),
                    displayName: identity.displayName), verificationCode: nil, protection: "test")
        }
        #expect(await store.verify(request(alice)) == .accept)
        #expect(await store.verify(request(alice)) == .accept)
        guard case .refuse(let reason) = await store.verify(request(impostor)) else {
            Issue.record("a changed identity was accepted")
            return
        }
        #expect(reason.hasPrefix("IDENTITY CHANGED: Alice was \(alice.fingerprint)"))
        guard case .refuse = await store.verify(request(alice, proven: false)) else {
            Issue.record("a plaintext claim was accepted")
            return
        }
        // What was learnt survives a restart.
        let reopened = try TrustOnFirstUseStore(path: path)
        #expect(reopened.fingerprint(for: "Alice") == alice.fingerprint)
        #expect(try reopened.evaluate(request(impostor).peer) == .changed(previous: alice.fingerprint))
        try reopened.forget("Alice")
        #expect(try reopened.evaluate(request(impostor).peer) == .firstUse)
        var reports = store.reports.makeAsyncIterator()
        #expect(await reports.next()?.verdict == .firstUse)
        #expect(await reports.next()?.verdict == .changed(previous: alice.fingerprint))
    }
}
