/// The flow-control credit held by messages delivered to the application and not taken by it yet, in delivery
/// order: the application takes messages in that order, so it only needs to report how many it took.
///
/// A message's credit (``FlowController/messageCost(length:)``) goes back to the peer only when the application
/// takes it, so what a peer makes this side hold in messages is bounded by the receive windows however slowly
/// the application reads.
struct DeliveredMessages {
    private var entries: [(channel: UInt32, cost: Int)] = []
    private var head = 0
    /// Per channel, the credit its delivered messages hold (what a forgotten channel still owes the window).
    private(set) var heldByChannel: [UInt32: Int] = [:]

    /// The number of messages delivered and not taken.
    var count: Int { entries.count - head }

    /// A message of `cost` arrived on `channel` and was handed to the application.
    mutating func delivered(channel: UInt32, cost: Int) {
        entries.append((channel, cost))
        heldByChannel[channel, default: 0] += cost
    }

    /// The application took the next `count` messages.
    /// - Returns: The credit they held, per channel.
    mutating func taken(_ count: Int) -> [(channel: UInt32, cost: Int)] {
        let end = min(entries.count, head + max(0, count))
        var released: [(channel: UInt32, cost: Int)] = []
        for index in head..<end {
            let (channel, cost) = entries[index]
            if let last = released.last, last.channel == channel {
                released[released.count - 1].cost += cost
            } else {
                released.append((channel, cost))
            }
            let held = (heldByChannel[channel] ?? 0) - cost
            heldByChannel[channel] = held > 0 ? held : nil
        }
        head = end
        // Compacted as it is read: the taken entries are dropped once they are half the storage.
        if head == entries.count {
            entries.removeAll(keepingCapacity: entries.count <= 4096)
            head = 0
        } else if head >= 64 && head * 2 >= entries.count {
            entries.removeSubrange(0..<head)
            head = 0
        }
        return released
    }
}
