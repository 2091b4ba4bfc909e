/// The loop's pending timers: a binary min-heap ordered by deadline, then by scheduling order.
///
/// Cancelled timers are removed from `work` at once and skipped lazily when they reach the top of the heap; the
/// heap is emptied whenever no live timer remains, so cancelled entries cannot pile up while the loop is idle.
///
/// No fixed limit: every timer belongs to an owner whose own state is bounded (one probe timer per record, one
/// timeout per pending invitation, one keepalive per connection), so the count is bounded by those limits. A cap
/// here could only refuse to schedule, which no caller could handle better.
struct TimerQueue {
    private struct Entry {
        var deadline: IOInstant
        var id: TimerID

        func precedes(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : id.rawValue < other.id.rawValue
        }
    }

    private var heap: [Entry] = []
    private var work: [TimerID: () -> Void] = [:]

    /// Number of live (not cancelled, not fired) timers.
    var count: Int { work.count }

    mutating func insert(_ id: TimerID, deadline: IOInstant, _ body: @escaping () -> Void) {
        work[id] = body
        heap.append(Entry(deadline: deadline, id: id))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].precedes(heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    mutating func cancel(_ id: TimerID) {
        work[id] = nil
        if work.isEmpty { heap.removeAll(keepingCapacity: true) }
    }

    /// The earliest live deadline, discarding cancelled entries on the way.
    mutating func nextDeadline() -> IOInstant? {
        while let top = heap.first {
            if work[top.id] != nil { return top.deadline }
            popTop()
        }
        return nil
    }

    /// Removes and returns the earliest timer if it is due at `now` and was scheduled no later than `maxID`.
    mutating func popDue(now: IOInstant, maxID: UInt64) -> (() -> Void)? {
        while let top = heap.first {
            guard let body = work[top.id] else {
                popTop()
                continue
            }
            guard top.deadline <= now, top.id.rawValue <= maxID else { return nil }
            popTop()
            work[top.id] = nil
            return body
        }
        return nil
    }

    mutating func removeAll() {
        heap.removeAll()
        work.removeAll()
    }

    private mutating func popTop() {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var best = parent
            if left < heap.count, heap[left].precedes(heap[best]) { best = left }
            if right < heap.count, heap[right].precedes(heap[best]) { best = right }
            if best == parent { return }
            heap.swapAt(parent, best)
            parent = best
        }
    }
}
