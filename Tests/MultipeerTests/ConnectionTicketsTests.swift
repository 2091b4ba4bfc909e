import Testing

@testable import Multipeer

@Suite("Connection tickets")
struct ConnectionTicketsTests {
    private static let limit = ConnectionTickets.limit

    private static func peer(_ fill: UInt8) -> PeerFingerprint {
        PeerFingerprint(bytes: [UInt8](repeating: fill, count: 32))!
    }

    private static func ticket(_ number: Int) -> [UInt8] { [UInt8(number >> 8), UInt8(number & 0xFF)] }

    @Test("beyond the limit the oldest tickets are forgotten; spent and withdrawn ones make room")
    func oldestTicketsAreForgotten() {
        var tickets = ConnectionTickets()
        #expect(tickets.isEmpty)
        for number in 0..<(Self.limit + 6) { tickets.issue(Self.ticket(number), for: Self.peer(UInt8(number % 2))) }
        #expect((0..<6).allSatisfy { tickets.owner(of: Self.ticket($0)) == nil })
        #expect(tickets.owner(of: Self.ticket(6)) == Self.peer(0))
        #expect(tickets.owner(of: Self.ticket(Self.limit + 5)) == Self.peer(1))
        // A spent ticket makes room: the next one forgets no other.
        tickets.spend(Self.ticket(10))
        #expect(tickets.owner(of: Self.ticket(10)) == nil)
        tickets.issue(Self.ticket(1000), for: Self.peer(3))
        #expect(tickets.owner(of: Self.ticket(6)) == Self.peer(0))
        // Withdrawing a peer's tickets removes all of them and no other.
        tickets.withdraw(for: Self.peer(0))
        let kept = (6..<(Self.limit + 6)).allSatisfy { number in
            tickets.owner(of: Self.ticket(number)) == (number % 2 == 0 ? nil : Self.peer(1))
        }
        #expect(kept)
        #expect(tickets.owner(of: Self.ticket(1000)) == Self.peer(3))
        // 33 are held: 31 more fit, and the one after forgets the oldest left (7).
        for number in 2000..<2031 { tickets.issue(Self.ticket(number), for: Self.peer(4)) }
        #expect(tickets.owner(of: Self.ticket(7)) == Self.peer(1))
        tickets.issue(Self.ticket(3000), for: Self.peer(4))
        #expect(tickets.owner(of: Self.ticket(7)) == nil)
        #expect(tickets.owner(of: Self.ticket(9)) == Self.peer(1))
        #expect(tickets.owner(of: Self.ticket(3000)) == Self.peer(4))
    }
}
