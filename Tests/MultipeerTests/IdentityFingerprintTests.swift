import Testing

@testable import Multipeer

@Suite("PeerFingerprint and VerificationCode")
struct IdentityFingerprintTests {
    @Test func readableFormRoundTripsAndMatchesAnIndependentEncoding() throws {
        let fingerprint = try #require(PeerFingerprint(bytes: bytes(fromHex: RFC8032TestVector.fingerprintHex)))
        #expect(fingerprint.description == RFC8032TestVector.fingerprintText)
        #expect(fingerprint.description.count == 64)
        #expect(PeerFingerprint(RFC8032TestVector.fingerprintText) == fingerprint)
    }

    @Test func readableFormRoundTripsForEdgeBytes() throws {
        for fill: UInt8 in [0x00, 0xff, 0x5a] {
            let fingerprint = try #require(PeerFingerprint(bytes: [UInt8](repeating: fill, count: 32)))
            #expect(PeerFingerprint(fingerprint.description) == fingerprint)
        }
    }

    @Test func bytesMustBe32() {
        #expect(PeerFingerprint(bytes: []) == nil)
        #expect(PeerFingerprint(bytes: [UInt8](repeating: 1, count: 31)) == nil)
        #expect(PeerFingerprint(bytes: [UInt8](repeating: 1, count: 33)) == nil)
    }

    @Test(arguments: [
        "",
        RFC8032TestVector.fingerprintText.uppercased(),  // not the canonical lowercase form
        String(RFC8032TestVector.fingerprintText.dropLast()),  // too short
        RFC8032TestVector.fingerprintText + "a",  // too long
        "eh7daadx5b-ksrg-cytl-7bka-i36s-e4nx-x3kl-nk7e-lksy-q57p-i74x-eg4q",  // separator replaced
        "eh7d-dx5b-ksrg-cytl-7bka-i36s-e4nx-x3kl-nk7e-lksy-q57p-i74x-eg4r",  // padding bits set
        "eh7d-dx5b-ksrg-cytl-7bka-i36s-e4nx-x3kl-nk7e-lksy-q57p-i74x-eg41",  // '1' is not base32
        "eh7d-dx5b-ksrg-cytl-7bka-i36s-e4nx-x3kl-nk7e-lksy-q57p-i74x-eg4é",  // not ASCII
    ])
    func rejectsAnythingButTheCanonicalForm(_ text: String) {
        #expect(PeerFingerprint(text) == nil)
    }

    /// The expected values were computed independently with Python's hmac and hashlib from the documented
    /// construction (docs/PROTOCOL.md section 3.4).
    @Test func verificationCodeMatchesItsDefinition() throws {
        let exporter = (1...32).map { UInt8($0) }
        let dialerNonce = [UInt8](repeating: 0xAA, count: 32)
        let acceptorNonce = [UInt8](repeating: 0xBB, count: 32)
        let code = VerificationCode(exporterValue: exporter, dialerNonce: dialerNonce, acceptorNonce: acceptorNonce)
        #expect(code.digits == "406042")
        #expect(
            VerificationCode.commitment(to: dialerNonce)
                == bytes(fromHex: "ae33bed9d8e600e6a5af6680e15d2fdf4efb73cb485fab7b19e4ac62a47dcbae"))
    }

    @Test func verificationCodesHaveSixDigitsAndDependOnEveryInput() throws {
        var random = SystemRandomNumberGenerator()
        func bytes() -> [UInt8] { (0..<32).map { _ in random.next() } }
        let (exporter, dialer, acceptor) = (bytes(), bytes(), bytes())
        let code = VerificationCode(exporterValue: exporter, dialerNonce: dialer, acceptorNonce: acceptor)
        #expect(code.digits.count == 6 && code.digits.allSatisfy { $0.isASCII && $0.isNumber })
        var codes: Set<String> = [code.digits]
        for _ in 0..<200 {
            codes.insert(VerificationCode(exporterValue: bytes(), dialerNonce: dialer, acceptorNonce: acceptor).digits)
            codes.insert(
                VerificationCode(exporterValue: exporter, dialerNonce: bytes(), acceptorNonce: acceptor).digits)
            codes.insert(VerificationCode(exporterValue: exporter, dialerNonce: dialer, acceptorNonce: bytes()).digits)
        }
        // 601 codes among a million: a collision has probability about 0.17, so allow a couple.
        #expect(codes.count >= 599)
    }
}
