import Foundation
import MultipeerConnectivity
import Testing

@testable import Multipeer
@testable import PeerConnectivity

/// What the fuzz targets of peers' session messages, resource offers, archived peer IDs and PeerConnectivity events
/// found (`scripts/fuzz.sh SECONDS session|offer|peerid|events`), and their seeds kept valid.
@Suite("Fuzz findings: resource names")
struct ResourceNameFuzzFindingsTests {
    /// A separator, dot or space followed by a combining mark is one character equal to none of them, but its
    /// bytes are still one to the file system: the rules apply to scalars.
    @Test func separatorsDotsAndSpacesAreFoundInsideCharacters() {
        #expect(ResourceName.sanitize("a/\u{301}b") == "\u{301}b")
        #expect(ResourceName.sanitize("dir\\\u{301}x.txt") == "\u{301}x.txt")
        #expect(ResourceName.sanitize(".\u{301}hidden") == "\u{301}hidden")
        #expect(ResourceName.sanitize(" \u{301}x") == "\u{301}x")
    }

    /// A first character longer than the room (a letter with 250 combining marks) was dropped whole, leaving the
    /// extension alone: a hidden file `.txt`, or an empty name without one.
    @Test func aCharacterTooLongToFitIsCutBetweenItsScalars() {
        let marks = String(repeating: "\u{301}", count: 250)
        let withExtension = ResourceName.sanitize("a" + marks + ".txt")
        #expect(withExtension.utf8.first == UInt8(ascii: "a") && withExtension.hasSuffix(".txt"))
        #expect(withExtension.utf8.count <= ResourceName.maximumByteCount)
        let bare = ResourceName.sanitize("a" + marks)
        #expect(bare.utf8.first == UInt8(ascii: "a") && bare.utf8.count == ResourceName.maximumByteCount - 1)
    }

    /// A long name cut after spaces ended in them (the fuzzer's first find).
    @Test func aCutNameDoesNotEndInASpace() {
        #expect(ResourceName.sanitize("x" + String(repeating: " ", count: 300) + "y") == "x")
        #expect(ResourceName.sanitize("x" + String(repeating: " ", count: 300) + "y.txt") == "x.txt")
    }

    @Test func theOfferAndSessionSeedsKeepTheirProperties() {
        #expect(OfferFuzzHarness.seeds().count >= 10)
        for seed in OfferFuzzHarness.seeds() { OfferFuzzHarness.check(seed) }
        #expect(SessionFuzzHarness.seeds().count >= 16)
        for seed in SessionFuzzHarness.seeds() { SessionFuzzHarness.check(seed) }
    }
}

@Suite("Fuzz findings: PeerConnectivity events")
struct EventCodingFuzzFindingsTests {
    /// JSONSerialization and JSONDecoder read UTF-16 and UTF-32 too, while the depth guard reads bytes: the quote
    /// byte inside `Ģ` (U+0122, `22 01` in UTF-16LE) left it in a string, and 100 levels of brackets after it went
    /// unseen by the guard but not by the parser.
    @Test func jsonThatIsNotUTF8IsRefusedBeforeAnyParserSeesIt() throws {
        let nest = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        let deep = #"{"$event":{"x":"Ģ","y":"# + nest + "}}"
        let utf16 = try #require(deep.data(using: .utf16LittleEndian))
        #expect(!EventCoding.isSafeJSON(utf16))
        #expect(EventCoding.decode(utf16) == nil)
        guard case .data = EventCoding.classify(utf16) else {
            Issue.record("UTF-16 JSON was parsed")
            return
        }
        let shallow = try #require(#"{"$event":{"k":"v"}}"#.data(using: .utf32LittleEndian))
        #expect(!EventCoding.isSafeJSON(shallow))
        #expect(EventCoding.decode(shallow) == nil)
        // The same event in UTF-8 is one.
        #expect(EventCoding.decode(Data(#"{"$event":{"k":"v"}}"#.utf8))?["k"] as? String == "v")
    }

    /// A `$date` of 105 digits: Foundation parsed the integer as a decimal whose `Double` differs from the same
    /// value written back, so the event changed on a round trip (the fuzz smoke's crash). A date that far from 1970
    /// is now no date, and the event round trips.
    @Test func aDateFarBeyondAnyCalendarStaysANumber() {
        let digits = "17004" + String(repeating: "4", count: 96) + "00025"
        let event = Data((#"{"$event":{"bytes":{"$data":"AAEC/v8>"},"when":{"$date":"# + digits + "}}}").utf8)
        EventFuzzHarness.check(Array(event))
        let decoded = EventCoding.decode(event)
        #expect(decoded?["when"] is [String: Any], "\(String(describing: decoded))")
        let near = Data(#"{"$event":{"when":{"$date":1700000000.5}}}"#.utf8)
        #expect((EventCoding.decode(near)?["when"] as? Date)?.timeIntervalSince1970 == 1_700_000_000.5)
    }

    @Test func theEventSeedsKeepTheirProperties() {
        #expect(EventFuzzHarness.seeds().count >= 8)
        for seed in EventFuzzHarness.seeds() { EventFuzzHarness.check(seed) }
    }
}

extension CompatibilitySuites {
    @Suite("Fuzz findings: archived peer IDs", .serialized)
    struct PeerIDFuzzFindingsTests {
        init() { FacadeTestSetup.prepare() }

        /// An archive whose name (or fingerprint) refers back to the peer ID itself: swift-corelibs-foundation checks
        /// the class once per archive, so asking for a string decoded the peer ID again, and again, until the stack
        /// overflowed; an application unarchiving a peer ID sent by another crashed.
        @Test(arguments: ["MCPeerIDDisplayName", "MCPeerIDFingerprint"])
        func aPeerIDThatContainsItselfIsRefused(key: String) throws {
            let looped = LoopedPeerID(key: key, fingerprint: MCPeerID(displayName: "Loop").fingerprint.description)
            let archive = try NSKeyedArchiver.archivedData(withRootObject: looped, requiringSecureCoding: true)
            #expect(archive.count < 1_000)
            #expect((try? NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: archive)) == nil)
            // Peer IDs that do not contain themselves still unarchive, also inside another archive.
            let peers = [MCPeerID(displayName: "A"), MCPeerID(displayName: "B")]
            let list = try NSKeyedArchiver.archivedData(withRootObject: peers as NSArray, requiringSecureCoding: true)
            let back = try NSKeyedUnarchiver.unarchivedObject(ofClasses: [NSArray.self, MCPeerID.self], from: list)
            #expect(back as? [MCPeerID] == peers)
        }
    }
}

/// Archived as an `MCPeerID` whose `key` holds the archived object itself.
private final class LoopedPeerID: NSObject, NSSecureCoding {
    static var supportsSecureCoding: Bool { true }
    let key: String
    let fingerprint: String

    init(key: String, fingerprint: String) {
        self.key = key
        self.fingerprint = fingerprint
    }

    required init?(coder: NSCoder) { nil }

    override var classForKeyedArchiver: AnyClass? { MCPeerID.self }

    func encode(with coder: NSCoder) {
        let name: NSObject = key == "MCPeerIDDisplayName" ? self : "Loop" as NSString
        let fingerprint: NSObject = key == "MCPeerIDFingerprint" ? self : self.fingerprint as NSString
        coder.encode(name, forKey: "MCPeerIDDisplayName")
        coder.encode(fingerprint, forKey: "MCPeerIDFingerprint")
    }
}
