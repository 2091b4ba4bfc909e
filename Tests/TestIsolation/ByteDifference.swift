/// Where two byte sequences first differ, or nil when they are equal. For `#expect` on large payloads:
/// `#expect(a == b)` on arrays diffs them element by element when they differ, which takes minutes for megabytes
/// (and holds a pool thread all that time); `#expect(byteDifference(a, b) == nil)` says at once where they part.
public func byteDifference(_ actual: some Collection<UInt8>, _ expected: some Collection<UInt8>) -> String? {
    var offset = 0
    var left = actual.makeIterator()
    var right = expected.makeIterator()
    while true {
        switch (left.next(), right.next()) {
        case (nil, nil):
            return nil
        case (let a?, let b?) where a == b:
            offset += 1
        case (let a, let b):
            return "\(actual.count) bytes against \(expected.count) expected; first difference at offset \(offset) "
                + "(\(a.map { "\($0)" } ?? "end") against \(b.map { "\($0)" } ?? "end"))"
        }
    }
}
