import MulticastDNS
import Testing

@Suite struct TXTRecordTests {
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func emptyRecordHasNoStrings() {
        #expect(TXTRecord().strings == [])
        #expect(TXTRecord().entries.isEmpty)
    }

    @Test func pairsKeepTheirOrder() throws {
        // A bare literal picks the dictionary initializer; KeyValuePairs must be asked for.
        let record = try TXTRecord(["txtvers": "1", "name": "Ann", "empty": ""] as KeyValuePairs)
        #expect(record.strings == [bytes("txtvers=1"), bytes("name=Ann"), bytes("empty=")])
        #expect(record["NAME"] == "Ann")
        #expect(record["empty"] == "")
        #expect(record["missing"] == nil)
    }

    @Test func dictionaryIsSortedByKey() throws {
        let record = try TXTRecord(["b": "2", "a": "1", "c": "3"] as [String: String])
        #expect(record.strings == [bytes("a=1"), bytes("b=2"), bytes("c=3")])
        #expect(record.dictionary == ["a": "1", "b": "2", "c": "3"])
    }

    @Test func booleanAttributeHasNoEquals() throws {
        let record = try TXTRecord(entries: [TXTEntry(key: "flag", value: nil), TXTEntry(key: "v", value: [0, 255])])
        #expect(record.strings == [bytes("flag"), [0x76, 0x3d, 0, 255]])
        #expect(record.entry(forKey: "FLAG")?.value == nil)
        #expect(record["flag"] == "")
    }

    @Test func keyRules() {
        #expect(throws: ServiceValidationError.txtKeyEmpty) { try TXTRecord(["": "x"]) }
        #expect(throws: ServiceValidationError.txtKeyContainsEquals("a=b")) { try TXTRecord(["a=b": "x"]) }
        #expect(throws: ServiceValidationError.txtKeyInvalidCharacter(key: "caf\u{e9}", "\u{e9}")) {
            try TXTRecord(["caf\u{e9}": "x"])
        }
        #expect(throws: ServiceValidationError.txtKeyInvalidCharacter(key: "a\tb", "\t")) {
            try TXTRecord(["a\tb": "x"])
        }
        #expect(throws: ServiceValidationError.txtDuplicateKey("Key")) {
            try TXTRecord(["key": "1", "Key": "2"] as KeyValuePairs)
        }
        try? #require(try TXTRecord(["with space ~": "ok"]).strings.count == 1)
    }

    @Test func lengthRules() throws {
        let value254 = String(repeating: "v", count: 253)
        #expect(try TXTRecord(["k": value254]).strings[0].count == 255)
        #expect(throws: ServiceValidationError.txtEntryTooLong(key: "k", bytes: 256)) {
            try TXTRecord(["k": value254 + "v"])
        }
        let many = (0..<6).map { TXTEntry(key: "k\($0)", value: String(repeating: "v", count: 250)) }
        #expect(throws: ServiceValidationError.txtRecordTooLong(bytes: 6 * 254, limit: 1300)) {
            try TXTRecord(entries: many)
        }
    }

    @Test func errorDescriptionsNameTheRule() {
        #expect(ServiceValidationError.txtKeyEmpty.description.contains("RFC 6763 section 6.4"))
        #expect(ServiceValidationError.txtKeyContainsEquals("a=b").description.contains("\"=\""))
        #expect(ServiceValidationError.txtEntryTooLong(key: "k", bytes: 300).description.contains("255"))
        #expect(ServiceValidationError.txtRecordTooLong(bytes: 2000, limit: 1300).description.contains("1300"))
        #expect(ServiceValidationError.txtDuplicateKey("k").description.contains("case-insensitive"))
    }

    @Test func lenientDecoding() {
        let record = TXTRecord(decoding: [
            [],  // empty: skipped
            bytes("=novalue"),  // no key: skipped
            bytes("Name=First"),
            bytes("name=Second"),  // same key, other case: first wins
            bytes("flag"),
            bytes("empty="),
            bytes("eq=a=b"),  // value may contain "="
            [0x62, 0x69, 0x6e, 0x3d, 0xff, 0xfe],  // binary value
        ])
        #expect(record.entries.map(\.key) == ["Name", "flag", "empty", "eq", "bin"])
        #expect(record["name"] == "First")
        #expect(record.entry(forKey: "flag")?.value == nil)
        #expect(record.entry(forKey: "empty")?.value == [])
        #expect(record["eq"] == "a=b")
        #expect(record.entry(forKey: "bin")?.value == [0xff, 0xfe])
        #expect(record["bin"] == "\u{fffd}\u{fffd}")
    }

    @Test func lenientDecodingOfInvalidKeysNeverThrows() {
        let record = TXTRecord(decoding: [[0xff, 0x3d, 0x31], [0x00], [0x3d]])
        #expect(record.entries.count == 2)
    }

    @Test func builtRecordsDecodeToThemselves() throws {
        let record = try TXTRecord(entries: [
            TXTEntry(key: "txtvers", value: "1"), TXTEntry(key: "b", value: nil), TXTEntry(key: "e", value: []),
        ])
        #expect(TXTRecord(decoding: record.strings) == record)
    }
}
