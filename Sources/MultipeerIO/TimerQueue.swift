import HeapModule

/// The loop's pending timers: a heap (swift-collections' `Heap`) ordered by deadline, then by scheduling order.
///
/// Cancelled timers are removed from `work` at once and skipped lazily when they reach the top of the heap. They
/// cannot pile up: the heap is emptied whenever no live timer remains, and rebuilt from the live ones when cancelled
/// entries outnumber them (one long timer kept while short ones are set and cancelled by the thousand, as a
/// keepalive beside per-packet timeouts, would otherwise keep every cancelled entry until its own deadline).
///
/// No fixed limit: every timer belongs to an owner whose own state is bounded (one probe timer per record, one
/// timeout per pending invitation, one keepalive per connection), so the count is bounded by those limits. A cap
/// here could only refuse to schedule, which no caller could handle better.
struct TimerQueue {
    private struct Entry: Comparable {
        var deadline: IOInstant
        var id: TimerID

        /// Earlier deadline first; equal deadlines in scheduling order (ids only grow), so no two entries tie.
        static func < (left: Entry, right: Entry) -> Bool {
            left.deadline != right.deadline ? left.deadline < right.deadline : left.id.rawValue < right.id.rawValue
        }
    }

    private var heap = Heap<Entry>()
    private var work: [TimerID: () -> Void] = [:]

    /// Number of live (not cancelled, not fired) timers.
    var count: Int { work.count }

    /// Entries the heap holds, live and cancelled (for the tests of the bound).
    var storedEntries: Int { heap.count }

    mutating func insert(_ id: TimerID, deadline: IOInstant, _ body: @escaping () -> Void) {
        work[id] = body
        heap.insert(Entry(deadline: deadline, id: id))
    }

    mutating func cancel(_ id: TimerID) {
        guard work.removeValue(forKey: id) != nil else { return }
        if work.isEmpty {
            heap = Heap()
        } else if heap.count > 2 * work.count + 64 {
            // Rebuilt in O(n) when at least half is cancelled: amortized O(1) per cancel.
            let work = work
            heap = Heap(heap.unordered.filter { work[$0.id] != nil })
        }
    }

    /// The earliest live deadline, discarding cancelled entries on the way.
    mutating func nextDeadline() -> IOInstant? {
        while let top = heap.min {
            if work[top.id] != nil { return top.deadline }
            heap.removeMin()
        }
        return nil
    }

    /// Removes and returns the earliest timer if it is due at `now` and was scheduled no later than `maxID`.
    mutating func popDue(now: IOInstant, maxID: UInt64) -> (() -> Void)? {
        while let top = heap.min {
            guard let body = work[top.id] else {
                heap.removeMin()
                continue
            }
            guard top.deadline <= now, top.id.rawValue <= maxID else { return nil }
            heap.removeMin()
            work[top.id] = nil
            return body
        }
        return nil
    }

    mutating func removeAll() {
        heap = Heap()
        work.removeAll()
    }
}
