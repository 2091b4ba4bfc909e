import MultipeerIO
import Testing

@testable import Multipeer

/// The STUN codec and the TURN client's rules, without a relay: primitives against published values, the bounds
/// every decoder keeps, and the allocation's life on a manual clock.
@Suite("STUN and TURN: codec and client state machine")
struct RelayProtocolTests {
    static let credentials = TURNClientStateMachine.Credentials(username: "ada", password: "secret")

    // MARK: Primitives

    @Test func theHashesGiveTheirPublishedValues() {
        // CRC-32's check value (ISO 3309 / ITU-T V.42), HMAC-SHA1 test case 1 of RFC 2202, MD5 of RFC 1321's "abc".
        #expect(STUNCrypto.crc32(Array("123456789".utf8)) == 0xCBF4_3926)
        let mac = STUNCrypto.hmacSHA1(key: [UInt8](repeating: 0x0b, count: 20), message: Array("Hi There".utf8))
        #expect(hex(mac) == "b617318655057264e28bc0b6fb378c8ef146be00")
        // The long-term key is MD5("user:realm:password") (RFC 8489 section 9.2.2), 16 bytes.
        #expect(
            hex(STUNCrypto.longTermKey(username: "ada", realm: "lab.test", password: "secret"))
                == "0237db8711c3b3ade25c37d8b7cab04c")
    }

    @Test func methodAndClassAreInterleavedInTheTypeField() {
        let id = [UInt8](repeating: 1, count: 12)
        #expect(STUNMessage(method: .allocate, messageClass: .request, transactionID: id).typeField == 0x0003)
        #expect(STUNMessage(method: .allocate, messageClass: .success, transactionID: id).typeField == 0x0103)
        #expect(STUNMessage(method: .allocate, messageClass: .error, transactionID: id).typeField == 0x0113)
        #expect(
            STUNMessage(method: .connectionAttempt, messageClass: .indication, transactionID: id).typeField == 0x001C)
        for method in [STUNMessage.Method.binding, .allocate, .refresh, .connect, .connectionBind, .connectionAttempt] {
            for messageClass in [STUNMessage.Class.request, .indication, .success, .error] {
                let type = STUNMessage(method: method, messageClass: messageClass, transactionID: id).typeField
                let (m, c) = STUNMessage.split(type)
                #expect(m == method && c == messageClass)
            }
        }
    }

    @Test func aMessageRoundTripsWithItsIntegrityAndFingerprint() throws {
        let id = Array(0..<12).map(UInt8.init)
        let key = STUNCrypto.longTermKey(username: "ada", realm: "lab.test", password: "secret")
        let v4 = SocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 32853)
        let v6 = SocketAddress(.v6(IPv6Address("2001:db8:1234:5678:11:2233:4455:6677")!), port: 32853)
        let message = STUNMessage(
            method: .connect, messageClass: .success, transactionID: id,
            attributes: [
                STUNMessage.xorAddress(STUNMessage.AttributeType.xorPeerAddress, v4, transactionID: id),
                STUNMessage.xorAddress(STUNMessage.AttributeType.xorRelayedAddress, v6, transactionID: id),
                STUNMessage.numberAttribute(STUNMessage.AttributeType.connectionID, 0xDEAD_BEEF),
                STUNMessage.textAttribute(STUNMessage.AttributeType.realm, "lab.test"),
            ])
        let bytes = message.encoded(integrityKey: key, fingerprint: true)
        #expect(bytes.count % 4 == 0)
        let decoded = try STUNMessage(decoding: bytes)
        #expect(decoded.method == .connect && decoded.messageClass == .success && decoded.transactionID == id)
        #expect(decoded.address(STUNMessage.AttributeType.xorPeerAddress) == v4)
        #expect(decoded.address(STUNMessage.AttributeType.xorRelayedAddress) == v6)
        #expect(decoded.number(STUNMessage.AttributeType.connectionID) == 0xDEAD_BEEF)
        #expect(decoded.text(STUNMessage.AttributeType.realm) == "lab.test")
        #expect(STUNMessage.verifiesIntegrity(bytes, key: key))
        // A changed byte, or another key, and it no longer verifies; the fingerprint covers the integrity.
        var tampered = bytes
        tampered[30] ^= 1
        #expect(!STUNMessage.verifiesIntegrity(tampered, key: key))
        #expect(
            !STUNMessage.verifiesIntegrity(
                bytes, key: STUNCrypto.longTermKey(username: "ada", realm: "lab.test", password: "x")))
        let fingerprint = try #require(decoded.attribute(STUNMessage.AttributeType.fingerprint))
        let crc = STUNCrypto.crc32(Array(bytes[0..<(bytes.count - 8)])) ^ 0x5354_554E
        #expect(fingerprint == STUNMessage.bytes32(crc))
    }

    @Test func theDecoderKeepsItsBounds() throws {
        let id = [UInt8](repeating: 7, count: 12)
        let good = STUNMessage(method: .allocate, messageClass: .success, transactionID: id).encoded()
        // Shorter than a header, a length that disagrees with the bytes, not a multiple of four, no cookie.
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage(decoding: Array(good.prefix(19))) }
        var longer = good + [0, 0, 0, 0]
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage(decoding: longer) }
        longer[3] = 4
        #expect(try STUNMessage(decoding: longer).attributes == [STUNMessage.Attribute(type: 0, value: [])])
        var noCookie = good
        noCookie[4] = 0
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage(decoding: noCookie) }
        // An attribute that claims more than the message holds.
        var overlong = good + [0x00, 0x14, 0x01, 0x00]
        overlong[3] = 4
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage(decoding: overlong) }
        // More than 32 attributes, and more than 4 KiB: refused, and a stream's frame length refuses the header.
        var many = STUNMessage(method: .allocate, messageClass: .success, transactionID: id)
        many.attributes = (0..<33).map { _ in STUNMessage.Attribute(type: 0x8022, value: [1, 2, 3, 4]) }
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage(decoding: many.encoded()) }
        var huge = good
        huge[2] = 0x10
        huge[3] = 0x00
        #expect(throws: STUNMessage.DecodingError.self) { try STUNMessage.frameLength(huge) }
        #expect(try STUNMessage.frameLength(Array(good.prefix(10))) == nil)
        #expect(try STUNMessage.frameLength(good) == 20)
        #expect(throws: STUNMessage.DecodingError.self) {
            try STUNMessage.frameLength([0x80] + Array(good.dropFirst()))
        }
        // Attribute values are checked by size: a 3-byte number, an address of the wrong length read as none.
        var odd = STUNMessage(method: .allocate, messageClass: .success, transactionID: id)
        odd.attributes = [
            STUNMessage.Attribute(type: STUNMessage.AttributeType.lifetime, value: [0, 0, 1]),
            STUNMessage.Attribute(type: STUNMessage.AttributeType.xorRelayedAddress, value: [0, 1, 0, 0, 1]),
            STUNMessage.Attribute(type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4]),
        ]
        let decoded = try STUNMessage(decoding: odd.encoded())
        #expect(decoded.number(STUNMessage.AttributeType.lifetime) == nil)
        #expect(decoded.address(STUNMessage.AttributeType.xorRelayedAddress) == nil)
        #expect(decoded.errorCode == nil)
    }

    // MARK: The client state machine

    /// Drives one client against a scripted relay: answers are made here, with the relay's key.
    struct Relay {
        var client = TURNClientStateMachine(credentials: RelayProtocolTests.credentials)
        var now = IOInstant(nanoseconds: 1_000_000_000)
        let realm = "lab.test"
        var nonce = "n1"
        var key: [UInt8] { STUNCrypto.longTermKey(username: "ada", realm: realm, password: "secret") }

        static func sent(_ actions: [TURNClientStateMachine.Action]) -> [STUNMessage] {
            actions.compactMap {
                if case .send(let bytes) = $0 { try? STUNMessage(decoding: bytes) } else { nil }
            }
        }

        func answer(
            _ request: STUNMessage, _ messageClass: STUNMessage.Class, _ attributes: [STUNMessage.Attribute],
            signed: Bool = true
        ) -> [UInt8] {
            STUNMessage(
                method: request.method, messageClass: messageClass, transactionID: request.transactionID,
                attributes: attributes
            ).encoded(integrityKey: signed ? key : nil, fingerprint: true)
        }

        func challenge(_ request: STUNMessage, code: Int = 401) -> [UInt8] {
            answer(
                request, .error,
                [
                    STUNMessage.Attribute(
                        type: STUNMessage.AttributeType.errorCode, value: [0, 0, UInt8(code / 100), UInt8(code % 100)]),
                    STUNMessage.textAttribute(STUNMessage.AttributeType.realm, realm),
                    STUNMessage.textAttribute(STUNMessage.AttributeType.nonce, nonce),
                ], signed: false)
        }

        /// Allocates through the 401 challenge; returns the relayed address.
        mutating func allocate(lifetime: UInt32 = 600) -> [TURNClientStateMachine.Action] {
            let first = Self.sent(client.start(now: now))[0]
            let second = Self.sent(client.received(challenge(first), now: now))[0]
            return client.received(
                answer(
                    second, .success,
                    [
                        STUNMessage.xorAddress(
                            STUNMessage.AttributeType.xorRelayedAddress, RelayProtocolTests.relayed,
                            transactionID: second.transactionID),
                        STUNMessage.numberAttribute(STUNMessage.AttributeType.lifetime, lifetime),
                    ]), now: now)
        }
    }

    static let relayed = SocketAddress(.v4(IPv4Address(192, 0, 2, 50)), port: 49_200)

    @Test func anAllocationAuthenticatesAfterTheChallengeAndAsksForTCP() throws {
        var relay = Relay()
        let first = Relay.sent(relay.client.start(now: relay.now))[0]
        #expect(first.method == .allocate && first.attribute(STUNMessage.AttributeType.username) == nil)
        #expect(first.attribute(STUNMessage.AttributeType.requestedTransport) == [6, 0, 0, 0])
        let actions = relay.client.received(relay.challenge(first), now: relay.now)
        let second = try #require(Relay.sent(actions).first)
        #expect(second.transactionID != first.transactionID)
        #expect(second.text(STUNMessage.AttributeType.username) == "ada")
        #expect(second.text(STUNMessage.AttributeType.realm) == "lab.test")
        #expect(second.text(STUNMessage.AttributeType.nonce) == "n1")
        if case .send(let bytes) = actions[0] { #expect(STUNMessage.verifiesIntegrity(bytes, key: relay.key)) }
        let done = relay.client.received(
            relay.answer(
                second, .success,
                [
                    STUNMessage.xorAddress(
                        STUNMessage.AttributeType.xorRelayedAddress, Self.relayed, transactionID: second.transactionID)
                ]), now: relay.now)
        #expect(done == [.allocated(relayed: Self.relayed, mapped: nil)])
    }

    @Test func theAllocationAndPermissionsAreRefreshedOnTime() throws {
        var relay = Relay()
        _ = relay.client.permit([.v4(IPv4Address(192, 0, 2, 50))], now: relay.now)
        let allocated = relay.allocate(lifetime: 600)
        // The permission asked for before the allocation goes out with it.
        #expect(Relay.sent(allocated).map(\.method) == [.createPermission])
        #expect(relay.client.nextDeadline == relay.now + TURNClientStateMachine.requestTimeout)
        // Answer the permission; next: permissions at 120 s, the allocation at 300 s (half its lifetime).
        let permission = Relay.sent(allocated)[0]
        _ = relay.client.received(relay.answer(permission, .success, []), now: relay.now)
        #expect(relay.client.nextDeadline == relay.now + .seconds(120))
        relay.now = relay.now + .seconds(120)
        #expect(Relay.sent(relay.client.timerFired(now: relay.now)).map(\.method) == [.createPermission])
        relay.now = relay.now + .seconds(180)
        let due = Relay.sent(relay.client.timerFired(now: relay.now))
        #expect(due.contains { $0.method == .refresh })
    }

    @Test func anAllocationIsReportedOnlyOnceItsPermissionsHold() throws {
        // A relayed dialer connects from its own allocation on the same relay; reporting (and so advertising) the
        // address before the relay let those in had a peer that dialed at once refused (447, seen under TSan).
        let server = IPAddress.v4(IPv4Address(192, 0, 2, 1))
        for grant in [true, false] {
            var relay = Relay(
                client: TURNClientStateMachine(credentials: RelayProtocolTests.credentials, permitsRelay: true))
            _ = relay.client.permit([server], now: relay.now)
            let allocated = relay.allocate()
            #expect(!allocated.contains { if case .allocated = $0 { true } else { false } })
            let permission = try #require(Relay.sent(allocated).first)
            #expect(permission.method == .createPermission)
            // The address given before, and the relay's own relayed address.
            let permitted = permission.attributes.filter { $0.type == STUNMessage.AttributeType.xorPeerAddress }.map {
                STUNMessage(
                    method: .createPermission, messageClass: .request, transactionID: permission.transactionID,
                    attributes: [$0]
                ).address(STUNMessage.AttributeType.xorPeerAddress)?.address
            }
            #expect(permitted == [server, Self.relayed.address])
            // Another permission's answer does not report it.
            let later = try #require(
                Relay.sent(relay.client.permit([.v4(IPv4Address(203, 0, 113, 9))], now: relay.now)).first)
            #expect(relay.client.received(relay.answer(later, .success, []), now: relay.now).isEmpty)
            if grant {
                #expect(
                    relay.client.received(relay.answer(permission, .success, []), now: relay.now)
                        == [.allocated(relayed: Self.relayed, mapped: nil)])
                // Renewed permissions are not a second report.
                relay.now = relay.now + .seconds(120)
                let renewal = try #require(Relay.sent(relay.client.timerFired(now: relay.now)).first)
                #expect(relay.client.received(relay.answer(renewal, .success, []), now: relay.now).isEmpty)
            } else {
                // Refused: the allocation fails, never reported.
                let refused = relay.client.received(
                    relay.answer(
                        permission, .error,
                        [STUNMessage.Attribute(type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4, 3])]),
                    now: relay.now)
                guard case .failed(let error)? = refused.last, refused.count == 1 else {
                    Issue.record("a refused permission did not fail the allocation: \(refused)")
                    continue
                }
                #expect(error.reason.contains("403"))
            }
        }
    }

    @Test func aStaleNonceIsRenewedAndARefusedRefreshLosesTheAllocation() throws {
        var relay = Relay()
        _ = relay.allocate(lifetime: 60)
        relay.now = relay.now + .seconds(30)
        let refresh = try #require(Relay.sent(relay.client.timerFired(now: relay.now)).first)
        relay.nonce = "n2"
        let again = try #require(
            Relay.sent(relay.client.received(relay.challenge(refresh, code: 438), now: relay.now)).first)
        #expect(again.method == .refresh && again.text(STUNMessage.AttributeType.nonce) == "n2")
        let refused = relay.client.received(
            relay.answer(
                again, .error,
                [STUNMessage.Attribute(type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4, 37])]),
            now: relay.now)
        guard case .failed(let error) = refused.last else {
            Issue.record("a refused refresh did not end the allocation: \(refused)")
            return
        }
        #expect(error.code == .allocationLost)
    }

    @Test func wrongCredentialsFailWithTheReasonAndUnsignedAnswersAreNotBelieved() throws {
        var relay = Relay()
        let first = Relay.sent(relay.client.start(now: relay.now))[0]
        let second = Relay.sent(relay.client.received(relay.challenge(first), now: relay.now))[0]
        // The relay says 401 again to the authenticated request: the password is wrong.
        let failed = relay.client.received(relay.challenge(second), now: relay.now)
        guard case .failed(let error) = failed.last else {
            Issue.record("no failure: \(failed)")
            return
        }
        #expect(error.code == .refused(status: 401) && error.reason.contains("user name or password is wrong"))

        // A success to an authenticated request without a valid integrity is someone else's: ignored, and the
        // request times out.
        var other = Relay()
        let start = Relay.sent(other.client.start(now: other.now))[0]
        let authenticated = Relay.sent(other.client.received(other.challenge(start), now: other.now))[0]
        let forged = other.answer(
            authenticated, .success,
            [
                STUNMessage.xorAddress(
                    STUNMessage.AttributeType.xorRelayedAddress, Self.relayed,
                    transactionID: authenticated.transactionID)
            ], signed: false)
        #expect(other.client.received(forged, now: other.now).isEmpty)
        other.now = other.now + TURNClientStateMachine.requestTimeout
        guard case .failed(let timeout) = other.client.timerFired(now: other.now).last else {
            Issue.record("no timeout")
            return
        }
        #expect(timeout.code == .unreachable)
    }

    @Test func connectionsComeInByAttemptAndGoOutByConnect() throws {
        var relay = Relay()
        _ = relay.allocate()
        // Incoming: the relay's ConnectionAttempt names the peer and the connection to bind.
        let peer = SocketAddress(.v4(IPv4Address(192, 0, 2, 77)), port: 40_000)
        let id = [UInt8](repeating: 3, count: 12)
        let attempt = STUNMessage(
            method: .connectionAttempt, messageClass: .indication, transactionID: id,
            attributes: [
                STUNMessage.xorAddress(STUNMessage.AttributeType.xorPeerAddress, peer, transactionID: id),
                STUNMessage.numberAttribute(STUNMessage.AttributeType.connectionID, 42),
            ]
        ).encoded()
        let incoming = relay.client.received(attempt, now: relay.now)
        guard case .incoming(let from, let bind, let connectionID) = incoming.first else {
            Issue.record("no incoming: \(incoming)")
            return
        }
        #expect(from == peer && connectionID == 42)
        let bindMessage = try STUNMessage(decoding: bind)
        #expect(
            bindMessage.method == .connectionBind && bindMessage.number(STUNMessage.AttributeType.connectionID) == 42)
        #expect(STUNMessage.verifiesIntegrity(bind, key: relay.key))
        // The bind's answer is checked: ours and signed, or an error with its reason.
        let yes = relay.answer(bindMessage, .success, [])
        #expect((try? relay.client.bindAnswer(yes, transactionID: bindMessage.transactionID).get()) != nil)
        let no = relay.answer(
            bindMessage, .error,
            [
                STUNMessage.Attribute(
                    type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4, 47] + Array("late".utf8))
            ])
        if case .failure(let error) = relay.client.bindAnswer(no, transactionID: bindMessage.transactionID) {
            #expect(error.code == .refused(status: 447) && error.reason.contains("late"))
        } else {
            Issue.record("a refused bind was taken")
        }
        // Outgoing: a Connect to the peer, answered with the connection to bind.
        let connect = try #require(Relay.sent(relay.client.connect(to: peer, token: 9, now: relay.now)).first)
        #expect(connect.method == .connect && connect.address(STUNMessage.AttributeType.xorPeerAddress) == peer)
        let connected = relay.client.received(
            relay.answer(connect, .success, [STUNMessage.numberAttribute(STUNMessage.AttributeType.connectionID, 7)]),
            now: relay.now)
        guard case .connected(9, _, 7) = connected.first else {
            Issue.record("no connected: \(connected)")
            return
        }
        // A Connect the relay refuses fails that connect only.
        let second = try #require(Relay.sent(relay.client.connect(to: peer, token: 10, now: relay.now)).first)
        let refused = relay.client.received(
            relay.answer(
                second, .error,
                [STUNMessage.Attribute(type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4, 3])]),
            now: relay.now)
        guard case .connectFailed(10, let error) = refused.first else {
            Issue.record("no connect failure: \(refused)")
            return
        }
        #expect(error.code == .refused(status: 403))
        #expect(!relay.client.isFailed)
    }

    @Test func malformedInputFromTheRelayEndsTheAllocationWithTheReason() {
        var relay = Relay()
        _ = relay.allocate()
        let actions = relay.client.received(
            [0, 1, 0, 4, 0x21, 0x12, 0xA4, 0x42] + [UInt8](repeating: 0, count: 12), now: relay.now)
        guard case .failed(let error) = actions.last else {
            Issue.record("malformed input was accepted")
            return
        }
        #expect(error.code == .badResponse)
    }
}

func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
