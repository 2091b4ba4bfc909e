import Foundation
import Testing

@testable import PeerConnectivity

/// What a peer sends a PeerConnectivity manager is parsed only when it is short and shallow: the original's
/// `NSKeyedArchiver` events crashed the receiver with a 402-byte archive that contains itself.
@Suite("PeerConnectivity event coding")
struct PeerConnectivityEventCodingTests {
    @Test func eventsRoundTripWithDatesDataAndNesting() throws {
        let when = Date(timeIntervalSince1970: 1_700_000_000.5)
        let info: [String: Any] = [
            "EventKey": when, "bytes": Data([1, 2, 3]), "n": 3, "ok": true, "list": ["a", 1, ["b": 2.5]],
        ]
        let data = try #require(EventCoding.encode(info))
        let back = try #require(EventCoding.decode(data))
        #expect(back["EventKey"] as? Date == when)
        #expect(back["bytes"] as? Data == Data([1, 2, 3]))
        #expect(back["n"] as? Int == 3 && back["ok"] as? Bool == true)
        #expect(((back["list"] as? [Any])?[2] as? [String: Any])?["b"] as? Double == 2.5)
        // Values JSON cannot carry are refused at the sender.
        #expect(EventCoding.encode(["x": NSObject()]) == nil)
    }

    @Test func deepOrLongInputIsRefusedBeforeAnyParserSeesIt() {
        let deep = Data(
            ("{\"$event\":" + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}").utf8)
        #expect(!EventCoding.isSafeJSON(deep))
        #expect(EventCoding.decode(deep) == nil)
        // Brackets inside strings do not count; escaped quotes do not end a string.
        let quoted = Data("{\"$event\":{\"k\":\"[[[[\\\"[[[[\"}}".utf8)
        #expect(EventCoding.isSafeJSON(quoted))
        #expect(EventCoding.decode(quoted)?["k"] as? String == "[[[[\"[[[[")
        #expect(!EventCoding.isSafeJSON(Data(count: EventCoding.maximumLength + 1)))
        // An NSKeyedArchiver archive (what the original sent) is not an event here.
        let archive =
            (try? NSKeyedArchiver.archivedData(withRootObject: ["k": "v"], requiringSecureCoding: true)) ?? Data()
        #expect(EventCoding.decode(archive) == nil)
    }
}
