internal import MultipeerIO
internal import Synchronization

/// Counts of connection objects alive in this process, so tests can check that finished connections release
/// everything (a leak shows as a count that grows with every connection).
package enum LiveObjects {
    static let cores = Atomic<Int>(0)
    static let drivers = Atomic<Int>(0)
    static let connections = Atomic<Int>(0)

    /// ``ConnectionCore`` instances alive.
    package static var coreCount: Int { cores.load(ordering: .relaxed) }
    /// ``ConnectionDriver`` instances alive.
    package static var driverCount: Int { drivers.load(ordering: .relaxed) }
    /// ``PeerConnection`` instances alive.
    package static var connectionCount: Int { connections.load(ordering: .relaxed) }
}
