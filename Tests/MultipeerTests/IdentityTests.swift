import Multipeer
import Testing

@Suite("PeerIdentity: keys, signatures, certificates")
struct IdentityTests {
    @Test func generateMakesAnEphemeralIdentityWithAStableFingerprint() throws {
        let identity = try PeerIdentity.generate(displayName: "Alice")
        #expect(identity.displayName == "Alice")
        #expect(identity.isEphemeral)
        #expect(identity.publicKey.count == 32)
        #expect(identity.fingerprint.bytes.count == 32)
        #expect(identity.fingerprint == identity.fingerprint)
        #expect(PeerFingerprint(identity.fingerprint.description) == identity.fingerprint)
    }

    @Test func twoIdentitiesDiffer() throws {
        let a = try PeerIdentity.generate(displayName: "same name")
        let b = try PeerIdentity.generate(displayName: "same name")
        #expect(a.publicKey != b.publicKey)
        #expect(a.fingerprint != b.fingerprint)
    }

    @Test func signatureVerifies() throws {
        let identity = try PeerIdentity.generate(displayName: "signer")
        let data = Array("hello, peer".utf8)
        let signature = try identity.sign(data)
        #expect(signature.count == 64)
        #expect(PeerIdentity.verify(signature: signature, data: data, publicKey: identity.publicKey))
        #expect(PeerIdentity.verify(signature: try identity.sign([]), data: [], publicKey: identity.publicKey))
    }

    @Test func signatureFailsForTamperedDataSignatureOrAnotherKey() throws {
        let identity = try PeerIdentity.generate(displayName: "signer")
        let other = try PeerIdentity.generate(displayName: "other")
        let data = Array("hello, peer".utf8)
        let signature = try identity.sign(data)
        var tamperedData = data
        tamperedData[0] ^= 1
        var tamperedSignature = signature
        tamperedSignature[10] ^= 0x80
        #expect(!PeerIdentity.verify(signature: signature, data: tamperedData, publicKey: identity.publicKey))
        #expect(!PeerIdentity.verify(signature: tamperedSignature, data: data, publicKey: identity.publicKey))
        #expect(!PeerIdentity.verify(signature: signature, data: data, publicKey: other.publicKey))
    }

    @Test func verifyRejectsMalformedInputWithoutCrashing() throws {
        let identity = try PeerIdentity.generate(displayName: "signer")
        let signature = try identity.sign([1, 2, 3])
        #expect(!PeerIdentity.verify(signature: [], data: [1, 2, 3], publicKey: identity.publicKey))
        #expect(!PeerIdentity.verify(signature: signature + [0], data: [1, 2, 3], publicKey: identity.publicKey))
        #expect(!PeerIdentity.verify(signature: signature, data: [1, 2, 3], publicKey: []))
        #expect(
            !PeerIdentity.verify(
                signature: signature, data: [1, 2, 3], publicKey: Array(identity.publicKey.prefix(31))))
    }

    @Test func certificateParsesBackToTheSameFingerprint() throws {
        let identity = try PeerIdentity.generate(displayName: "Alice")
        let der = try identity.certificateDER()
        #expect(der.first == 0x30)  // a DER SEQUENCE
        #expect(try PeerIdentity.fingerprint(ofCertificateDER: der) == identity.fingerprint)
    }

    @Test func certificatesOfDifferentIdentitiesGiveDifferentFingerprints() throws {
        let a = try PeerIdentity.generate(displayName: "a")
        let b = try PeerIdentity.generate(displayName: "b")
        let fingerprintA = try PeerIdentity.fingerprint(ofCertificateDER: a.certificateDER())
        let fingerprintB = try PeerIdentity.fingerprint(ofCertificateDER: b.certificateDER())
        #expect(fingerprintA == a.fingerprint)
        #expect(fingerprintB == b.fingerprint)
        #expect(fingerprintA != fingerprintB)
    }

    @Test func certificatesHaveRandomSerials() throws {
        let identity = try PeerIdentity.generate(displayName: "a")
        #expect(try identity.certificateDER() != identity.certificateDER())
    }

    @Test func certificateParsingRefusesGarbageTruncationAndTrailingBytes() throws {
        let der = try PeerIdentity.generate(displayName: "a").certificateDER()
        for bad in [[], [0x30, 0x00], Array(der.dropLast()), der + [0], [UInt8](repeating: 0xff, count: 300)] {
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.fingerprint(ofCertificateDER: bad) }
            #expect(error?.code == .certificateFailed)
        }
    }

    @Test func certificateWithABrokenSelfSignatureIsRefused() throws {
        var der = try PeerIdentity.generate(displayName: "a").certificateDER()
        // The signature BIT STRING is the certificate's last 64 bytes; flip a bit inside it.
        der[der.count - 5] ^= 0x01
        let error = #expect(throws: IdentityError.self) { try PeerIdentity.fingerprint(ofCertificateDER: der) }
        #expect(error?.code == .certificateFailed)
        #expect(error?.reason.contains("not validly signed") == true)
    }
}
