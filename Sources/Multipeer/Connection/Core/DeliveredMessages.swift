import DequeModule

/// The flow-control credit held by messages delivered to the application and not taken by it yet, in delivery
/// order: the application takes messages in that order, so it only needs to report how many it took.
///
/// A message's credit (``FlowController/messageCost(length:)``) goes back to the peer only when the application
/// takes it, so what a peer makes this side hold in messages is bounded by the receive windows however slowly
/// the application reads. Per message this costs a deque append and a comparison (messages of one channel
/// share a run), which matters at a million messages a second.
struct DeliveredMessages {
    /// Each message's cost, oldest first, taken ones removed.
    private var costs: Deque<Int> = []
    /// Consecutive messages of one channel, oldest first: the channel and how many of `costs` (in order) belong to
    /// it. The first run's count shrinks as messages are taken.
    private var runs: Deque<(channel: UInt32, count: Int)> = []
    /// Whether `costs` held more than ``retainedCapacity`` entries since it was last empty: then the storage is
    /// released when everything is taken (a `Deque` keeps its storage otherwise, and cannot say how large it is).
    private var grewLarge = false

    /// Messages whose storage is kept once everything is taken; after a larger burst it is released.
    static let retainedCapacity = 4096

    /// The number of messages delivered and not taken.
    var count: Int { costs.count }

    /// A message of `cost` arrived on `channel` and was handed to the application.
    mutating func delivered(channel: UInt32, cost: Int) {
        costs.append(cost)
        if costs.count > Self.retainedCapacity { grewLarge = true }
        if let last = runs.indices.last, runs[last].channel == channel {
            runs[last].count += 1
        } else {
            runs.append((channel, 1))
        }
    }

    /// The application took the next `count` messages.
    /// - Returns: The credit they held, per channel run.
    mutating func taken(_ count: Int) -> [(channel: UInt32, cost: Int)] {
        var remaining = min(max(0, count), self.count)
        var released: [(channel: UInt32, cost: Int)] = []
        while remaining > 0 {
            let run = runs[0]
            let take = min(run.count, remaining)
            var cost = 0
            for _ in 0..<take { cost += costs.removeFirst() }
            released.append((run.channel, cost))
            remaining -= take
            if take == run.count {
                runs.removeFirst()
            } else {
                runs[0].count -= take
            }
        }
        if costs.isEmpty && grewLarge {
            costs = []
            runs = []
            grewLarge = false
        }
        return released
    }

    /// The credit the delivered messages of `channel` hold (what a forgotten channel still owes the window).
    /// Walks every message not taken: only needed when a channel is forgotten.
    func held(by channel: UInt32) -> Int {
        var total = 0
        var index = 0
        for run in runs {
            if run.channel == channel {
                for position in index..<index + run.count { total += costs[position] }
            }
            index += run.count
        }
        return total
    }

    /// The credit all delivered messages hold.
    var totalHeld: Int { costs.reduce(0, +) }
}
