import Testing

@testable import MulticastDNS

@Suite("Host name claim")
struct HostNameClaimTests {
    @Test("renames count up from the label first asked for (RFC 6762 section 9)")
    func renamesCountUp() throws {
        var host = try HostNameClaim(label: "host-a")
        #expect(host.name == (try DNSName("host-a.local.")))
        host.takeNextName()
        #expect(host.name == (try DNSName("host-a-2.local.")))
        host.takeNextName()
        #expect(host.name == (try DNSName("host-a-3.local.")))
    }

    @Test("a label of 63 bytes is shortened so the renamed one is still valid")
    func longLabelIsShortened() throws {
        var host = try HostNameClaim(label: String(repeating: "h", count: 63))
        host.takeNextName()
        #expect(host.name == (try DNSName(labels: [String(repeating: "h", count: 61) + "-2", "local"])))
    }

    @Test("an invalid label is refused")
    func invalidLabel() {
        #expect(throws: DNSNameError.self) { try HostNameClaim(label: String(repeating: "h", count: 64)) }
    }
}
