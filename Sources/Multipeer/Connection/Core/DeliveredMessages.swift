/// The flow-control credit held by messages delivered to the application and not taken by it yet, in delivery
/// order: the application takes messages in that order, so it only needs to report how many it took.
///
/// A message's credit (``FlowController/messageCost(length:)``) goes back to the peer only when the application
/// takes it, so what a peer makes this side hold in messages is bounded by the receive windows however slowly
/// the application reads. Per message this costs an array append and a comparison (messages of one channel
/// share a run), which matters at a million messages a second.
struct DeliveredMessages {
    /// Each message's cost, oldest first; `costs[head...]` are not taken yet.
    private var costs: [Int] = []
    private var head = 0
    /// Consecutive messages of one channel: the channel and how many of `costs` (from `runHead`'s position on)
    /// belong to it. The first run's count shrinks as messages are taken.
    private var runs: [(channel: UInt32, count: Int)] = []
    private var runHead = 0

    /// The number of messages delivered and not taken.
    var count: Int { costs.count - head }

    /// A message of `cost` arrived on `channel` and was handed to the application.
    mutating func delivered(channel: UInt32, cost: Int) {
        costs.append(cost)
        if runHead < runs.count, runs[runs.count - 1].channel == channel {
            runs[runs.count - 1].count += 1
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
            let run = runs[runHead]
            let take = min(run.count, remaining)
            var cost = 0
            for index in head..<head + take { cost += costs[index] }
            released.append((run.channel, cost))
            head += take
            remaining -= take
            if take == run.count {
                runHead += 1
            } else {
                runs[runHead].count -= take
            }
        }
        compact()
        return released
    }

    /// The credit the delivered messages of `channel` hold (what a forgotten channel still owes the window).
    /// Walks every message not taken: only needed when a channel is forgotten.
    func held(by channel: UInt32) -> Int {
        var total = 0
        var index = head
        for run in runs[runHead...] {
            if run.channel == channel {
                for position in index..<index + run.count { total += costs[position] }
            }
            index += run.count
        }
        return total
    }

    /// Entries kept, taken ones included (for tests of the storage bound).
    var storage: Int { costs.count }

    /// The credit all delivered messages hold.
    var totalHeld: Int { costs[head...].reduce(0, +) }

    /// Drops what was taken once it is half the storage (or all of it), so the storage stays within twice what
    /// is not taken.
    private mutating func compact() {
        if head == costs.count {
            costs.removeAll(keepingCapacity: costs.count <= 4096)
            runs.removeAll(keepingCapacity: true)
            head = 0
            runHead = 0
        } else if head >= 64 && head * 2 >= costs.count {
            costs.removeSubrange(0..<head)
            runs.removeSubrange(0..<runHead)
            head = 0
            runHead = 0
        }
    }
}
