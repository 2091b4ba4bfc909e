import TestIsolation
import Testing

/// The test support that compares payloads without `#expect`'s element-by-element diff.
struct ByteDifferenceTests {
    @Test func equalBytesHaveNoDifferenceAndUnequalOnesSayWhere() {
        let payload = (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0) }
        #expect(byteDifference(payload, payload) == nil)
        var changed = payload
        changed[1_234_567] &+= 1
        #expect(byteDifference(changed, payload)?.contains("offset 1234567") == true)
        #expect(byteDifference(payload.dropLast(), payload)?.contains("2999999 bytes against 3000000") == true)
        #expect(byteDifference([UInt8](), payload)?.contains("(end against 0)") == true)
    }
}
