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

    /// A self-signed P-256 certificate made with `openssl req -x509 -newkey ec`.
    @Test func certificateWithAnotherKeyTypeIsRefused() throws {
        let p256 = bytes(
            fromHex: "3082017430820119a003020102021416bd536fae5c497450f6c68ecc2b0ebbe53131be300a06082a8648ce3d04030230"
                + "0f310d300b06035504030c0470323536301e170d3236313133303033313830335a170d3336313132373033313830335a"
                + "300f310d300b06035504030c04703235363059301306072a8648ce3d020106082a8648ce3d03010703420004a4024bb1"
                + "048cd506b9b160173ddfd5185d8ab4e6d54ffad914f787ba50378ea4fcc58c54013a08fcb97fb82ad1c9a46015c36216"
                + "dd994501db9d923149abb88ea3533051301d0603551d0e04160414cdd58f4fb0e3655986d4a3da59d08e6170f1a28130"
                + "1f0603551d23041830168014cdd58f4fb0e3655986d4a3da59d08e6170f1a281300f0603551d130101ff040530030101"
                + "ff300a06082a8648ce3d0403020349003046022100d12d1800b23bdccf735978a0b14273451ec94c42831e5ccc98c21b"
                + "5d443a67420221009435dd5fd4852a5cb41f64e2801d24daa6eff185bb885866b0f111fc316f05f4")
        let error = #expect(throws: IdentityError.self) { try PeerIdentity.fingerprint(ofCertificateDER: p256) }
        #expect(error?.code == .notEd25519)
    }

    /// `PeerIdentity` is `Sendable`: one identity signs from many tasks at once.
    @Test func signsConcurrentlyFromManyTasks() async throws {
        let identity = try PeerIdentity.generate(displayName: "shared")
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for index in 0..<16 {
                group.addTask {
                    let data = [UInt8](repeating: UInt8(index), count: 100)
                    var allValid = true
                    for _ in 0..<50 {
                        let signature = try identity.sign(data)
                        allValid =
                            allValid
                            && PeerIdentity.verify(signature: signature, data: data, publicKey: identity.publicKey)
                    }
                    return allValid
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 16)
        #expect(results.allSatisfy { $0 })
    }
}
