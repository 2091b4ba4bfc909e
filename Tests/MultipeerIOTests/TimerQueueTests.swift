import Testing

@testable import MultipeerIO

/// The event loop's timer queue on its own: order, cancellation, and what cancelled timers may cost.
struct TimerQueueTests {
    private func at(_ seconds: UInt64) -> IOInstant { IOInstant(nanoseconds: seconds * 1_000_000_000) }

    @Test func dueTimersPopInDeadlineThenSchedulingOrderAndNotBeforeTheirTime() {
        var queue = TimerQueue()
        var fired: [Int] = []
        for (id, second) in [(1, 5), (2, 3), (3, 3), (4, 1)] {
            queue.insert(TimerID(rawValue: UInt64(id)), deadline: at(UInt64(second))) { fired.append(id) }
        }
        #expect(queue.nextDeadline() == at(1))
        while let body = queue.popDue(now: at(3), maxID: .max) { body() }
        #expect(fired == [4, 2, 3])
        #expect(queue.popDue(now: at(4), maxID: .max) == nil)
        #expect(queue.count == 1 && queue.nextDeadline() == at(5))
    }

    @Test func timersScheduledAfterMaxIDWaitForTheNextRound() {
        var queue = TimerQueue()
        queue.insert(TimerID(rawValue: 7), deadline: at(0)) {}
        #expect(queue.popDue(now: at(1), maxID: 6) == nil)
        #expect(queue.popDue(now: at(1), maxID: 7) != nil)
    }

    @Test func cancelledTimersNeverFireAndCancellingTwiceOrUnknownIsHarmless() {
        var queue = TimerQueue()
        var fired: [Int] = []
        queue.insert(TimerID(rawValue: 1), deadline: at(1)) { fired.append(1) }
        queue.insert(TimerID(rawValue: 2), deadline: at(2)) { fired.append(2) }
        queue.cancel(TimerID(rawValue: 1))
        queue.cancel(TimerID(rawValue: 1))
        queue.cancel(TimerID(rawValue: 99))
        #expect(queue.nextDeadline() == at(2))
        while let body = queue.popDue(now: at(10), maxID: .max) { body() }
        #expect(fired == [2])
        #expect(queue.count == 0 && queue.storedEntries == 0)
    }

    @Test func cancelledTimersBesideALongLivedOneDoNotPileUp() {
        // A keepalive an hour away while per-packet timeouts are set and cancelled: before, every cancelled entry
        // stayed in the heap until its own deadline reached the top.
        var queue = TimerQueue()
        queue.insert(TimerID(rawValue: 0), deadline: at(3_600)) {}
        for id in 1...100_000 {
            queue.insert(TimerID(rawValue: UInt64(id)), deadline: at(3_600 + UInt64(id))) {}
            queue.cancel(TimerID(rawValue: UInt64(id)))
            #expect(queue.storedEntries <= 2 * queue.count + 65, "at \(id)")
            if queue.storedEntries > 2 * queue.count + 65 { return }
        }
        #expect(queue.count == 1 && queue.nextDeadline() == at(3_600))
    }
}
