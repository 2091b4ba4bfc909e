/// What one connection's unreliable-message path received: packets that carried the connection's receive id,
/// and what became of them. A flood of forged or replayed datagrams shows up here, per connection, while the
/// genuine ones keep arriving.
///
/// `received` is the sum of `delivered` and the `dropped…` counts. Packets that could not be attributed to a
/// connection (malformed, or carrying an unknown receive id) are not counted here. A delivered datagram can
/// still be dropped later because the application reads too slowly; ``PeerConnection/droppedDatagrams``
/// counts those.
public struct DatagramStatistics: Hashable, Sendable {
    /// Packets that arrived carrying this connection's receive id.
    public var received = 0
    /// Packets that authenticated and were handed to the connection.
    public var delivered = 0
    /// Dropped: failed authentication (forged, tampered with, or sealed with other keys).
    public var droppedAuthentication = 0
    /// Dropped: the counter was already delivered (a replay, or a duplicate made by the network).
    public var droppedReplay = 0
    /// Dropped: the counter was too far behind the newest delivered one for the replay window to tell.
    public var droppedTooOld = 0
    /// Dropped: the counter belongs to a key generation beyond the next one, whose keys are not derived on the
    /// say-so of an unauthenticated packet.
    public var droppedTooFarAhead = 0

    /// All zeros.
    public init() {}
}
