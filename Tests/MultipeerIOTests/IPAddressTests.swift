import MultipeerIO
import Testing

@Suite struct IPAddressTests {
    @Test(arguments: ["0.0.0.0", "127.0.0.1", "192.0.2.1", "224.0.0.251", "255.255.255.255"])
    func ipv4RoundTrips(_ text: String) throws {
        let address = try #require(IPv4Address(text))
        #expect(address.description == text)
        #expect(IPv4Address(value: address.value) == address)
    }

    @Test(arguments: [
        "", "1.2.3", "1.2.3.4.5", "256.0.0.1", "1.2.3.-4", "01234.1.1.1", "a.b.c.d", "1..2.3", " 1.2.3.4",
    ])
    func ipv4RejectsInvalid(_ text: String) {
        #expect(IPv4Address(text) == nil)
    }

    @Test(arguments: [
        "::", "::1", "fe80::1", "ff02::fb", "2001:db8::1:0:0:1", "2001:db8:0:1:1:1:1:1", "1:2:3:4:5:6:7:8",
    ])
    func ipv6CanonicalFormsRoundTrip(_ text: String) throws {
        let address = try #require(IPv6Address(text))
        #expect(address.description == text)
        #expect(IPv6Address(address.description) == address)
    }

    @Test func ipv6NormalisesToRFC5952() throws {
        #expect(try #require(IPv6Address("2001:DB8:0:0:0:0:0:1")).description == "2001:db8::1")
        #expect(try #require(IPv6Address("0:0:0:0:0:0:0:0")).description == "::")
        #expect(try #require(IPv6Address("2001:db8:0:0:1:0:0:1")).description == "2001:db8::1:0:0:1")
    }

    @Test func ipv4MappedParses() throws {
        let mapped = try #require(IPv6Address("::ffff:1.2.3.4"))
        #expect(mapped.byteArray == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4])
        #expect(mapped.description == "::ffff:1.2.3.4")
        #expect(IPv6Address("::ffff:102:304") == mapped)
        #expect(IPv6Address(mapped.description) == mapped)
    }

    @Test(arguments: [
        "", ":", ":::", "1::2::3", "12345::", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", "fe80::1%eth0", "g::1",
        "::ffff:1.2.3", "1.2.3.4::",
    ])
    func ipv6RejectsInvalid(_ text: String) {
        #expect(IPv6Address(text) == nil)
    }

    @Test func ipAddressPicksFamily() {
        #expect(IPAddress("10.0.0.1") == .v4(IPv4Address(10, 0, 0, 1)))
        #expect(IPAddress("::1") == .v6(.loopback))
        #expect(IPAddress("nonsense") == nil)
        #expect(IPAddress("127.0.0.1")?.isLoopback == true)
        #expect(IPAddress("fe80::1")?.isLinkLocal == true)
    }
}
