import MultipeerIO
import Testing

@Suite struct TCPListenerTests {
    @Test(arguments: [AddressFamily.ipv4, .ipv6])
    func portZeroPicksAFreePortAndAcceptsConnections(_ family: AddressFamily) async throws {
        let loopback: IPAddress = family == .ipv4 ? .v4(.loopback) : .v6(.loopback)
        try await withLoop { loop in
            let accepted = Collector<SocketAddress>()
            let connected = Collector<SocketAddress>()
            let address = try await loop.submit {
                let listener = try TCPListener(loop: loop, address: SocketAddress(loopback, port: 0))
                listener.setAcceptHandler { connection in
                    accepted.append(connection.remoteAddress)
                    connection.close()
                }
                return try listener.localAddress()
            }
            #expect(address.address == loopback)
            #expect(address.port != 0)
            try await loop.submit {
                TCPConnection.connect(to: address, loop: loop) { result in
                    if case .success(let connection) = result, connection.remoteAddress == address {
                        connected.append(connection.localAddress)
                    }
                }
            }
            #expect(await eventually { accepted.count == 1 && connected.count == 1 })
            #expect(accepted.values == connected.values)
        }
    }
}
