internal import MultipeerIO

/// The ``DatagramStatistics`` of one connection, counted on its loop thread by its ``DatagramOpener`` and read
/// from any thread by ``PeerConnection/datagramStatistics``.
///
/// A lock rather than one atomic per field, so a reader never sees `received` disagree with the sum of the
/// outcomes; it is taken once per received packet, uncontended but for the occasional reader.
final class DatagramCounters: Sendable {
    private let state = Lock(DatagramStatistics())

    /// Creates counters at zero.
    init() {}

    /// The counts so far.
    var snapshot: DatagramStatistics { state.withLock { $0 } }

    /// Counts one received packet and what became of it.
    /// - Parameter outcome: nil when it was delivered, else why it was dropped.
    func count(_ outcome: DatagramRejection?) {
        state.withLock { statistics in
            switch outcome {
            case nil: statistics.delivered += 1
            case .authenticationFailed: statistics.droppedAuthentication += 1
            case .replayed: statistics.droppedReplay += 1
            case .tooOld: statistics.droppedTooOld += 1
            case .tooFarAhead: statistics.droppedTooFarAhead += 1
            case .malformed, .unknownReceiver: return  // not attributable to a connection
            }
            statistics.received += 1
        }
    }
}
