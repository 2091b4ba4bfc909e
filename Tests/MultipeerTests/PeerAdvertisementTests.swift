import MulticastDNS
import MultipeerIO
import Testing

@testable import Multipeer

/// The library's reserved TXT keys next to the application's discovery info, written and read in one place.
@Suite("Peer advertisements in TXT records")
struct PeerAdvertisementTests {
    static let identity = TestPeers.ada

    /// What a browser hands over: the wire strings, read leniently.
    static func received(_ strings: [String]) -> TXTRecord {
        TXTRecord(decoding: strings.map { Array($0.utf8) })
    }

    /// A valid record's strings with `key`'s entry replaced by `replacement` (or dropped for nil).
    static func strings(replacing key: String, with replacement: String?) throws -> [String] {
        let valid = try PeerAdvertisement(identity: identity, discoveryInfo: ["status": "online"])
        return valid.txtRecord.strings.map { String(decoding: $0, as: UTF8.self) }.compactMap { entry in
            entry.hasPrefix(key + "=") ? replacement : entry
        }
    }

    @Test func anAdvertisementSurvivesTheWireWithTheApplicationsInfoApart() throws {
        let info = ["status": "online", "color": "blue", "flag": ""]
        let advertisement = try PeerAdvertisement(identity: Self.identity, discoveryInfo: info)
        let wire = advertisement.txtRecord.strings.map { String(decoding: $0, as: UTF8.self) }
        #expect(
            Array(wire.prefix(3)) == [
                "mp.id=\(Self.identity.fingerprint)", "mp.name=Ada",
                "mp.v=\(PeerAdvertisement.ProtocolVersion.current)",
            ])
        #expect(Array(wire.dropFirst(3)) == ["color=blue", "flag=", "status=online"])
        let parsed = try PeerAdvertisement(parsing: TXTRecord(decoding: advertisement.txtRecord.strings))
        #expect(parsed.fingerprint == Self.identity.fingerprint)
        #expect(parsed.displayName == "Ada")
        #expect(parsed.protocolVersion == .current)
        #expect(parsed.discoveryInfo == info)
    }

    @Test(arguments: ["mp.color", "MP.color", "Mp.id", "mP.", "mp.name"])
    func applicationKeysInTheReservedNamespaceAreRefusedInAnyCase(key: String) {
        do {
            _ = try PeerAdvertisement(identity: Self.identity, discoveryInfo: [key: "x"])
            Issue.record("the reserved key \(key) was accepted")
        } catch {
            #expect(error.code == .reservedKey(key))
            #expect(error.reason.contains("reserves") && error.reason.contains("'mp.'"))
        }
    }

    @Test func keysThatMerelyResembleThePrefixAreTheApplications() throws {
        let info = ["mp": "1", "mpx": "2", "m.p.": "3", "xmp.": "4"]
        let advertisement = try PeerAdvertisement(identity: Self.identity, discoveryInfo: info)
        #expect(try PeerAdvertisement(parsing: advertisement.txtRecord).discoveryInfo == info)
    }

    @Test func reservedKeysAreReadWhateverTheirCaseAndUnknownOnesAreNotPassedOn() throws {
        let record = Self.received([
            "MP.ID=\(Self.identity.fingerprint)", "Mp.Name=Ada", "mP.V=1.7", "mp.future=whatever", "Status=busy",
        ])
        let parsed = try PeerAdvertisement(parsing: record)
        #expect(parsed.fingerprint == Self.identity.fingerprint)
        #expect(parsed.displayName == "Ada")
        #expect(parsed.protocolVersion == PeerAdvertisement.ProtocolVersion(major: 1, minor: 7))
        #expect(parsed.discoveryInfo == ["Status": "busy"])
    }

    @Test(arguments: [PeerAdvertisement.fingerprintKey, PeerAdvertisement.displayNameKey, PeerAdvertisement.versionKey])
    func aMissingReservedKeyIsNamed(key: String) throws {
        let record = Self.received(try Self.strings(replacing: key, with: nil))
        #expect(Self.failureCode(record) == .missingKey(key))
    }

    @Test(arguments: [
        ("mp.id", "mp.id=NOT-A-FINGERPRINT"),
        ("mp.id", "mp.id=\(TestPeers.ada.fingerprint.description.uppercased())"),
        ("mp.id", "mp.id"),
        ("mp.name", "mp.name="),
        ("mp.name", "mp.name=line\nbreak"),
        ("mp.name", "mp.name=\(String(repeating: "n", count: 64))"),
        ("mp.v", "mp.v=1"),
        ("mp.v", "mp.v=1.0.0"),
        ("mp.v", "mp.v=256.0"),
        ("mp.v", "mp.v=+1.0"),
        ("mp.v", "mp.v=one.zero"),
    ])
    func aMalformedReservedValueIsNamed(key: String, entry: String) throws {
        let record = Self.received(try Self.strings(replacing: key, with: entry))
        #expect(Self.failureCode(record) == .malformedValue(key: key))
    }

    @Test func aHostileValueCannotForgeLinesInTheErrorText() throws {
        let record = Self.received(try Self.strings(replacing: "mp.v", with: "mp.v=1\n[fake] log line"))
        do {
            _ = try PeerAdvertisement(parsing: record)
            Issue.record("a malformed version was accepted")
        } catch {
            #expect(!error.reason.contains("\n") && error.reason.contains("\\n"))
        }
    }

    @Test func theReservedEntriesTakeAtMostTheirStatedShareOfTheRecord() throws {
        let longest = try PeerAdvertisement(
            fingerprint: Self.identity.fingerprint, displayName: String(repeating: "n", count: 63),
            protocolVersion: .init(major: 255, minor: 255),
            relayedAddress: SocketAddress(.v6(IPv6Address("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")!), port: 65535))
        let size = longest.txtRecord.strings.reduce(0) { $0 + 1 + $1.count }
        #expect(size == PeerAdvertisement.maximumReservedSize)
        #expect(size <= 400, "RFC 6763 section 6.2: up to 400 bytes where more data is justified")
        let direct = try PeerAdvertisement(
            fingerprint: Self.identity.fingerprint, displayName: String(repeating: "n", count: 63),
            protocolVersion: .init(major: 255, minor: 255))
        let directSize = direct.txtRecord.strings.reduce(0) { $0 + 1 + $1.count }
        #expect(directSize <= 200, "RFC 6763 section 6.2's typical record is 200 bytes or less (without a relay)")
    }

    @Test func applicationInfoBreakingRFC6763IsRefusedWithTheRule() {
        let tooLong = ["blob": String(repeating: "x", count: 251)]
        #expect(throws: PeerAdvertisementError.self) {
            try PeerAdvertisement(identity: Self.identity, discoveryInfo: tooLong)
        }
        let caseTwins = ["color": "blue", "Color": "red"]
        do {
            _ = try PeerAdvertisement(identity: Self.identity, discoveryInfo: caseTwins)
            Issue.record("two keys differing only in case were accepted")
        } catch {
            guard case .invalidTXTRecord(.txtDuplicateKey) = error.code else {
                Issue.record("unexpected \(error)")
                return
            }
        }
        // Together with the reserved entries the record must stay within RFC 6763's 1300 bytes.
        let large = Dictionary(uniqueKeysWithValues: (0..<6).map { ("k\($0)", String(repeating: "v", count: 200)) })
        do {
            _ = try PeerAdvertisement(identity: Self.identity, discoveryInfo: large)
            Issue.record("a record over 1300 bytes was accepted")
        } catch {
            guard case .invalidTXTRecord(.txtRecordTooLong(_, 1300)) = error.code else {
                Issue.record("unexpected \(error)")
                return
            }
        }
    }

    @Test func anInvalidDisplayNameIsNotAdvertised() {
        #expect(throws: PeerAdvertisementError.self) {
            try PeerAdvertisement(fingerprint: Self.identity.fingerprint, displayName: "bell\u{7}")
        }
    }

    /// The code of the error parsing `record` fails with, or nil if it parses.
    static func failureCode(_ record: TXTRecord) -> PeerAdvertisementError.Code? {
        do {
            _ = try PeerAdvertisement(parsing: record)
            return nil
        } catch {
            return error.code
        }
    }
}
