import MultipeerIO
import Testing

@Suite struct NetworkInterfacesTests {
    @Test func listsLoopbackWithItsAddress() throws {
        let interfaces = try NetworkInterfaces.current()
        let lo = try #require(interfaces.first { $0.isLoopback })
        #expect(lo.isUp)
        #expect(lo.addresses.contains(InterfaceAddress(address: .v4(.loopback), prefixLength: 8)))
        #expect(interfaces.map(\.index) == interfaces.map(\.index).sorted())
        #expect(Set(interfaces.map(\.index)).count == interfaces.count)
    }

    @Test func changesAreMatchedByIndex() {
        func interface(_ name: String, _ index: UInt32, up: Bool = true) -> NetworkInterface {
            NetworkInterface(
                name: name, index: index, isUp: up, isRunning: up, isLoopback: false, supportsMulticast: true,
                addresses: [])
        }
        let old = [interface("a", 1), interface("b", 2)]
        let new = [interface("a", 1, up: false), interface("c", 3)]
        let changes = InterfaceChanges.between(old, new)
        #expect(changes.added.map(\.name) == ["c"])
        #expect(changes.removed.map(\.name) == ["b"])
        #expect(changes.changed.map(\.name) == ["a"])
        #expect(changes.current == new)
        #expect(InterfaceChanges.between(new, new).isEmpty)
    }
}
