import Multipeer
import Testing

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

    @Test func verificationCodeIsSymmetricAndSixDigits() throws {
        let a = try PeerIdentity.generate(displayName: "a").fingerprint
        let b = try PeerIdentity.generate(displayName: "b").fingerprint
        let code = VerificationCode.between(a, b)
        #expect(code == VerificationCode.between(b, a))
        #expect(code.count == 6)
        #expect(code.allSatisfy { $0.isASCII && $0.isNumber })
    }

    /// The expected code was computed independently with Python's hashlib from the documented construction.
    @Test func verificationCodeMatchesItsDefinition() throws {
        let zero = try #require(PeerFingerprint(bytes: [UInt8](repeating: 0, count: 32)))
        let vector = try #require(PeerFingerprint(RFC8032TestVector.fingerprintText))
        #expect(VerificationCode.between(zero, vector) == "067187")
        #expect(VerificationCode.between(vector, zero) == "067187")
    }

    @Test func differentPairsGiveDifferentCodes() throws {
        let fingerprints = (0..<40).map { index in
            PeerFingerprint(bytes: [UInt8](repeating: UInt8(index), count: 32))!
        }
        var codes: Set<String> = []
        var pairs = 0
        for i in fingerprints.indices {
            for j in fingerprints.indices where j > i {
                codes.insert(VerificationCode.between(fingerprints[i], fingerprints[j]))
                pairs += 1
            }
        }
        // 780 pairs among a million codes: a collision has probability about 0.26, so allow a couple.
        #expect(codes.count >= pairs - 2)
    }
}
