import MultipeerIO
import Testing

@Suite struct SocketAddressTests {
    @Test func describesBothFamilies() {
        #expect(SocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 5353).description == "192.0.2.1:5353")
        #expect(SocketAddress(IPAddress("fe80::1")!, port: 5353, scopeID: 2).description == "[fe80::1%2]:5353")
        #expect(SocketAddress(.v6(.loopback), port: 80).description == "[::1]:80")
    }

    @Test func instantArithmetic() {
        let start = IOInstant(nanoseconds: 5_000_000_000)
        #expect((start + .milliseconds(1500)).nanoseconds == 6_500_000_000)
        #expect((start - .seconds(1)).nanoseconds == 4_000_000_000)
        #expect(start + .seconds(2) - start == .seconds(2))
        #expect(start - (start + .seconds(2)) == .seconds(-2))
        #expect((start - .seconds(10)).nanoseconds == 0)
        #expect(start < start + .nanoseconds(1))
    }
}
