import Glibc
import MultipeerIO
import Testing

@testable import Multipeer

/// A plain UDP socket on 127.0.0.1 that sends whatever it is given, as an attacker on the same host would.
private final class RawUDPSender {
    let fd: Int32

    init() throws {
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        try #require(fd >= 0)
    }

    deinit { close(fd) }

    /// Sends `bytes` to 127.0.0.1:`port`; true if the kernel took them.
    func send(_ bytes: [UInt8], toPort port: UInt16) -> Bool {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let sent = bytes.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buffer.baseAddress, buffer.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        return sent == bytes.count
    }
}

@Suite("Datagram floods against a connection", .serialized)
struct DatagramFloodTests {
    @Test func forgedDatagramsAreCountedPerConnectionWhileGenuineOnesArrive() async throws {
        let peers = try await LoopbackPeers(TestPeers.configuration(TestPeers.bob, .required))
        defer { peers.shutdown() }
        let dialer = try await peers.connect(TestPeers.configuration(TestPeers.ada, .required), expecting: nil)
        let acceptor = try await peers.accepted()
        #expect(dialer.datagramStatistics == DatagramStatistics())
        // Where the dialer's datagrams arrive, and the receive id its packets carry: what an attacker on the path
        // sees in every packet header.
        let driver = dialer.driver
        let target = try await dialer.eventLoop.submit { () -> (port: UInt16, receiverID: UInt64)? in
            guard let port = driver.core.localDatagramPort, let path = driver.core.datagramPath else { return nil }
            return (port, path.keys.receiving.receiverID)
        }
        let (port, receiverID) = try #require(target)

        let attacker = try RawUDPSender()
        var random = SplitMix64(seed: 0x666c_6f6f_64)
        func forged(counter: UInt64) -> [UInt8] {
            var header = [UInt8](repeating: 0, count: DatagramFormat.headerLength)
            header.withUnsafeMutableBytes { DatagramHeader(receiverID: receiverID, counter: counter).write(to: $0) }
            return header + random.bytes(64 + DatagramFormat.tagLength)
        }
        let rounds = 12
        let forgedPerRound = 100
        let farAheadPerRound = 10
        var honest: [[UInt8]] = []
        var expected = DatagramStatistics()
        for round in 0..<rounds {
            // Counters ahead of anything genuine, in the current generation: each costs a decryption and fails.
            for index in 0..<forgedPerRound {
                let sent = attacker.send(forged(counter: UInt64(10_000 + round * forgedPerRound + index)), toPort: port)
                #expect(sent)
            }
            // Counters generations ahead: dropped before any cryptography.
            for index in 0..<farAheadPerRound {
                let counter = UInt64(round * farAheadPerRound + index + 2) << DatagramFormat.generationShift
                let sent = attacker.send(forged(counter: counter), toPort: port)
                #expect(sent)
            }
            let message = Array("honest \(round)".utf8)
            honest.append(message)
            try await acceptor.sendUnreliable(message)
            expected.received += forgedPerRound + farAheadPerRound + 1
            expected.droppedAuthentication += forgedPerRound
            expected.droppedTooFarAhead += farAheadPerRound
            expected.delivered += 1
            // Paced: each round is read before the next, so the socket's buffer never overflows.
            let soFar = expected.received
            #expect(
                await eventually(within: .seconds(10)) { dialer.datagramStatistics.received >= soFar }, "round \(round)"
            )
        }
        #expect(dialer.datagramStatistics == expected)
        #expect(expected.droppedAuthentication + expected.droppedTooFarAhead >= 1_000)
        // Every honest message arrived, intact, and the connection goes on.
        var messages = dialer.messages.makeAsyncIterator()
        var received: [[UInt8]] = []
        while received.count < honest.count, let message = await messages.next() { received.append(message) }
        #expect(Set(received) == Set(honest))
        try await acceptor.send([0xEE])
        #expect(await messages.next() == [0xEE])
        // The flood was counted against the dialer's connection only.
        #expect(acceptor.datagramStatistics.received == 0)
        await dialer.close()
    }
}
