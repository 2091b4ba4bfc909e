import MultipeerIO
import Testing

@testable import MulticastDNS

@Suite("Conflict rate limiter")
struct ConflictRateLimiterTests {
    let configuration = ResponderConfiguration()
    let start = IOInstant(nanoseconds: 1_000_000_000_000)

    @Test("the 15th conflict within 10 s brings a 5 s wait; once they leave the window, none")
    func backoffAfterTheLimit() {
        var limiter = ConflictRateLimiter()
        var now = start
        for _ in 1..<configuration.conflictLimit {
            #expect(limiter.delayAfterConflict(now: now, configuration: configuration) == .zero)
            now = now + .milliseconds(100)
        }
        #expect(limiter.delayAfterConflict(now: now, configuration: configuration) == .seconds(5))
        now = now + configuration.conflictWindow
        #expect(limiter.delayAfterConflict(now: now, configuration: configuration) == .zero)
    }

    @Test("conflicts spread out never bring the wait")
    func spreadOut() {
        var limiter = ConflictRateLimiter()
        for second in 0..<100 {
            let now = start + .seconds(Int64(second))
            #expect(limiter.delayAfterConflict(now: now, configuration: configuration) == .zero)
        }
    }

    @Test("a flood of conflicts keeps no more than the limit in memory, and keeps the wait")
    func floodIsBounded() {
        var limiter = ConflictRateLimiter()
        for step in 0..<10_000 {
            _ = limiter.delayAfterConflict(now: start + .microseconds(Int64(step)), configuration: configuration)
        }
        #expect(limiter.recent.count == configuration.conflictLimit)
        #expect(limiter.delayAfterConflict(now: start + .seconds(1), configuration: configuration) == .seconds(5))
    }
}
