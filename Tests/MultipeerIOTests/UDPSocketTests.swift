import Glibc
import MultipeerIO
import TestIsolation
import Testing

@Suite struct UDPSocketTests {
    @Test(arguments: [AddressFamily.ipv4, .ipv6])
    func loopbackSendReceiveReportsSourceDestinationAndInterface(_ family: AddressFamily) async throws {
        let loopback: IPAddress = family == .ipv4 ? .v4(.loopback) : .v6(.loopback)
        let lo = try loopbackIndex()
        try await withLoop { loop in
            let received = Collector<UDPDatagram>()
            let (sender, receiver, senderAddress, receiverAddress) = try await loop.submit {
                let receiver = try UDPSocket(family: family, loop: loop)
                try receiver.bind(to: SocketAddress(loopback, port: 0))
                receiver.setReceiveHandler { received.append($0) }
                let sender = try UDPSocket(family: family, loop: loop)
                try sender.bind(to: SocketAddress(loopback, port: 0))
                return (sender, receiver, try sender.localAddress(), try receiver.localAddress())
            }
            #expect(receiverAddress.port != 0)
            let accepted = try await loop.submit { try sender.send(Array("hello".utf8), to: receiverAddress) }
            #expect(accepted)
            #expect(await eventually { received.count == 1 })
            let datagram = try #require(received.values.first)
            #expect(datagram.bytes == Array("hello".utf8))
            #expect(datagram.source == senderAddress)
            #expect(datagram.destination == loopback)
            #expect(datagram.interfaceIndex == lo)
            #expect(!datagram.truncated)
            try await loop.submit {
                sender.close()
                receiver.close()
            }
        }
    }

    @Test func largeDatagramArrivesWhole() async throws {
        try await withLoop { loop in
            let received = Collector<UDPDatagram>()
            let payload = (0..<60_000).map { UInt8(truncatingIfNeeded: $0) }
            try await loop.submit {
                let receiver = try UDPSocket(family: .ipv4, loop: loop)
                try receiver.bind(to: SocketAddress(.v4(.loopback), port: 0))
                receiver.setReceiveHandler { received.append($0) }
                let sender = try UDPSocket(family: .ipv4, loop: loop)
                try sender.send(payload, to: try receiver.localAddress(), interfaceIndex: try loopbackIndex())
            }
            #expect(await eventually { received.count == 1 })
            #expect(byteDifference(received.values.first?.bytes ?? [], payload) == nil)
            #expect(received.values.first?.truncated == false)
        }
    }

    @Test func floodingASmallBufferDropsWithoutThrowing() async throws {
        try await withLoop { loop in
            let options = {
                var options = UDPSocket.Options()
                options.receiveBufferSize = 4096
                return options
            }()
            let (sent, dropped) = try await loop.submit { () -> (Int, Int) in
                // No receive handler: the receiver's buffer fills and the kernel starts dropping or pushing back.
                let receiver = try UDPSocket(family: .ipv4, loop: loop, options: options)
                try receiver.bind(to: SocketAddress(.v4(.loopback), port: 0))
                let destination = try receiver.localAddress()
                let sender = try UDPSocket(family: .ipv4, loop: loop)
                var sent = 0
                var dropped = 0
                for _ in 0..<5_000 {
                    if try sender.send([UInt8](repeating: 7, count: 1_200), to: destination) {
                        sent += 1
                    } else {
                        dropped += 1
                    }
                }
                return (sent, dropped)
            }
            #expect(sent + dropped == 5_000)
        }
    }

    @Test func closedSocketThrowsEBADF() async throws {
        try await withLoop { loop in
            let error = try await loop.submit { () -> SystemCallError? in
                let socket = try UDPSocket(family: .ipv4, loop: loop)
                socket.close()
                socket.close()
                do {
                    try socket.send([1], to: SocketAddress(.v4(.loopback), port: 9))
                    return nil
                } catch let error as SystemCallError {
                    return error
                }
            }
            #expect(error?.errno == EBADF)
        }
    }

    @Test(
        .enabled(if: NetworkNamespace.isAvailable, "needs root and iproute2 to create a private network namespace"))
    func ipv4MulticastLoopsBackOnLoopbackInsideANamespace() async throws {
        try await withNamespace { _, loop in
            let received = Collector<UDPDatagram>()
            let group = IPAddress.v4(.mdnsGroup)
            let (port, lo) = try await loop.submit { () -> (UInt16, UInt32) in
                let lo = try loopbackIndex()
                var options = UDPSocket.Options()
                options.reuseAddress = true
                options.reusePort = true
                let socket = try UDPSocket(family: .ipv4, loop: loop, options: options)
                try socket.bind(to: SocketAddress(.v4(.any), port: 0))
                try socket.joinMulticastGroup(group, interfaceIndex: lo)
                socket.setReceiveHandler { received.append($0) }
                let port = try socket.localAddress().port
                try socket.send(Array("mdns".utf8), to: SocketAddress(group, port: port), interfaceIndex: lo)
                return (port, lo)
            }
            #expect(await eventually { received.count >= 1 })
            let datagram = try #require(received.values.first)
            #expect(datagram.bytes == Array("mdns".utf8))
            #expect(datagram.destination == group)
            #expect(datagram.source.port == port)
            #expect(datagram.interfaceIndex == lo)
        }
    }

    /// Linux does not loop IPv6 multicast over `lo`, so this uses a veth pair inside the namespace: a datagram
    /// sent on one end arrives twice, looped back on the sending interface and across the pair on the other.
    @Test(
        .enabled(if: NetworkNamespace.isAvailable, "needs root and iproute2 to create a private network namespace"))
    func ipv6MulticastReportsTheArrivalInterfaceInsideANamespace() async throws {
        try await withNamespace { namespace, loop in
            try namespace.ip(["link", "add", "mv0", "type", "veth", "peer", "name", "mv1"])
            for (name, address) in [("mv0", "fe80::1/64"), ("mv1", "fe80::2/64")] {
                // No link-local address of the kernel's own beside ours: it could be chosen as the source.
                try namespace.ip(["link", "set", name, "addrgenmode", "none"])
                try namespace.ip(["link", "set", name, "up"])
                try namespace.ip(["-6", "addr", "add", address, "dev", name, "nodad"])
            }
            let received = Collector<UDPDatagram>()
            let group = IPAddress.v6(.mdnsGroup)
            let (port, sending, receiving) = try await loop.submit { () -> (UInt16, UInt32, UInt32) in
                let interfaces = try NetworkInterfaces.current()
                let indices = ["mv0", "mv1"].compactMap { name in interfaces.first { $0.name == name }?.index }
                guard indices.count == 2 else { throw SystemCallError(call: "if_nametoindex", errno: ENODEV) }
                let socket = try UDPSocket(family: .ipv6, loop: loop)
                try socket.bind(to: SocketAddress(.v6(.any), port: 0))
                for index in indices { try socket.joinMulticastGroup(group, interfaceIndex: index) }
                socket.setReceiveHandler { received.append($0) }
                let port = try socket.localAddress().port
                try socket.send(Array("mdns6".utf8), to: SocketAddress(group, port: port), interfaceIndex: indices[0])
                return (port, indices[0], indices[1])
            }
            #expect(await eventually { received.count >= 2 })
            let datagrams = received.values
            #expect(Set(datagrams.map(\.interfaceIndex)) == [sending, receiving])
            for datagram in datagrams {
                #expect(datagram.bytes == Array("mdns6".utf8))
                #expect(datagram.destination == group)
                #expect(
                    datagram.source
                        == SocketAddress(IPAddress("fe80::1")!, port: port, scopeID: datagram.interfaceIndex))
            }
        }
    }
}
