import TestIsolation
import Testing

@testable import Multipeer

/// The vectors quoted in docs/PROTOCOL.md section 3, computed independently (Python's hmac and hashlib for
/// the group proof and the plaintext binding).
@Suite("Connection setup golden vectors (PROTOCOL.md section 3)")
struct ConnectionGoldenVectorTests {
    static let nonce = Array(UInt8(0)..<16)

    @Test func offerFromARequiredDialer() throws {
        let bytes = Preamble(kind: .offer, preference: .required, outcome: .none, nonce: Self.nonce).bytes
        #expect(bytes == hexBytes("4D504350 01 01 02 00 000102030405060708090A0B0C0D0E0F"))
        #expect(try Preamble.decode(bytes[...], expected: .offer).preference == .required)
    }

    @Test func answersForEveryOutcome() throws {
        let cases: [(Preamble.Outcome, String)] = [
            (.tls, "01"), (.plaintext, "02"), (.encryptionMismatch, "80"), (.busy, "81"), (.unsupportedVersion, "82"),
        ]
        for (outcome, byte) in cases {
            let bytes = Preamble(kind: .answer, preference: .optional, outcome: outcome, nonce: Self.nonce).bytes
            #expect(bytes == hexBytes("4D504350 01 02 01 \(byte) 000102030405060708090A0B0C0D0E0F"))
            #expect(try Preamble.decode(bytes[...], expected: .answer).outcome == outcome)
        }
    }

    @Test func preambleDecodingNamesWhatIsWrong() {
        let good = Preamble(kind: .offer, preference: .none, outcome: .none, nonce: Self.nonce).bytes
        var notMagic = good
        notMagic[0] = 0x16  // a TLS ClientHello's first byte: a client that skipped the preamble
        #expect(throws: Preamble.DecodingError.notAPeer) { try Preamble.decode(notMagic[...], expected: .offer) }
        var version = good
        version[4] = 2
        #expect(throws: Preamble.DecodingError.unsupportedVersion(2)) {
            try Preamble.decode(version[...], expected: .offer)
        }
        var preference = good
        preference[6] = 3
        #expect(throws: Preamble.DecodingError.self) { try Preamble.decode(preference[...], expected: .offer) }
        var outcomeInOffer = good
        outcomeInOffer[7] = 1
        #expect(throws: Preamble.DecodingError.self) { try Preamble.decode(outcomeInOffer[...], expected: .offer) }
        #expect(throws: Preamble.DecodingError.self) { try Preamble.decode(good[...], expected: .answer) }
    }

    @Test func negotiationTable() {
        let table: [(EncryptionPreference, EncryptionPreference, Preamble.Outcome)] = [
            (.required, .required, .tls), (.required, .optional, .tls), (.required, .none, .encryptionMismatch),
            (.optional, .required, .tls), (.optional, .optional, .tls), (.optional, .none, .plaintext),
            (.none, .required, .encryptionMismatch), (.none, .optional, .plaintext), (.none, .none, .plaintext),
        ]
        for (dialer, acceptor, outcome) in table {
            #expect(Preamble.negotiate(dialer: dialer, acceptor: acceptor) == outcome, "\(dialer) vs \(acceptor)")
        }
    }

    @Test func groupProofsForBothRoles() throws {
        let secret = try GroupSecret([UInt8](repeating: 7, count: 32))
        let binding = Array(UInt8(0)..<32)
        #expect(
            secret.proof(binding: binding, isDialer: true)
                == hexBytes("ccfb7e142b779691348e5e41d7f043e0fafa44ed40e3769b95600761854e963a"))
        #expect(
            secret.proof(binding: binding, isDialer: false)
                == hexBytes("0e5602e31a943a132710f98a46c4f9862f993d415d1feb9c028844d1dc5dbd68"))
        #expect(secret.verify(secret.proof(binding: binding, isDialer: true), binding: binding, fromDialer: true))
        // A reflected proof (the acceptor's sent back as the dialer's) fails.
        #expect(!secret.verify(secret.proof(binding: binding, isDialer: false), binding: binding, fromDialer: true))
    }

    @Test func helloWithAGroupProof() throws {
        let hello = Frame.Hello(
            capabilities: [], displayName: "Ada", fingerprint: [0xDE, 0xAD, 0xBE, 0xEF], groupProof: [1, 2, 3, 4])
        let expected = hexBytes("01 01 00 00 00000000 00000015 01 00 00000000 03 416461 04 DEADBEEF 01 04 01020304")
        #expect(try FrameEncoder().encode(.hello(hello)) == expected)
        var decoder = FrameDecoder()
        decoder.append(expected)
        #expect(try decoder.next() == .hello(hello))
    }

    @Test func helloWithADatagramPortAndNoGroupProof() throws {
        let hello = Frame.Hello(
            capabilities: .unreliableDatagrams, displayName: "Ada", fingerprint: [0xDE, 0xAD, 0xBE, 0xEF],
            datagramPort: 0xC350)
        let expected = hexBytes("01 01 00 00 00000000 00000013 01 00 00000001 03 416461 04 DEADBEEF 02 02 C350")
        #expect(try FrameEncoder().encode(.hello(hello)) == expected)
        var decoder = FrameDecoder()
        decoder.append(expected)
        #expect(try decoder.next() == .hello(hello))
    }

    @Test func aGroupProofLongerThan64BytesIsRefused() throws {
        var bytes = hexBytes("01 01 00 00 00000000 00000052 01 00 00000000 03 416461 04 DEADBEEF 01 41")
        bytes += [UInt8](repeating: 0, count: 65)
        var decoder = FrameDecoder()
        decoder.append(bytes)
        #expect(throws: FrameDecodingError.fieldLength(type: .hello, field: "group proof", length: 65, limit: 64)) {
            try decoder.next()
        }
    }
}

/// Bytes from hex text with spaces between groups.
func hexBytes(_ text: String) -> [UInt8] {
    bytes(fromHex: text.filter { $0 != " " })
}
