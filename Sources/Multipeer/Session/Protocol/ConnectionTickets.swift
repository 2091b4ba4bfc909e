import OrderedCollections

/// The connection tickets a session issued (``Session/connectionData(for:)``): each for one peer, good once,
/// withdrawn when the peer becomes a member, when the application cancels, or when too many are out.
struct ConnectionTickets {
    /// The most tickets held; issuing more forgets the oldest (an application issuing data for every peer it sees
    /// cannot make the session hold more).
    static let limit = 64

    /// The tickets held and whom each was issued for, oldest first.
    private var owners: OrderedDictionary<[UInt8], PeerFingerprint> = [:]

    var isEmpty: Bool { owners.isEmpty }

    /// Records a new ticket for `peer`, forgetting the oldest beyond the limit.
    mutating func issue(_ ticket: [UInt8], for peer: PeerFingerprint) {
        while owners.count >= Self.limit { owners.removeFirst() }
        owners[ticket] = peer
    }

    /// Whom the ticket was issued for, if it is held.
    func owner(of ticket: [UInt8]) -> PeerFingerprint? { owners[ticket] }

    /// Uses the ticket up.
    mutating func spend(_ ticket: [UInt8]) { owners[ticket] = nil }

    /// Withdraws every ticket issued for `peer`.
    mutating func withdraw(for peer: PeerFingerprint) {
        owners.removeAll { $0.value == peer }
    }
}
