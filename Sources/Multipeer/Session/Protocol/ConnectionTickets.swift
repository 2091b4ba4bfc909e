/// The connection tickets a session issued (``Session/connectionData(for:)``): each for one peer, good once,
/// withdrawn when the peer becomes a member, when the application cancels, or when too many are out.
struct ConnectionTickets {
    /// The most tickets held; issuing more forgets the oldest (an application issuing data for every peer it sees
    /// cannot make the session hold more).
    static let limit = 64

    private var owners: [[UInt8]: PeerFingerprint] = [:]
    private var order: [[UInt8]] = []

    var isEmpty: Bool { owners.isEmpty }

    /// Records a new ticket for `peer`, forgetting the oldest beyond the limit.
    mutating func issue(_ ticket: [UInt8], for peer: PeerFingerprint) {
        order.removeAll { owners[$0] == nil }
        while order.count >= Self.limit { owners[order.removeFirst()] = nil }
        owners[ticket] = peer
        order.append(ticket)
    }

    /// Whom the ticket was issued for, if it is held.
    func owner(of ticket: [UInt8]) -> PeerFingerprint? { owners[ticket] }

    /// Uses the ticket up.
    mutating func spend(_ ticket: [UInt8]) { owners[ticket] = nil }

    /// Withdraws every ticket issued for `peer`.
    mutating func withdraw(for peer: PeerFingerprint) {
        guard owners.values.contains(peer) else { return }
        owners = owners.filter { $0.value != peer }
    }
}
