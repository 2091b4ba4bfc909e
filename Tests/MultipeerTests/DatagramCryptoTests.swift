import Testing

@testable import Multipeer

/// 80 bytes of stand-in keying material: 0x00, 0x01, … 0x4f, so each field's bytes are recognisable.
private let countingExport = (0..<80).map { UInt8($0) }

/// The fixed base secret and receive id of the golden vectors.
private let goldenSecret = (0x00..<0x20).map { UInt8($0) }
private let goldenReceiverID: UInt64 = 0x1122_3344_5566_7788

/// The first counter of key generation `generation`.
private func firstCounter(ofGeneration generation: UInt64) -> UInt64 {
    generation << DatagramFormat.generationShift
}

private func goldenSealer(secret: [UInt8] = goldenSecret, counter: UInt64 = 0) throws -> DatagramSealer {
    try DatagramSealer(secret: secret, receiverID: goldenReceiverID, firstCounter: counter)
}

private func goldenOpener(secret: [UInt8] = goldenSecret) throws -> DatagramOpener {
    try DatagramOpener(secret: secret, receiverID: goldenReceiverID)
}

/// Opens `packet` with the keys of its counter's generation directly, bypassing the opener's replay window and
/// generation rules (for packets an opener that has seen nothing would not open).
private func openWithGenerationKeys(_ packet: [UInt8], secret: [UInt8] = goldenSecret) throws -> [UInt8]? {
    let header = try #require(DatagramHeader(parsing: packet))
    let keys = try DatagramGenerationKeys(
        secret: secret, generation: DatagramGenerationKeys.generation(of: header.counter), direction: .open)
    var output = [UInt8](repeating: 0, count: packet.count - DatagramFormat.overhead)
    let opened = packet.withUnsafeBytes { bytes in
        output.withUnsafeMutableBytes { output in
            keys.nonce.withNonce(counter: header.counter) { nonce in
                keys.cipher.open(
                    nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: bytes[..<20]),
                    ciphertext: UnsafeRawBufferPointer(rebasing: bytes[20..<(bytes.count - 16)]),
                    tag: UnsafeRawBufferPointer(rebasing: bytes[(bytes.count - 16)...]), into: output)
            }
        }
    }
    return opened ? output : nil
}

/// A payload of `count` bytes that differs from its neighbours in every position.
private func payload(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) }
}

@Suite struct DatagramCryptoTests {
    // MARK: - Keys

    @Test func exporterParameters() {
        #expect(DatagramKeys.exportedLength == 80)
        #expect(DatagramKeys.exporterLabel == "EXPORTER-swift-multipeer datagram")
        #expect(DatagramFormat.version == 0xD2)
        #expect(DatagramFormat.overhead == 36)
        #expect(DatagramFormat.maximumPayloadLength == 65_471)
        #expect(DatagramFormat.generationShift == 20)
        #expect(DatagramGenerationKeys.keyLabel == "swift-multipeer datagram key")
        #expect(DatagramGenerationKeys.ivLabel == "swift-multipeer datagram iv")
    }

    @Test func keySplitFollowsTheDocumentedOrder() {
        let dialer = DatagramKeys(exported: countingExport, isDialer: true)
        let acceptor = DatagramKeys(exported: countingExport, isDialer: false)
        let dialerToAcceptor = Array(countingExport[0..<32])
        let acceptorToDialer = Array(countingExport[32..<64])
        let dialerID: UInt64 = 0x4041_4243_4445_4647  // bytes 64…71
        let acceptorID: UInt64 = 0x4849_4A4B_4C4D_4E4F  // bytes 72…79

        #expect(dialer.sending.secret == dialerToAcceptor)
        #expect(dialer.sending.receiverID == acceptorID)
        #expect(dialer.receiving.secret == acceptorToDialer)
        #expect(dialer.receiving.receiverID == dialerID)

        #expect(acceptor.sending.secret == acceptorToDialer)
        #expect(acceptor.sending.receiverID == dialerID)
        #expect(acceptor.receiving.secret == dialerToAcceptor)
        #expect(acceptor.receiving.receiverID == acceptorID)
    }

    @Test func bothSidesAgreeInBothDirections() throws {
        var random = SplitMix64(seed: 42)
        let exported = (0..<DatagramKeys.exportedLength).map { _ in UInt8.random(in: 0...255, using: &random) }
        let dialer = DatagramKeys(exported: exported, isDialer: true)
        let acceptor = DatagramKeys(exported: exported, isDialer: false)

        let toAcceptor = try dialer.makeSealer().seal(Array("hello acceptor".utf8))
        #expect(DatagramHeader(parsing: toAcceptor)?.receiverID == acceptor.receiving.receiverID)
        #expect(try acceptor.makeOpener().open(toAcceptor) == .success(Array("hello acceptor".utf8)))

        let toDialer = try acceptor.makeSealer().seal(Array("hello dialer".utf8))
        #expect(DatagramHeader(parsing: toDialer)?.receiverID == dialer.receiving.receiverID)
        #expect(try dialer.makeOpener().open(toDialer) == .success(Array("hello dialer".utf8)))

        // A side cannot open its own packets: they carry the other side's id and key.
        #expect(try dialer.makeOpener().open(toAcceptor) == .failure(.unknownReceiver))
    }

    @Test func descriptionHidesTheKeys() {
        let keys = DatagramKeys(exported: countingExport, isDialer: true)
        #expect(keys.description == "DatagramKeys(sending to 48494a4b4c4d4e4f, receiving as 4041424344454647)")
    }

    // MARK: - Round trips and bounds

    @Test(arguments: [0, 1, 1_196, 65_471])
    func roundTrip(size: Int) throws {
        let sealer = try goldenSealer()
        let opener = try goldenOpener()
        let message = payload(size)
        let packet = try sealer.seal(message)
        #expect(packet.count == size + 36)
        #expect(Array(packet[0..<4]) == [0xD2, 0, 0, 0])
        #expect(DatagramHeader(parsing: packet) == DatagramHeader(receiverID: goldenReceiverID, counter: 0))
        if size > 0 { #expect(Array(packet[20..<20 + size]) != message) }
        #expect(opener.open(packet) == .success(message))
        #expect(sealer.nextCounter == 1)
    }

    @Test func countersIncreaseByOne() throws {
        let sealer = try goldenSealer()
        for expected: UInt64 in 0..<5 {
            let packet = try sealer.seal([1, 2, 3])
            #expect(DatagramHeader(parsing: packet)?.counter == expected)
        }
    }

    @Test func oversizedPayloadIsRefused() throws {
        let sealer = try goldenSealer()
        #expect(throws: DatagramError.payloadTooLarge(size: 65_472, limit: 65_471)) {
            try sealer.seal(payload(65_472))
        }
        #expect(sealer.nextCounter == 0)
    }

    @Test func packetsOutsideTheSizeBoundsAreMalformed() throws {
        let opener = try goldenOpener()
        let header = headerBytes(counter: 0)
        #expect(opener.open([]) == .failure(.malformed))
        #expect(opener.open(header) == .failure(.malformed))
        #expect(opener.open(header + [UInt8](repeating: 0, count: 15)) == .failure(.malformed))  // 35 bytes
        #expect(opener.open(header + [UInt8](repeating: 0, count: 16)) == .failure(.authenticationFailed))  // 36
        #expect(opener.open(header + [UInt8](repeating: 0, count: 65_488)) == .failure(.malformed))  // 65,508
        #expect(opener.authenticationFailures == 1)
    }

    @Test func countersFromTwoToThe48AreMalformed() throws {
        let opener = try goldenOpener()
        let tag = [UInt8](repeating: 0, count: 16)
        #expect(opener.open(headerBytes(counter: 1 << 48) + tag) == .failure(.malformed))
        #expect(opener.open(headerBytes(counter: .max) + tag) == .failure(.malformed))
        // The last valid counter is well-formed, but far beyond the keys a fresh opener derives.
        #expect(opener.open(headerBytes(counter: (1 << 48) - 1) + tag) == .failure(.tooFarAhead))
    }

    @Test func sealingStopsAtTwoToThe48Packets() throws {
        let sealer = try goldenSealer(counter: (1 << 48) - 1)
        let last = try sealer.seal([7])
        // Unwrapped first: for `#expect(optionalUInt64 == literal)` Swift 6.3.1 generates a thunk converting the
        // `UInt64?` to AnyHashable that copies 9 bytes out of an 8-byte stack slot (the address sanitizer's
        // stack-buffer-overflow, in the toolchain's code, not ours).
        let header = try #require(DatagramHeader(parsing: last))
        #expect(header.counter == (1 << 48) - 1)
        #expect(sealer.generation == (1 << 28) - 1)
        #expect(try openWithGenerationKeys(last) == [7])
        #expect(throws: DatagramError.counterExhausted) { try sealer.seal([8]) }
        #expect(throws: DatagramError.counterExhausted) { try sealer.seal([]) }
    }

    // MARK: - Tampering and wrong keys

    @Test func everySingleByteChangeIsCaught() throws {
        let original = try goldenSealer(counter: 0x0102).seal(payload(24))
        let opener = try goldenOpener()
        var authenticationFailures: UInt64 = 0
        for index in original.indices {
            for flip: UInt8 in [0x01, 0x80] {
                var tampered = original
                tampered[index] ^= flip
                let expected: DatagramRejection
                switch index {
                case 0..<4: expected = .malformed  // format and reserved bytes
                case 4..<12: expected = .unknownReceiver  // receiver id
                case 12..<14: expected = .malformed  // the counter's top 16 bits: 2^48 or more
                case 14..<20:
                    // The rest of the counter: a generation beyond the next one is dropped unread, the next one
                    // (and the current) fail authentication.
                    let counter = try #require(DatagramHeader(parsing: tampered)?.counter)
                    expected =
                        DatagramGenerationKeys.generation(of: counter) > 1 ? .tooFarAhead : .authenticationFailed
                default: expected = .authenticationFailed  // ciphertext, tag
                }
                if expected == .authenticationFailed { authenticationFailures += 1 }
                #expect(opener.open(tampered) == .failure(expected), "byte \(index) ^ \(flip)")
            }
        }
        #expect(opener.authenticationFailures == authenticationFailures)
        // None of the failures moved the window: the genuine packet still opens, once.
        #expect(opener.window.highest == nil)
        #expect(opener.open(original) == .success(payload(24)))
        #expect(opener.open(original) == .failure(.replayed))
    }

    @Test func wrongSecretOrGenerationFailsAuthentication() throws {
        let packet = try goldenSealer().seal(payload(100))
        var otherSecret = goldenSecret
        otherSecret[31] ^= 1
        #expect(try goldenOpener(secret: otherSecret).open(packet) == .failure(.authenticationFailed))
        // A packet sealed with generation 1's keys but carrying a generation 0 counter: the keys are bound to the
        // generation the counter names.
        let keys = try DatagramGenerationKeys(secret: goldenSecret, generation: 1, direction: .seal)
        var forged = headerBytes(counter: 5) + [UInt8](repeating: 0, count: 116)
        let sealed = forged.withUnsafeMutableBytes { bytes in
            payload(100).withUnsafeBytes { plaintext in
                keys.nonce.withNonce(counter: 5) { nonce in
                    keys.cipher.seal(
                        nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: bytes[..<20]), plaintext: plaintext,
                        into: UnsafeMutableRawBufferPointer(rebasing: bytes[20...]))
                }
            }
        }
        #expect(sealed)
        #expect(try goldenOpener().open(forged) == .failure(.authenticationFailed))
        #expect(try goldenOpener().open(packet) == .success(payload(100)))
    }

    @Test func failedAuthenticationLeavesTheContextUsable() throws {
        let sealer = try goldenSealer()
        let opener = try goldenOpener()
        var forged = try sealer.seal(payload(50))
        forged[forged.count - 1] ^= 0xFF
        #expect(opener.open(forged) == .failure(.authenticationFailed))
        let genuine = try sealer.seal(payload(60))
        #expect(opener.open(genuine) == .success(payload(60)))
    }

    // MARK: - Replay

    @Test func replayIsRefused() throws {
        let packet = try goldenSealer().seal([1, 2, 3])
        let opener = try goldenOpener()
        #expect(opener.open(packet) == .success([1, 2, 3]))
        #expect(opener.open(packet) == .failure(.replayed))
        #expect(opener.open(packet) == .failure(.replayed))
    }

    @Test func reorderingWithinTheWindowIsAccepted() throws {
        let sealer = try goldenSealer()
        let packets = try (0..<20).map { try sealer.seal(payload($0, seed: UInt8($0))) }
        let opener = try goldenOpener()
        for index in [19, 0, 7, 3, 18, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] {
            #expect(opener.open(packets[index]) == .success(payload(index, seed: UInt8(index))), "packet \(index)")
        }
        for packet in packets { #expect(opener.open(packet) == .failure(.replayed)) }
    }

    @Test func packetsTooFarBehindAreRefused() throws {
        let sealer = try goldenSealer()
        let packets = try (0..<1_100).map { _ in try sealer.seal([9]) }
        let opener = try goldenOpener()
        #expect(opener.open(packets[1_099]) == .success([9]))
        // 1,099 − 1,024 = 75: counters 0…75 are too old, 76 is the oldest the window still covers.
        #expect(opener.open(packets[0]) == .failure(.tooOld))
        #expect(opener.open(packets[75]) == .failure(.tooOld))
        #expect(opener.open(packets[76]) == .success([9]))
        #expect(opener.open(packets[76]) == .failure(.replayed))
    }

    @Test func forgedPacketWithAHugeCounterDoesNotMoveTheWindow() throws {
        let opener = try goldenOpener()
        let sealer = try goldenSealer()
        #expect(opener.open(try sealer.seal([0])) == .success([0]))
        // A packet far ahead with a bad tag: if it moved the window, counter 1 would be too old.
        var forged = headerBytes(counter: (1 << 48) - 1) + payload(40)
        forged[forged.count - 1] ^= 1
        #expect(opener.open(forged) == .failure(.tooFarAhead))
        var genuineButTampered = try goldenSealer(counter: firstCounter(ofGeneration: 1) + 7).seal([5])
        genuineButTampered[20] ^= 1
        #expect(opener.open(genuineButTampered) == .failure(.authenticationFailed))
        #expect(opener.window.highest == 0)
        #expect(opener.open(try sealer.seal([1])) == .success([1]))
    }

    // MARK: - Key generations

    @Test func theSealerMovesToTheNextGenerationsKeysAtItsFirstCounter() throws {
        let boundary = firstCounter(ofGeneration: 1)
        let sealer = try goldenSealer(counter: boundary - 2)
        let opener = try goldenOpener()
        for counter in (boundary - 2)...(boundary + 1) {
            let packet = try sealer.seal(payload(10, seed: UInt8(counter & 0xFF)))
            #expect(sealer.generation == DatagramGenerationKeys.generation(of: counter))
            #expect(opener.open(packet) == .success(payload(10, seed: UInt8(counter & 0xFF))), "counter \(counter)")
        }
        #expect(opener.heldGenerations == [0, 1])
    }

    @Test func theOpenerKeepsThePreviousGenerationOnlyWhileTheWindowReachesIt() throws {
        let boundary = firstCounter(ofGeneration: 1)
        let sealer = try goldenSealer(counter: boundary - 4)
        let packets = try (0..<(4 + ReplayWindow.size)).map { _ in try sealer.seal([1]) }
        let opener = try goldenOpener()
        #expect(opener.heldGenerations == [0])
        #expect(opener.open(packets[0]) == .success([1]))  // boundary - 4
        #expect(opener.open(packets[4]) == .success([1]))  // boundary: generation 1 is now the current one
        #expect(opener.heldGenerations == [0, 1])
        #expect(opener.open(packets[2]) == .success([1]))  // a straggler of generation 0, within the window
        // boundary + 1,023: the oldest counter the window covers is the boundary, so generation 0 is dropped.
        #expect(opener.open(packets[4 + ReplayWindow.size - 1]) == .success([1]))
        #expect(opener.heldGenerations == [1])
        #expect(opener.open(packets[3]) == .failure(.tooOld))
        #expect(opener.open(packets[5]) == .success([1]))
    }

    @Test func aForgedFarFutureCounterMakesTheOpenerDeriveNoKeys() throws {
        let opener = try goldenOpener()
        var random = SplitMix64(seed: 0x666f_7267)
        for generation: UInt64 in [2, 3, 100, 1 << 27, (1 << 28) - 1] {
            let forged = headerBytes(counter: firstCounter(ofGeneration: generation) + 1) + random.bytes(48)
            #expect(opener.open(forged) == .failure(.tooFarAhead), "generation \(generation)")
        }
        #expect(opener.heldGenerations == [0])
        // The next generation's keys are derived once for a packet that claims it, and kept: however many forged
        // packets claim it, nothing more is derived.
        for _ in 0..<100 {
            let forged = headerBytes(counter: firstCounter(ofGeneration: 1) + 5) + random.bytes(48)
            #expect(opener.open(forged) == .failure(.authenticationFailed))
        }
        #expect(opener.heldGenerations == [0, 1])
        #expect(opener.window.highest == nil)
        let statistics = opener.counters.snapshot
        #expect(statistics.received == 105)
        #expect(statistics.droppedTooFarAhead == 5)
        #expect(statistics.droppedAuthentication == 100)
        #expect(statistics.delivered == 0)
    }

    @Test func theOpenerCountsEveryOutcomeForItsReceiveID() throws {
        let sealer = try goldenSealer()
        let opener = try goldenOpener()
        let packets = try (0..<1_100).map { _ in try sealer.seal([3]) }
        #expect(opener.open(packets[1_099]) == .success([3]))
        #expect(opener.open(packets[1_099]) == .failure(.replayed))
        #expect(opener.open(packets[0]) == .failure(.tooOld))
        var tampered = packets[1_000]
        tampered[25] ^= 1
        #expect(opener.open(tampered) == .failure(.authenticationFailed))
        #expect(
            opener.open(headerBytes(counter: firstCounter(ofGeneration: 9)) + payload(16)) == .failure(.tooFarAhead))
        // Not for this connection, and not a packet at all: nothing to count against it.
        var stranger = packets[5]
        stranger[11] ^= 1
        #expect(opener.open(stranger) == .failure(.unknownReceiver))
        #expect(opener.open([1, 2, 3]) == .failure(.malformed))
        var expected = DatagramStatistics()
        expected.received = 5
        expected.delivered = 1
        expected.droppedReplay = 1
        expected.droppedTooOld = 1
        expected.droppedAuthentication = 1
        expected.droppedTooFarAhead = 1
        #expect(opener.counters.snapshot == expected)
    }

    // MARK: - Golden vectors

    // Computed independently with Python's `cryptography` package (HKDFExpand with SHA-256, then AESGCM), from
    // the layout in DatagramFormat.swift and PROTOCOL.md 3.7:
    //
    //     from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
    //     from cryptography.hazmat.primitives import hashes
    //     from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    //     secret = bytes(range(32))
    //     def expand(label, g, n):
    //         return HKDFExpand(hashes.SHA256(), n, label.encode() + g.to_bytes(8, "big")).derive(secret)
    //     def packet(counter, payload):
    //         g = counter >> 20
    //         key = expand("swift-multipeer datagram key", g, 32)
    //         iv = expand("swift-multipeer datagram iv", g, 12)
    //         header = bytes([0xD2, 0, 0, 0]) + bytes.fromhex("1122334455667788") + counter.to_bytes(8, "big")
    //         nonce = bytes(a ^ b for a, b in zip(iv, bytes(4) + counter.to_bytes(8, "big")))
    //         return header + AESGCM(key).encrypt(nonce, payload, header)
    //
    // (run with /usr/bin/python3, Debian's python3-cryptography 38).

    @Test func goldenGenerationKeys() throws {
        let cases: [(UInt64, String, String)] = [
            (
                0, "f127e75f7b19c8171f2d5f25979242ef1d5173ca73a6c625faf29e81b2013db7",
                "562c7c172291e41d96014827"
            ),
            (
                1, "71b43c2dcbcc395c34d9488b6698146f1356e5050194aecf31411cef4f3efb9c",
                "ae1fe60de2e96cdbe615fbdd"
            ),
            (
                0x10_2030, "24d3e32df4197abe5f5dedb745df4f6df1279c28aeb3997d5cb05b87a12b3a78",
                "884cee2f6d347594b65fef8f"
            ),
        ]
        for (generation, key, iv) in cases {
            let derivedKey = try DatagramGenerationKeys.expand(
                secret: goldenSecret, label: DatagramGenerationKeys.keyLabel, generation: generation, length: 32)
            let derivedIV = try DatagramGenerationKeys.expand(
                secret: goldenSecret, label: DatagramGenerationKeys.ivLabel, generation: generation, length: 12)
            #expect(derivedKey == hex(key), "generation \(generation)")
            #expect(derivedIV == hex(iv), "generation \(generation)")
        }
    }

    @Test func goldenPacket() throws {
        // Counter 0x010203040506 is in generation 0x102030 (the counter >> 20); that generation's IV is
        // 884cee2f6d347594b65fef8f, so the nonce is 884cee2f 6d347496b55bea89.
        let expected = hex(
            """
            D2 000000 1122334455667788 0000010203040506   # header: format, reserved, receiver id, counter
            35455e07314efb8244244f4d2d828b5e39de0d875385386cfd87e0   # ciphertext of "swift-multipeer datagram v2"
            20bd47d931b7383b41fa1cc58f02cafe                         # tag
            """)
        let packet = try goldenSealer(counter: 0x0102_0304_0506).seal(Array("swift-multipeer datagram v2".utf8))
        #expect(packet == expected)
        // An opener that has seen nothing would not derive generation 0x102030's keys; they open it directly.
        #expect(try openWithGenerationKeys(expected) == Array("swift-multipeer datagram v2".utf8))
    }

    @Test func goldenEmptyPacket() throws {
        // Counter 0 (generation 0, so the nonce is its IV), empty payload: the packet is header and tag.
        let expected = hex("D2000000 1122334455667788 0000000000000000  7ab06853217f50c604a4694ca0e7c3ca")
        #expect(try goldenSealer().seal([]) == expected)
        #expect(try goldenOpener().open(expected) == .success([]))
    }

    @Test func goldenFirstPacketOfTheSecondGeneration() throws {
        // Counter 2^20: generation 1's key and IV (ae1fe60de2e96cdbe615fbdd), nonce ae1fe60d e2e96cdbe605fbdd.
        let expected = hex(
            """
            D2000000 1122334455667788 0000000000100000
            b43ab71dabcee56605caa104   # ciphertext of "generation 1"
            adbc10d43d60c3dcfcbed3d28fe43c07
            """)
        #expect(try goldenSealer(counter: 1 << 20).seal(Array("generation 1".utf8)) == expected)
        // The next generation is one a fresh opener accepts.
        #expect(try goldenOpener().open(expected) == .success(Array("generation 1".utf8)))
    }

    @Test func nonceIsTheIVXorTheCounter() {
        let iv = (0xA0..<0xAC).map { UInt8($0) }
        let nonce = DatagramNonce(iv: iv)
        let bytes = nonce.withNonce(counter: 0x0102_0304_0506) { Array($0) }
        #expect(bytes == hex("a0a1a2a3 a4a5a7a5abadafad"))
        #expect(nonce.withNonce(counter: 0) { Array($0) } == iv)
    }

    /// The AES-256 case of the GCM specification (McGrew and Viega, "The Galois/Counter Mode of Operation",
    /// test case 16), through the primitive the sealer and opener use; its AAD is 20 bytes, like a header.
    @Test func gcmSpecificationTestCase16() throws {
        let key = hex("feffe9928665731c6d6a8f9467308308 feffe9928665731c6d6a8f9467308308")
        let iv = hex("cafebabefacedbaddecaf888")
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
        let plaintext = hex(
            """
            d9313225f88406e5a55909c5aff5269a 86a7a9531534f7da2e4c303d8a318a72
            1c3c0c95956809532fcf0e2449a6b525 b16aedf5aa0de657ba637b39
            """)
        let ciphertext = hex(
            """
            522dc1f099567d07f47f37a32a84427d 643a8cdcbfe5c0c97598a2bd2555d1aa
            8cb08e48590dbb3da7b08b1056828838 c5f61e6393ba7a0abcc9f662
            """)
        let tag = hex("76fc6ece0f4e1768cddf8853bb2d551b")

        let sealing = try AES256GCM(key: key, direction: .seal)
        var output = [UInt8](repeating: 0, count: plaintext.count + 16)
        let sealed = iv.withUnsafeBytes { nonce in
            aad.withUnsafeBytes { aad in
                plaintext.withUnsafeBytes { plaintext in
                    output.withUnsafeMutableBytes {
                        sealing.seal(nonce: nonce, aad: aad, plaintext: plaintext, into: $0)
                    }
                }
            }
        }
        #expect(sealed)
        #expect(output == ciphertext + tag)

        let opening = try AES256GCM(key: key, direction: .open)
        func open(_ ciphertext: [UInt8], _ tag: [UInt8]) -> [UInt8]? {
            var output = [UInt8](repeating: 0, count: ciphertext.count)
            let opened = iv.withUnsafeBytes { nonce in
                aad.withUnsafeBytes { aad in
                    ciphertext.withUnsafeBytes { ciphertext in
                        tag.withUnsafeBytes { tag in
                            output.withUnsafeMutableBytes {
                                opening.open(nonce: nonce, aad: aad, ciphertext: ciphertext, tag: tag, into: $0)
                            }
                        }
                    }
                }
            }
            return opened ? output : nil
        }
        #expect(open(ciphertext, tag) == plaintext)
        var badTag = tag
        badTag[0] ^= 1
        #expect(open(ciphertext, badTag) == nil)
        var badCiphertext = ciphertext
        badCiphertext[59] ^= 1
        #expect(open(badCiphertext, tag) == nil)
    }

    // MARK: - Sizing

    @Test func defaultMaximumPayloads() {
        #expect(DatagramSizing.defaultPathMTU == 1_280)
        #expect(DatagramSizing.maximumPayload(family: .ipv4) == 1_216)
        #expect(DatagramSizing.maximumPayload(family: .ipv6) == 1_196)
        // A full-size IPv6 packet is exactly the path MTU: 40 + 8 + 36 + 1,196 = 1,280.
        #expect(40 + 8 + DatagramFormat.overhead + DatagramSizing.maximumPayload(family: .ipv6) == 1_280)
    }

    @Test func maximumPayloadForOtherMTUs() {
        #expect(DatagramSizing.maximumPayload(pathMTU: 1_500, family: .ipv4) == 1_436)
        #expect(DatagramSizing.maximumPayload(pathMTU: 1_500, family: .ipv6) == 1_416)
        // Loopback's 65,536 is capped by the largest packet (IPv4) or gives 65,452 (IPv6).
        #expect(DatagramSizing.maximumPayload(pathMTU: 65_536, family: .ipv4) == 65_471)
        #expect(DatagramSizing.maximumPayload(pathMTU: 65_536, family: .ipv6) == 65_452)
        #expect(DatagramSizing.maximumPayload(pathMTU: 60, family: .ipv4) == 0)
        #expect(DatagramSizing.maximumPayload(pathMTU: 0, family: .ipv6) == 0)
    }
}

/// A well-formed header for the golden receive id.
private func headerBytes(counter: UInt64) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: 20)
    bytes.withUnsafeMutableBytes { DatagramHeader(receiverID: goldenReceiverID, counter: counter).write(to: $0) }
    // DatagramHeader refuses to parse counters of 2^48 and more, but writes whatever it is given.
    return bytes
}

extension DatagramHeader {
    /// Parses the header of `packet`; see `init(parsing:)`.
    fileprivate init?(parsing packet: [UInt8]) {
        guard let header = packet.withUnsafeBytes({ DatagramHeader(parsing: $0) }) else { return nil }
        self = header
    }
}
