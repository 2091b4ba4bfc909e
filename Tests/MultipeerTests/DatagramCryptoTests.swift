import Testing

@testable import Multipeer

/// 104 bytes of stand-in keying material: 0x00, 0x01, … 0x67, so each field's bytes are recognisable.
private let countingExport = (0..<104).map { UInt8($0) }

/// The fixed key, IV and receive id of the golden vectors.
private let goldenKey = (0x00..<0x20).map { UInt8($0) }
private let goldenIV = (0xA0..<0xAC).map { UInt8($0) }
private let goldenReceiverID: UInt64 = 0x1122_3344_5566_7788

private func goldenSealer(key: [UInt8] = goldenKey, iv: [UInt8] = goldenIV, counter: UInt64 = 0) throws
    -> DatagramSealer
{
    try DatagramSealer(key: key, iv: iv, receiverID: goldenReceiverID, firstCounter: counter)
}

private func goldenOpener(key: [UInt8] = goldenKey, iv: [UInt8] = goldenIV) throws -> DatagramOpener {
    try DatagramOpener(key: key, iv: iv, receiverID: goldenReceiverID)
}

/// A payload of `count` bytes that differs from its neighbours in every position.
private func payload(_ count: Int, seed: UInt8 = 0) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(seed)) }
}

@Suite struct DatagramCryptoTests {
    // MARK: - Keys

    @Test func exporterParameters() {
        #expect(DatagramKeys.exportedLength == 104)
        #expect(DatagramKeys.exporterLabel == "EXPORTER-swift-multipeer datagram")
        #expect(DatagramFormat.overhead == 36)
        #expect(DatagramFormat.maximumPayloadLength == 65_471)
    }

    @Test func keySplitFollowsTheDocumentedOrder() {
        let dialer = DatagramKeys(exported: countingExport, isDialer: true)
        let acceptor = DatagramKeys(exported: countingExport, isDialer: false)
        let dialerToAcceptorKey = Array(countingExport[0..<32])
        let dialerToAcceptorIV = Array(countingExport[32..<44])
        let acceptorToDialerKey = Array(countingExport[44..<76])
        let acceptorToDialerIV = Array(countingExport[76..<88])
        let dialerID: UInt64 = 0x5859_5A5B_5C5D_5E5F  // bytes 88…95
        let acceptorID: UInt64 = 0x6061_6263_6465_6667  // bytes 96…103

        #expect(dialer.sending.key == dialerToAcceptorKey)
        #expect(dialer.sending.iv == dialerToAcceptorIV)
        #expect(dialer.sending.receiverID == acceptorID)
        #expect(dialer.receiving.key == acceptorToDialerKey)
        #expect(dialer.receiving.iv == acceptorToDialerIV)
        #expect(dialer.receiving.receiverID == dialerID)

        #expect(acceptor.sending.key == acceptorToDialerKey)
        #expect(acceptor.sending.iv == acceptorToDialerIV)
        #expect(acceptor.sending.receiverID == dialerID)
        #expect(acceptor.receiving.key == dialerToAcceptorKey)
        #expect(acceptor.receiving.iv == dialerToAcceptorIV)
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
        #expect(keys.description == "DatagramKeys(sending to 6061626364656667, receiving as 58595a5b5c5d5e5f)")
    }

    // MARK: - Round trips and bounds

    @Test(arguments: [0, 1, 1_196, 65_471])
    func roundTrip(size: Int) throws {
        let sealer = try goldenSealer()
        let opener = try goldenOpener()
        let message = payload(size)
        let packet = try sealer.seal(message)
        #expect(packet.count == size + 36)
        #expect(Array(packet[0..<4]) == [0xD1, 0, 0, 0])
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
        #expect(opener.open(headerBytes(counter: (1 << 48) - 1) + tag) == .failure(.authenticationFailed))
    }

    @Test func sealingStopsAtTwoToThe48Packets() throws {
        let sealer = try goldenSealer(counter: (1 << 48) - 1)
        let last = try sealer.seal([7])
        #expect(DatagramHeader(parsing: last)?.counter == (1 << 48) - 1)
        #expect(try goldenOpener().open(last) == .success([7]))
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
                default: expected = .authenticationFailed  // low counter bits, ciphertext, tag
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

    @Test func wrongKeyOrIVFailsAuthentication() throws {
        let packet = try goldenSealer().seal(payload(100))
        var otherKey = goldenKey
        otherKey[31] ^= 1
        var otherIV = goldenIV
        otherIV[11] ^= 1
        #expect(try goldenOpener(key: otherKey).open(packet) == .failure(.authenticationFailed))
        #expect(try goldenOpener(iv: otherIV).open(packet) == .failure(.authenticationFailed))
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
        #expect(opener.open(forged) == .failure(.authenticationFailed))
        var genuineButTampered = try goldenSealer(counter: 1 << 40).seal([5])
        genuineButTampered[20] ^= 1
        #expect(opener.open(genuineButTampered) == .failure(.authenticationFailed))
        #expect(opener.window.highest == 0)
        #expect(opener.open(try sealer.seal([1])) == .success([1]))
    }

    // MARK: - Golden vectors

    @Test func goldenPacket() throws {
        // Computed independently with Python's `cryptography` (AESGCM over OpenSSL) from the documented layout:
        // key 00…1f, IV a0…ab, receive id 1122334455667788, counter 0x010203040506, so the nonce is
        // a0a1a2a3 a4a5a7a5abadafad (the IV XOR 00000000 0000010203040506).
        let expected = hex(
            """
            D1 000000 1122334455667788 0000010203040506   # header: format, reserved, receiver id, counter
            7c38710e66ecd345f1c95cadb4a70adc4468e47072a6b7ec57914c   # ciphertext of "swift-multipeer datagram v1"
            60388fed53f62eaa47ce53023dd771a0                         # tag
            """)
        let packet = try goldenSealer(counter: 0x0102_0304_0506).seal(Array("swift-multipeer datagram v1".utf8))
        #expect(packet == expected)
        #expect(try goldenOpener().open(expected) == .success(Array("swift-multipeer datagram v1".utf8)))
    }

    @Test func goldenEmptyPacket() throws {
        // Same key and IV, counter 0 (so the nonce is the IV), empty payload: the packet is header and tag.
        let expected = hex("D1000000 1122334455667788 0000000000000000  d7d4302c65f4501eafbbe5b908a139f9")
        #expect(try goldenSealer().seal([]) == expected)
        #expect(try goldenOpener().open(expected) == .success([]))
    }

    @Test func nonceIsTheIVXorTheCounter() {
        let nonce = DatagramNonce(iv: goldenIV)
        let bytes = nonce.withNonce(counter: 0x0102_0304_0506) { Array($0) }
        #expect(bytes == hex("a0a1a2a3 a4a5a7a5abadafad"))
        #expect(nonce.withNonce(counter: 0) { Array($0) } == goldenIV)
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
