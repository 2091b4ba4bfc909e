internal import Foundation

/// The libFuzzer oracle for what a peer sends a PeerConnectivity manager: bytes that may be a typed message in
/// its envelope (`sendMessage`), an event dictionary (`sendEvent`, JSON with tagged dates and data) or plain data.
///
/// The properties: nothing crashes; JSON that passes the guard (``EventCoding/isSafeJSON(_:)``), as a whole or as
/// a typed message's payload, nests at most ``EventCoding/maximumDepth`` deep as the parser reads it and is at most
/// ``EventCoding/maximumLength`` bytes; a decoded event encodes again (unless it holds a JSON `null`, which no
/// sender's event can) and decodes to the same values. Package access, for `mdns-fuzz`.
package enum EventFuzzHarness {
    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        let data = Data(bytes)
        checkGuard(data)
        switch EventCoding.classify(data) {
        case .message(_, let payload):
            precondition(data.first == UInt8(ascii: "{") && EventCoding.isSafeJSON(data), "an unguarded envelope")
            // What `observeMessages` does with the payload before decoding it.
            checkGuard(payload)
        case .event, .data:
            break
        }
        guard let event = EventCoding.decode(data) else { return }
        precondition(data.first == UInt8(ascii: "{") && EventCoding.isSafeJSON(data), "an unguarded event")
        precondition(depth(event) + 1 <= EventCoding.maximumDepth, "an event nested \(depth(event) + 1) deep")
        guard let encoded = EventCoding.encode(event) else {
            precondition(containsNull(event), "a decoded event does not encode: \(event)")
            return
        }
        // Escaping may lengthen a long event beyond the limit; the fuzzer's inputs are far shorter.
        guard encoded.count <= EventCoding.maximumLength else { return }
        guard let again = EventCoding.decode(encoded) else {
            preconditionFailure("a re-encoded event does not decode: \(String(decoding: encoded, as: UTF8.self))")
        }
        precondition(same(event, again), "round trip changed the event:\n\(event)\n\(again)")
    }

    /// JSON the guard lets through nests as deep as the guard thinks, at most.
    private static func checkGuard(_ data: Data) {
        guard EventCoding.isSafeJSON(data) else { return }
        precondition(data.count <= EventCoding.maximumLength, "\(data.count) bytes passed the guard")
        guard let object = try? JSONSerialization.jsonObject(with: data, options: .fragmentsAllowed) else { return }
        precondition(
            depth(object) <= EventCoding.maximumDepth, "JSON nested \(depth(object)) deep passed the guard: \(data)")
    }

    /// The nesting of arrays and dictionaries (a scalar is 0 deep).
    static func depth(_ value: Any) -> Int {
        if let dictionary = value as? [String: Any] { return 1 + (dictionary.values.map(depth).max() ?? 0) }
        if let array = value as? [Any] { return 1 + (array.map(depth).max() ?? 0) }
        return 0
    }

    private static func containsNull(_ value: Any) -> Bool {
        if value is NSNull { return true }
        if let dictionary = value as? [String: Any] { return dictionary.values.contains(where: containsNull) }
        if let array = value as? [Any] { return array.contains(where: containsNull) }
        return false
    }

    /// Equal values; numbers are equal when they are as numbers (a JSON 1 and `true` read back alike).
    private static func same(_ a: Any, _ b: Any) -> Bool {
        switch (a, b) {
        case (let a as [String: Any], let b as [String: Any]):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { same(value, $0) } ?? false }
        case (let a as [Any], let b as [Any]):
            return a.count == b.count && zip(a, b).allSatisfy(same)
        case (let a as Date, let b as Date): return a.timeIntervalSince1970 == b.timeIntervalSince1970
        case (let a as Data, let b as Data): return a == b
        case (let a as String, let b as String): return a == b
        case (let a as NSNumber, let b as NSNumber): return a.isEqual(b) || a.doubleValue == b.doubleValue
        case (is NSNull, is NSNull): return true
        default: return false
        }
    }

    private struct Note: PeerMessage {
        var text: String
        var count: Int
        var tags: [String]
    }

    /// Seeds: events of every kind of value and nesting, typed messages in their envelopes, and plain data.
    package static func seeds() -> [[UInt8]] {
        var nested: Any = ["leaf": "x"]
        for level in 0..<(EventCoding.maximumDepth - 4) { nested = level.isMultiple(of: 2) ? [nested] : ["k": nested] }
        let events: [[String: Any]] = [
            ["EventKey": "hello"],
            ["n": 3, "x": 2.5, "ok": true, "no": false, "big": Int64.max, "neg": -7],
            ["when": Date(timeIntervalSince1970: 1_700_000_000.25), "bytes": Data([0, 1, 2, 254, 255])],
            ["list": ["a", 1, ["b": 2.5], [Date(timeIntervalSince1970: 0)]], "empty": [String: Any](), "none": []],
            ["escapes": "quote \" backslash \\ brackets [[{{ tab\t é ✓ 👩‍💻", "$date": "not a date"],
            ["deep": nested],
        ]
        var seeds = events.compactMap { EventCoding.encode($0) }.map { Array($0) }
        let notes = [Note(text: "hi", count: 1, tags: []), Note(text: "{[\"]}", count: -1, tags: ["a", "b"])]
        seeds += notes.compactMap { try? PeerConnectionManager.envelope($0) }.map { Array($0) }
        seeds.append(Array("plain data, not JSON".utf8))
        return seeds
    }
}
