import MulticastDNS
import Testing

@Suite struct ServiceTypeTests {
    @Test(arguments: ["chat", "_chat._tcp", "_chat._tcp.local", "_chat._tcp.local.", "_CHAT._TCP.LOCAL."])
    func acceptedSpellings(_ text: String) throws {
        let type = try ServiceType(text)
        // Upper case is allowed and kept (RFC 6335 section 5.1), and the same service type as lower case.
        #expect(type.name == (text.contains("CHAT") ? "CHAT" : "chat"))
        #expect(type.transport == .tcp)
        #expect(type.domainName == (try DNSName("_chat._tcp.local.")))
        #expect(type.description.lowercased() == "_chat._tcp")
        let lower = try ServiceType("chat")
        #expect(type == lower && type.hashValue == lower.hashValue)
    }

    @Test func namesCompareWithoutCaseButKeepIt() throws {
        // A wrapper's default ("MKSVC"), as Apple's framework accepts it.
        let upper = try ServiceType("MKSVC")
        #expect(upper.name == "MKSVC" && upper.description == "_MKSVC._tcp")
        let spellings = [upper, try ServiceType("mksvc"), try ServiceType("_MkSvc._tcp")]
        #expect(Set(spellings).count == 1)
        let overUDP = try ServiceType("mksvc", transport: .udp)
        let other = try ServiceType("mksvd")
        #expect(upper != overUDP && upper != other)
        let fromName = try ServiceType(domainName: upper.domainName)
        #expect(fromName == upper)
        // Only ASCII folds: the Kelvin sign lowercases to "k" in Unicode, but is no letter of a service type.
        #expect(throws: ServiceValidationError.serviceTypeInvalidCharacter("m\u{212A}svc", "\u{212A}")) {
            try ServiceType("m\u{212A}svc")
        }
    }

    @Test(arguments: ["a-b", "x1", "abcdefghijklmno", "1a", "a-b-c", "Chat", "MKSVC", "X-1"])
    func validNames(_ name: String) throws {
        #expect(try ServiceType(name).name == name)
    }

    @Test func transportFromTextWinsOverTheParameter() throws {
        #expect(try ServiceType("_chat._udp").transport == .udp)
        #expect(try ServiceType("chat", transport: .udp).domainName == (try DNSName("_chat._udp.local.")))
        #expect(try ServiceType("_chat._tcp", transport: .udp).transport == .tcp)
    }

    @Test func domainNameRoundTrips() throws {
        let type = try ServiceType("_my-app._udp")
        #expect(try ServiceType(domainName: type.domainName) == type)
        #expect(throws: ServiceValidationError.self) { try ServiceType(domainName: ServiceType.enumerationName) }
    }

    @Test func enumerationName() {
        #expect(ServiceType.enumerationName.description == "_services._dns-sd._udp.local.")
    }

    @Test(arguments: [
        ("", ServiceValidationError.serviceTypeEmpty),
        ("_", .serviceTypeEmpty),
        ("abcdefghijklmnop", .serviceTypeTooLong("abcdefghijklmnop", length: 16)),
        ("my_app", .serviceTypeInvalidCharacter("my_app", "_")),
        ("caf\u{e9}", .serviceTypeInvalidCharacter("caf\u{e9}", "\u{e9}")),
        ("123", .serviceTypeNoLetter("123")),
        ("-chat", .serviceTypeHyphenPlacement("-chat")),
        ("chat-", .serviceTypeHyphenPlacement("chat-")),
        ("ch--at", .serviceTypeHyphenPlacement("ch--at")),
        ("_chat._sctp", .serviceTypeMalformed("_chat._sctp", reason: "\"_sctp\" is not \"_tcp\" or \"_udp\"")),
        (
            "_chat._tcp.example",
            .serviceTypeMalformed("_chat._tcp.example", reason: "the domain \"example\" is not \"local\"")
        ),
        ("chat._tcp", .serviceTypeMalformed("chat._tcp", reason: "the service label must start with \"_\"")),
        ("_a._sub._chat._tcp", .serviceTypeMalformed("_a._sub._chat._tcp", reason: "too many labels")),
    ])
    func invalidTypes(_ text: String, _ error: ServiceValidationError) {
        #expect(throws: error) { try ServiceType(text) }
    }

    @Test func descriptionsNameTheRule() {
        #expect(
            ServiceValidationError.serviceTypeInvalidCharacter("my_app", "_").description
                == "service type \"my_app\": character \"_\" is not allowed; RFC 6335 section 5.1 allows only "
                + "ASCII letters, digits and hyphens")
        #expect(ServiceValidationError.serviceTypeTooLong("x", length: 16).description.contains("at most 15"))
        #expect(ServiceValidationError.serviceTypeNoLetter("1").description.contains("at least one"))
        #expect(ServiceValidationError.serviceTypeHyphenPlacement("-a").description.contains("adjacent hyphens"))
        #expect(ServiceValidationError.serviceTypeEmpty.description.contains("RFC 6335"))
    }
}

@Suite struct InstanceNameTests {
    @Test(arguments: ["Peer", "My Mac.local (2)", "Pièce de résistance", String(repeating: "a", count: 63), "🙂"])
    func validNames(_ name: String) throws {
        try InstanceName.validate(name)
    }

    @Test func rules() {
        #expect(throws: ServiceValidationError.instanceNameEmpty) { try InstanceName.validate("") }
        let long = String(repeating: "é", count: 32)
        #expect(throws: ServiceValidationError.instanceNameTooLong(long, bytes: 64)) {
            try InstanceName.validate(long)
        }
        #expect(throws: ServiceValidationError.self) { try InstanceName.validate("bell\u{7}") }
        do {
            try InstanceName.validate("tab\there")
            Issue.record("accepted a control character")
        } catch {
            #expect(error.description.contains("U+0009"))
            #expect(error.description.contains("RFC 6763 section 4.1.1"))
        }
        #expect(throws: ServiceValidationError.self) { try InstanceName.validate("del\u{7f}") }
    }
}
