internal import Foundation

/// The wire form of `sendEvent` dictionaries and the guard every JSON a peer sends passes before it is parsed.
///
/// Events are JSON (the original library used `NSKeyedArchiver`, whose unarchiver on Linux recurses without
/// limit: a 402-byte archive that contains itself, or a deep one, crashes the receiver). Dates and data, which
/// JSON lacks, are tagged objects: `{"$date": seconds since 1970}`, `{"$data": base64}`. Decoding refuses more
/// than ``maximumLength`` bytes, nesting deeper than ``maximumDepth`` and anything but UTF-8 before any parser sees
/// the input.
enum EventCoding {
    /// The longest event or envelope decoded.
    static let maximumLength = 1 << 20
    /// The deepest nesting of arrays and objects decoded.
    static let maximumDepth = 32
    /// The furthest a `$date` may be from 1970, in seconds (about 3,170 years): a tagged number beyond it stays a
    /// dictionary, not a `Date`. Found by fuzzing: a 105-digit integer is parsed by Foundation as a decimal whose
    /// conversion to `Double` differs from the same value written back, and dates that far out are nobody's.
    static let maximumDateSeconds: Double = 100_000_000_000

    /// Whether `data` is short enough, holds no zero byte and nests at most ``maximumDepth`` deep (strings and
    /// escapes skipped).
    ///
    /// JSON in UTF-8 never holds a zero byte (a NUL in a string is escaped). JSON in UTF-16 or UTF-32 always does,
    /// and both parsers read it (they guess the encoding from the zeros), while this scan, which reads bytes,
    /// would misread its code units: a quote's byte inside another character hides the brackets that follow, and
    /// the parser then reads JSON nested far deeper than the limit.
    static func isSafeJSON(_ data: Data) -> Bool {
        guard data.count <= maximumLength else { return false }
        var depth = 0
        var inString = false
        var escaped = false
        for byte in data {
            if byte == 0 { return false }
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > maximumDepth { return false }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return true
    }

    /// `info` as JSON, or nil when a value is not a string, number, boolean, date, data, array or dictionary.
    static func encode(_ info: [String: Any]) -> Data? {
        guard let tagged = tag(info) else { return nil }
        return try? JSONSerialization.data(withJSONObject: ["$event": tagged], options: [.sortedKeys])
    }

    /// The dictionary an event carried, or nil for anything else (checked with ``isSafeJSON(_:)`` first).
    static func decode(_ data: Data) -> [String: Any]? {
        guard data.first == UInt8(ascii: "{"), isSafeJSON(data),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any], object.count == 1,
            let event = object["$event"] as? [String: Any]
        else { return nil }
        return untag(event) as? [String: Any]
    }

    /// What a peer's bytes are to a manager.
    enum Received {
        /// A typed message (`sendMessage`) in its envelope: the type's name and its JSON.
        case message(type: String, payload: Data)
        /// An event dictionary (`sendEvent`).
        case event([String: Any])
        /// Anything else: data as sent.
        case data
    }

    /// Reads what a peer sent: JSON is parsed only when it starts as an object and passes ``isSafeJSON(_:)``.
    static func classify(_ data: Data) -> Received {
        guard data.first == UInt8(ascii: "{"), isSafeJSON(data) else { return .data }
        if let envelope = try? JSONDecoder().decode([String: Data].self, from: data), envelope.count == 2,
            let type = envelope["type"].flatMap({ String(data: $0, encoding: .utf8) }),
            let payload = envelope["payload"]
        {
            return .message(type: type, payload: payload)
        }
        if let info = decode(data) { return .event(info) }
        return .data
    }

    private static func tag(_ value: Any) -> Any? {
        switch value {
        case let string as String: return string
        case let bool as Bool: return bool
        case let number as NSNumber: return number
        case let int as Int: return int
        case let double as Double: return double
        case let date as Date: return ["$date": date.timeIntervalSince1970]
        case let data as Data: return ["$data": data.base64EncodedString()]
        case let array as [Any]:
            var tagged: [Any] = []
            for element in array {
                guard let value = tag(element) else { return nil }
                tagged.append(value)
            }
            return tagged
        case let dictionary as [String: Any]:
            var tagged: [String: Any] = [:]
            for (key, element) in dictionary {
                guard let value = tag(element) else { return nil }
                tagged[key] = value
            }
            return tagged
        default: return nil
        }
    }

    private static func untag(_ value: Any) -> Any {
        switch value {
        case let dictionary as [String: Any]:
            if dictionary.count == 1, let seconds = dictionary["$date"] as? Double, seconds.isFinite,
                abs(seconds) <= maximumDateSeconds
            {
                return Date(timeIntervalSince1970: seconds)
            }
            if dictionary.count == 1, let text = dictionary["$data"] as? String, let data = Data(base64Encoded: text) {
                return data
            }
            return dictionary.mapValues(untag)
        case let array as [Any]: return array.map(untag)
        default: return value
        }
    }
}
