import Multipeer
import Testing

@Suite("DisplayName")
struct IdentityDisplayNameTests {
    @Test func acceptsOrdinaryNames() throws {
        try DisplayName.validate("Alice's laptop")
        try DisplayName.validate("a")
        try DisplayName.validate(String(repeating: "x", count: 63))
    }

    @Test func accepts63BytesOfMultiByteUTF8() throws {
        // 21 three-byte characters are 63 bytes.
        let name = String(repeating: "日", count: 21)
        #expect(name.utf8.count == 63)
        try DisplayName.validate(name)
    }

    @Test func refusesEmpty() {
        let error = #expect(throws: IdentityError.self) { try DisplayName.validate("") }
        #expect(error?.code == .displayNameEmpty)
        #expect(error?.description.contains("empty") == true)
    }

    @Test func refuses64Bytes() {
        let error = #expect(throws: IdentityError.self) {
            try DisplayName.validate(String(repeating: "x", count: 64))
        }
        #expect(error?.code == .displayNameTooLong(byteCount: 64))
        #expect(error?.reason.contains("64 bytes") == true)
        #expect(error?.reason.contains("63") == true)
    }

    @Test func refusesMultiByteNameOverTheByteLimit() {
        // 22 characters, but 66 bytes.
        let error = #expect(throws: IdentityError.self) {
            try DisplayName.validate(String(repeating: "日", count: 22))
        }
        #expect(error?.code == .displayNameTooLong(byteCount: 66))
    }

    @Test(arguments: ["a\nb", "tab\there", "nul\u{0}", "del\u{7F}", "c1\u{85}", "\u{1B}[31mred"])
    func refusesControlCharacters(_ name: String) {
        let error = #expect(throws: IdentityError.self) { try DisplayName.validate(name) }
        #expect(error?.code == .displayNameInvalid)
        #expect(error?.reason.contains("control character U+") == true)
    }

    @Test func generateAppliesTheRules() {
        let error = #expect(throws: IdentityError.self) { try PeerIdentity.generate(displayName: "") }
        #expect(error?.code == .displayNameEmpty)
    }
}
