import Foundation
import MulticastDNS
import MultipeerIO
import Testing

@testable import Multipeer

/// Wide-area DNS-SD's rules without a server: transaction signatures both ways and their bounds, the browse's
/// found/updated/lost and leases, the records an update writes, the key and address words users give.
@Suite("Wide-area DNS-SD: signatures, browse rules, records, settings")
struct WideAreaRulesTests {
    static let key = try! TSIGKey(name: try! DNSName("mp-key."), secret: [UInt8](repeating: 0x5a, count: 32))

    /// What a server does: signs its response to a signed request (RFC 8945 section 5.3).
    static func serverSign(
        _ response: DNSMessage, requestMAC: [UInt8], key: TSIGKey, time: UInt64, error: UInt16 = 0
    ) throws -> [UInt8] {
        var encoder = DNSMessageEncoder(limits: .unicast)
        encoder.usesNameCompression = false
        let body = try encoder.encode(response)
        var covered: [UInt8] = [UInt8(requestMAC.count >> 8), UInt8(requestMAC.count & 0xff)] + requestMAC + body
        covered += key.name.canonicalWire + [0, 255, 0, 0, 0, 0] + TransactionSignature.algorithmName.canonicalWire
        for shift in stride(from: 40, through: 0, by: -8) { covered.append(UInt8((time >> UInt64(shift)) & 0xff)) }
        covered += [1, 44, UInt8(error >> 8), UInt8(error & 0xff), 0, 0]
        let mac = HMACSHA256.mac(key: key.secret, message: covered)
        var data = TransactionSignature.algorithmName.wire
        for shift in stride(from: 40, through: 0, by: -8) { data.append(UInt8((time >> UInt64(shift)) & 0xff)) }
        data += [1, 44, 0, 32] + mac + [UInt8(response.id >> 8), UInt8(response.id & 0xff)]
        data += [UInt8(error >> 8), UInt8(error & 0xff), 0, 0]
        var signed = response
        signed.additionals.append(
            DNSResourceRecord(name: key.name, ttl: 0, recordClass: 255, data: .unknown(type: .tsig, bytes: data)))
        return try encoder.encode(signed)
    }

    static func request() throws -> (DNSMessage, [UInt8], [UInt8]) {
        let zone = try DNSName("lab.test.")
        var message = WideAreaRecords.update(zone: zone, [])
        message.id = 0x1234
        var encoder = DNSMessageEncoder(limits: .unicast)
        encoder.usesNameCompression = false
        let signed = TransactionSignature.sign(try encoder.encode(message), key: key, timeSigned: 1_800_000_000)
        return (message, signed.bytes, signed.mac)
    }

    // MARK: Transaction signatures

    @Test func aSignedRequestCarriesItsRecordAndAVerifiedResponseIsTaken() throws {
        let (message, bytes, mac) = try Self.request()
        let decoded = try DNSMessageDecoder(limits: .unicast).decode(bytes)
        #expect(decoded.additionals.count == 1 && decoded.additionals[0].type == .tsig)
        #expect(decoded.additionals[0].name == Self.key.name && decoded.additionals[0].recordClass == 255)
        let fields = try TransactionSignature.parse(
            { if case .unknown(_, let data) = decoded.additionals[0].data { data } else { [] } }())
        #expect(fields.mac == mac && fields.originalID == 0x1234 && fields.fudge == 300)
        var response = message
        response.flags |= 0x8000
        let answer = try Self.serverSign(response, requestMAC: mac, key: Self.key, time: 1_800_000_010)
        let verified = try TransactionSignature.verify(answer, requestMAC: mac, key: Self.key, now: 1_800_000_020)
        #expect(verified.error == 0 && verified.message.additionals.isEmpty && verified.message.isResponse)
    }

    @Test func aResponseThatIsUnsignedTamperedLateOrOfAnotherKeyIsRefused() throws {
        let (message, _, mac) = try Self.request()
        var response = message
        response.flags |= 0x8000
        let answer = try Self.serverSign(response, requestMAC: mac, key: Self.key, time: 1_800_000_000)
        func refused(_ bytes: [UInt8], now: UInt64 = 1_800_000_000, key: TSIGKey = Self.key) -> String? {
            do {
                _ = try TransactionSignature.verify(bytes, requestMAC: mac, key: key, now: now)
                return nil
            } catch {
                #expect(error.code == .badResponse)
                return error.reason
            }
        }
        var encoder = DNSMessageEncoder(limits: .unicast)
        encoder.usesNameCompression = false
        #expect(refused(try encoder.encode(response))?.contains("not signed") == true)
        var tampered = answer
        tampered[3] ^= 0x01  // the response code
        #expect(refused(tampered)?.contains("does not verify") == true)
        #expect(refused(answer, now: 1_800_000_301)?.contains("300 s") == true)
        let other = try TSIGKey(name: try DNSName("other."), secret: [UInt8](repeating: 1, count: 32))
        #expect(refused(answer, key: other)?.contains("not ours") == true)
        // Another request's MAC: the chain is broken.
        #expect(
            (try? TransactionSignature.verify(
                answer, requestMAC: [UInt8](repeating: 0, count: 32), key: Self.key, now: 1_800_000_000)) == nil)
    }

    @Test func aServerThatCouldNotCheckOurSignatureSaysWhyUnsigned() throws {
        // BADKEY: the server answers NOTAUTH with a TSIG record that has no MAC (RFC 8945 section 5.3.2).
        let (message, _, mac) = try Self.request()
        var response = message
        response.flags |= 0x8000 | 9
        var data = TransactionSignature.algorithmName.wire + [0, 0, 0x6b, 0x49, 0xd2, 0x00, 1, 44, 0, 0, 0x12, 0x34]
        data += [0, 17, 0, 0]
        response.additionals = [
            DNSResourceRecord(name: Self.key.name, ttl: 0, recordClass: 255, data: .unknown(type: .tsig, bytes: data))
        ]
        var encoder = DNSMessageEncoder(limits: .unicast)
        encoder.usesNameCompression = false
        let verified = try TransactionSignature.verify(
            try encoder.encode(response), requestMAC: mac, key: Self.key, now: 1_800_000_000)
        #expect(verified.error == 17 && verified.message.responseCode == 9)
    }

    @Test func aTSIGRecordsFieldsAreBoundedByItsData() {
        let algorithm = TransactionSignature.algorithmName.wire
        let cases: [(String, [UInt8])] = [
            ("empty", []),
            ("a compression pointer for the algorithm", [0xC0, 0x0C]),
            ("cut in the time", algorithm + [0, 0, 1]),
            ("a MAC longer than the data", algorithm + [0, 0, 0, 0, 0, 1, 1, 44, 0, 200, 1, 2]),
            ("bytes after the other data", algorithm + [0, 0, 0, 0, 0, 1, 1, 44, 0, 0, 0, 1, 0, 0, 0, 0, 9]),
            ("more than 8 labels", Array(repeating: [1, 0x61], count: 9).flatMap { $0 } + [0]),
        ]
        for (what, data) in cases {
            #expect(throws: WideAreaError.self, "\(what)") { try TransactionSignature.parse(data) }
        }
    }

    // MARK: Browse rules

    static func instance(_ label: String, port: UInt16 = 7000, txt: [String] = ["a=1"], until: UInt64? = nil)
        -> WideAreaBrowseState.Instance
    {
        var strings = txt.map { Array($0.utf8) }
        if let until { strings.append(Array("mp.until=\(until)".utf8)) }
        return WideAreaBrowseState.Instance(
            label: label, name: DNSName(uncheckedLabels: [label, "_x", "_tcp", "lab", "test"]),
            host: try! DNSName("h.lab.test."), port: port, txt: strings, addresses: [.v4(IPv4Address(192, 0, 2, 1))])
    }

    static func names(_ events: [ServiceBrowserEvent]) -> [String] {
        events.map { event in
            switch event {
            case .found(let s): "found \(s.name)"
            case .updated(let s): "updated \(s.name)"
            case .lost(let s): "lost \(s.name)"
            }
        }
    }

    @Test func foundUpdatedAndLostFollowThePollsAndALeaseIsNotAnUpdate() throws {
        var state = WideAreaBrowseState(serviceType: try ServiceType("x"), domain: try DNSName("lab.test."))
        let a = Self.instance("a", until: 1000)
        let b = Self.instance("b")
        var poll = WideAreaBrowseState.Poll(listed: [a.name, b.name], resolved: [a.name: a, b.name: b])
        #expect(Self.names(state.apply(poll, now: 900)) == ["found a", "found b"])
        // A refresh moves the lease only: nothing to report. A new TXT is an update.
        poll.resolved[a.name] = Self.instance("a", until: 1060)
        #expect(state.apply(poll, now: 950).isEmpty)
        poll.resolved[b.name] = Self.instance("b", txt: ["a=2"])
        #expect(Self.names(state.apply(poll, now: 950)) == ["updated b"])
        // Found services carry the domain as their interface and no lease in their TXT.
        let service = state.service(try #require(state.present[a.name]))
        #expect(service.interfaces == ["lab.test."] && service.txt.entry(forKey: "mp.until") == nil)
        // Records that could not be fetched keep what was known; a failed listing changes nothing.
        #expect(
            state.apply(.init(listed: [a.name, b.name], resolved: [a.name: a], unresolved: [b.name]), now: 960).isEmpty)
        #expect(state.apply(.init(listed: nil), now: 960).isEmpty)
        // Gone from the listing: lost. Listed but without records: lost.
        #expect(Self.names(state.apply(.init(listed: [a.name], resolved: [a.name: a]), now: 960)) == ["lost b"])
        #expect(Self.names(state.apply(.init(listed: [a.name]), now: 960)) == ["lost a"])
    }

    @Test func anInstanceWhoseLeaseRanOutIsLostEvenWhileTheServerListsIt() throws {
        var state = WideAreaBrowseState(serviceType: try ServiceType("x"), domain: try DNSName("lab.test."))
        let a = Self.instance("a", until: 1000)
        let poll = WideAreaBrowseState.Poll(listed: [a.name], resolved: [a.name: a])
        #expect(Self.names(state.apply(poll, now: 1000)) == ["found a"])
        // Within the 30 s allowed for clocks that differ: still there.
        #expect(state.apply(poll, now: 1000 + WideAreaBrowseState.leaseGrace).isEmpty)
        #expect(Self.names(state.apply(poll, now: 1031)) == ["lost a"])
        #expect(WideAreaBrowseState.expired(in: poll, now: 1031).map(\.label) == ["a"])
        // And between polls (the server away): expire() drops it too.
        var other = WideAreaBrowseState(serviceType: try ServiceType("x"), domain: try DNSName("lab.test."))
        _ = other.apply(poll, now: 900)
        #expect(Self.names(other.expire(now: 1031)) == ["lost a"])
        // Without a lease (another implementation's records), an instance never expires.
        let foreign = Self.instance("f")
        #expect(!WideAreaBrowseState.hasExpired(foreign, now: .max))
    }

    // MARK: Records

    @Test func aRegistrationReplacesItsOwnRecordsAndARemovalTakesOnlyThem() throws {
        let records = WideAreaRecords(
            domain: try DNSName("lab.test."), serviceType: try ServiceType("chat"), instance: "Ada 4b2x",
            host: "mp-4b2x", port: 7000, txt: [Array("mp.name=Ada".utf8)],
            addresses: [.v4(IPv4Address(192, 0, 2, 1)), .v6(IPv6Address("2001:db8::1")!)], ttl: 60)
        let zone = try DNSName("lab.test.")
        let registration = records.registration(zone: zone)
        #expect(registration.opcode == 5 && registration.questions == [DNSQuestion(name: zone, type: .soa)])
        let lines = registration.authorities.map { "\($0.recordClass) \($0.name) \($0.type)" }
        #expect(
            lines == [
                "255 Ada 4b2x._chat._tcp.lab.test. SRV", "255 Ada 4b2x._chat._tcp.lab.test. TXT",
                "1 Ada 4b2x._chat._tcp.lab.test. SRV", "1 Ada 4b2x._chat._tcp.lab.test. TXT",
                "1 _chat._tcp.lab.test. PTR", "1 _services._dns-sd._udp.lab.test. PTR", "255 mp-4b2x.lab.test. A",
                "255 mp-4b2x.lab.test. AAAA", "1 mp-4b2x.lab.test. A", "1 mp-4b2x.lab.test. AAAA",
            ])
        let removal = records.removal(zone: zone, keepHost: true)
        #expect(
            removal.authorities.map { "\($0.recordClass) \($0.name) \($0.type)" } == [
                "254 _chat._tcp.lab.test. PTR", "255 Ada 4b2x._chat._tcp.lab.test. ANY",
            ])
        #expect(records.removal(zone: zone, keepHost: false).authorities.count == 3)
        let expired = WideAreaRecords.removalOfExpired(
            instanceName: records.instanceName, typeName: records.typeName, txt: records.txt, zone: zone)
        #expect(expired.answers == [DNSResourceRecord(name: records.instanceName, ttl: 0, data: .txt(records.txt))])
    }

    @Test func labelsCarryTheFingerprintAndFitDNS() throws {
        let fingerprint = try PeerIdentity.generate(displayName: "x").fingerprint
        let long = String(repeating: "é", count: 40)
        let label = WideAreaRecords.instanceLabel(displayName: long, fingerprint: fingerprint)
        #expect(label.utf8.count <= 63 && label.hasSuffix(String(fingerprint.description.prefix(19))))
        #expect(label.hasPrefix("éé"))
        let host = WideAreaRecords.hostLabel(fingerprint: fingerprint)
        #expect(
            host.hasPrefix("mp-") && host.count == 35 && host.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" })
    }

    // MARK: Settings

    @Test func keyLinesAndKeyFilesFollowTheirRules() throws {
        let secret = Data(repeating: 3, count: 32).base64EncodedString()
        let key = try TSIGKey(parsing: "  hmac-sha256:mp-key.example:\(secret)\n")
        #expect(key.name == (try DNSName("mp-key.example.")) && key.secret == [UInt8](repeating: 3, count: 32))
        #expect(!"\(key)".contains(secret))
        for bad in [
            "hmac-md5:k:\(secret)", "k:\(secret)", "hmac-sha256:k:not*base64",
            "hmac-sha256:k:\(Data(repeating: 1, count: 8).base64EncodedString())",
        ] {
            #expect(throws: WideAreaError.self, "\(bad)") { try TSIGKey(parsing: bad) }
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("mp-key-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("key").path
        _ = FileManager.default.createFile(
            atPath: file, contents: Data("# the zone's key\nhmac-sha256:k.:\(secret)\n".utf8),
            attributes: [.posixPermissions: 0o600])
        #expect(try TSIGKey.load(contentsOf: file).name == (try DNSName("k.")))
        for mode in [0o640, 0o604, 0o660] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file)
            #expect(throws: WideAreaError.self) { try TSIGKey.load(contentsOf: file) }
        }
        #expect(throws: WideAreaError.self) { try TSIGKey.load(contentsOf: folder.appendingPathComponent("none").path) }
    }

    @Test func serverAddressesAndResolverSettingsAreRead() throws {
        #expect(
            try WideAreaConfiguration.serverAddress("192.0.2.53")
                == SocketAddress(.v4(IPv4Address(192, 0, 2, 53)), port: 53))
        #expect(
            try WideAreaConfiguration.serverAddress("192.0.2.53:5353")
                == SocketAddress(.v4(IPv4Address(192, 0, 2, 53)), port: 5353))
        #expect(try WideAreaConfiguration.serverAddress("2001:db8::53").port == 53)
        #expect(try WideAreaConfiguration.serverAddress("[2001:db8::53]:54").port == 54)
        for bad in ["dns.example", "192.0.2.53:0", "192.0.2.53:x", "[2001:db8::53]x"] {
            #expect(throws: WideAreaError.self, "\(bad)") { try WideAreaConfiguration.serverAddress(bad) }
        }
        let settings = WideAreaConfiguration.resolverSettings(
            "# comment\nsearch office.example other.example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\n")
        #expect(settings.server == SocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 53))
        #expect(settings.domain == (try DNSName("office.example.")))
        #expect(
            WideAreaConfiguration.resolverSettings("domain d.example\nsearch s.example\n").domain
                == (try DNSName("d.example.")))
    }

    @Test func theEnvironmentConfiguresWideAreaAndRelayOrSaysWhatIsWrong() throws {
        let configured = PeerNetwork.Configuration.fromEnvironment([
            "MULTIPEER_LOOPBACK": "1", "MULTIPEER_DOMAIN": "lab.test", "MULTIPEER_DNS_SERVER": "127.0.0.1:5300",
        ])
        #expect(configured.wideArea?.domain == (try DNSName("lab.test.")))
        #expect(configured.wideArea?.server == SocketAddress(.v4(.loopback), port: 5300))
        #expect(configured.wideArea?.key == nil && configured.relay == nil && configured.environmentProblem == nil)
        let broken = PeerNetwork.Configuration.fromEnvironment([
            "MULTIPEER_DNS_SERVER": "127.0.0.1", "MULTIPEER_DOMAIN": "x", "MULTIPEER_DNS_KEY": "/nonexistent/key",
            "MULTIPEER_RELAY": "127.0.0.1:3478",
        ])
        #expect(broken.environmentProblem?.contains("MULTIPEER_RELAY") == true)
        do {
            _ = try PeerNetwork(configuration: broken)
            Issue.record("a network started with settings that cannot work")
        } catch {
            #expect(error.code == .invalidParameter && error.reason.contains("relay"), "\(error.reason)")
        }
        #expect(PeerNetwork.Configuration.fromEnvironment([:]).wideArea == nil)
    }

    // MARK: The relayed address

    @Test func theRelayedAddressIsAdvertisedReadAndNeverBreaksARecord() throws {
        let identity = try PeerIdentity.generate(displayName: "n")
        for address in [
            SocketAddress(.v4(IPv4Address(192, 0, 2, 50)), port: 49_200),
            SocketAddress(.v6(IPv6Address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")!), port: 65535),
        ] {
            let advertisement = try PeerAdvertisement(
                fingerprint: identity.fingerprint, displayName: "n", relayedAddress: address)
            #expect(try PeerAdvertisement(parsing: advertisement.txtRecord).relayedAddress == address)
        }
        for bad in ["192.0.2.50", "192.0.2.50:0", "[::1]", "example.org:3478", "192.0.2.50:70000", "2001:db8::1:80"] {
            var entries = try PeerAdvertisement(identity: identity).txtRecord.entries
            entries.append(TXTEntry(key: PeerAdvertisement.relayKey, value: bad))
            let parsed = try PeerAdvertisement(parsing: try TXTRecord(entries: entries))
            #expect(parsed.relayedAddress == nil, "\(bad)")
        }
    }

    @Test func relayedAddressesAreDialedAfterEveryDirectOne() {
        let direct4 = SocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 7000)
        let direct6 = SocketAddress(.v6(IPv6Address("2001:db8::1")!), port: 7000)
        let relayed = SocketAddress(.v4(IPv4Address(198, 51, 100, 1)), port: 49_200)
        let machine = HappyEyeballsStateMachine(
            addresses: [relayed, direct4, direct6], relayed: [relayed], configuration: DialConfiguration(),
            now: IOInstant(nanoseconds: 0))
        #expect(machine.addresses == [direct6, direct4, relayed])
    }
}
