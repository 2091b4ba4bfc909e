import Dispatch
import Glibc
import MultipeerIO
import Testing

@Suite struct EventLoopTests {
    struct Boom: Error, Equatable {}

    @Test func executeRunsInSubmissionOrder() async throws {
        try await withLoop { loop in
            let order = Collector<Int>()
            for index in 0..<1000 { loop.execute { order.append(index) } }
            try await loop.submit {}
            #expect(order.values == Array(0..<1000))
        }
    }

    @Test func submitReturnsValuesAndRethrows() async throws {
        try await withLoop { loop in
            let product = try await loop.submit { 6 * 7 }
            #expect(product == 42)
            await #expect(throws: Boom.self) { try await loop.submit { throw Boom() } }
        }
    }

    @Test func inEventLoopIsTrueOnlyOnTheLoopThread() async throws {
        try await withLoop { loop in
            #expect(!loop.inEventLoop)
            let inside = try await loop.submit { loop.inEventLoop }
            #expect(inside)
        }
    }

    @Test func runIfIdleRunsOnTheCallingThreadAsTheLoop() async throws {
        try await withLoop { loop in
            try await loop.submit {}  // the loop is now going back to waiting for events
            var sameThread = false
            var inside = false
            let ran = await runWhenIdle(loop) { caller in
                sameThread = pthread_equal(pthread_self(), caller) != 0
                inside = loop.inEventLoop
            }
            #expect(ran && sameThread && inside)
            #expect(!loop.inEventLoop)
        }
    }

    @Test func runIfIdleDeclinesWhileTheLoopIsBusy() async throws {
        try await withLoop { loop in
            let started = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            loop.execute {
                started.signal()
                release.wait()
            }
            started.wait()
            var ran = false
            #expect(!loop.runIfIdle { ran = true })
            #expect(!ran)
            release.signal()
            try await loop.submit {}
        }
    }

    @Test func workAndTimersFromRunIfIdleWakeTheLoop() async throws {
        try await withLoop { loop in
            try await loop.submit {}
            let done = DispatchSemaphore(value: 0)
            // The loop waits without a timeout (no timers): a timer armed inline must wake it.
            #expect(await runWhenIdle(loop) { _ in loop.scheduleTimer(after: .milliseconds(5)) { done.signal() } })
            #expect(done.wait(timeout: .now() + 5) == .success)
            try await loop.submit {}
            #expect(await runWhenIdle(loop) { _ in loop.execute { done.signal() } })
            #expect(done.wait(timeout: .now() + 5) == .success)
        }
    }

    @Test func manualClockTimersFireInDeadlineOrderOnlyAfterAdvance() async throws {
        let clock = ManualClock()
        try await withLoop(clock: clock) { loop in
            let fired = Collector<String>()
            try await loop.submit {
                loop.scheduleTimer(after: .seconds(3)) { fired.append("3s") }
                loop.scheduleTimer(after: .seconds(1)) { fired.append("1s") }
                loop.scheduleTimer(at: clock.now() + .seconds(2)) { fired.append("2s") }
            }
            try await loop.submit {}
            #expect(fired.values.isEmpty)

            clock.advance(by: .milliseconds(1500))
            try await loop.submit {}  // work submitted after an advance runs after the timers it made due
            #expect(fired.values == ["1s"])

            clock.advance(by: .seconds(10))
            try await loop.submit {}
            #expect(fired.values == ["1s", "2s", "3s"])
        }
    }

    @Test func equalDeadlinesFireInSchedulingOrder() async throws {
        let clock = ManualClock()
        try await withLoop(clock: clock) { loop in
            let fired = Collector<Int>()
            try await loop.submit {
                for index in 0..<10 { loop.scheduleTimer(after: .seconds(1)) { fired.append(index) } }
            }
            clock.advance(by: .seconds(1))
            try await loop.submit {}
            #expect(fired.values == Array(0..<10))
        }
    }

    @Test func cancelledTimersDoNotFire() async throws {
        let clock = ManualClock()
        try await withLoop(clock: clock) { loop in
            let fired = Collector<String>()
            try await loop.submit {
                let doomed = loop.scheduleTimer(after: .seconds(1)) { fired.append("cancelled") }
                loop.scheduleTimer(after: .seconds(2)) { fired.append("kept") }
                loop.cancelTimer(doomed)
                loop.cancelTimer(doomed)  // cancelling twice is harmless
            }
            clock.advance(by: .seconds(5))
            try await loop.submit {}
            #expect(fired.values == ["kept"])
        }
    }

    @Test func timerReschedulingItselfAtZeroDelayDoesNotStarveTheLoop() async throws {
        let clock = ManualClock()
        try await withLoop(clock: clock) { loop in
            let ticks = Collector<Int>()
            try await loop.submit {
                func tick() {
                    ticks.append(1)
                    if ticks.count < 100 { loop.scheduleTimer(after: .zero, tick) }
                }
                loop.scheduleTimer(after: .zero, tick)
            }
            #expect(await eventually { ticks.count == 100 })
        }
    }

    @Test func monotonicClockTimerFiresAfterRealDelay() async throws {
        try await withLoop { loop in
            let fired = Collector<Duration>()
            try await loop.submit {
                let start = loop.clock.now()
                loop.scheduleTimer(after: .milliseconds(30)) { fired.append(loop.clock.now() - start) }
            }
            #expect(await eventually { fired.count == 1 })
            #expect(try #require(fired.values.first) >= .milliseconds(30))
        }
    }

    @Test func shutdownIsIdempotentAndRejectsLaterWork() async throws {
        let loop = try EventLoop()
        let ran = Collector<Int>()
        loop.execute { ran.append(1) }
        loop.shutdown()
        loop.shutdown()
        #expect(ran.values == [1])  // work submitted before shutdown still ran
        loop.execute { ran.append(2) }
        await #expect(throws: SystemCallError.self) { try await loop.submit { 1 } }
        #expect(ran.values == [1])
    }

    @Test func shutdownFromTheLoopThreadStopsTheLoop() async throws {
        let loop = try EventLoop()
        try await loop.submit { loop.shutdown() }
        loop.shutdown()
        await #expect(throws: SystemCallError.self) { try await loop.submit { 1 } }
    }

    @Test func shutdownClosesOwnedSockets() async throws {
        let first = try EventLoop()
        let address = try await first.submit {
            try TCPListener(loop: first, address: SocketAddress(.v4(.loopback), port: 0)).localAddress()
        }
        first.shutdown()
        // A listener that is still open completes a connection into its backlog; a closed one is refused.
        // (Binding the port again would also tell, but the port is free for any socket of a test running beside
        // this one to take meanwhile.)
        var target = loopbackSockaddr(port: address.port)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        let result = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        let code = errno
        #expect(result == -1 && code == ECONNREFUSED, "connect: \(result), errno \(code)")
    }
}

@Suite struct EventLoopTaskExecutorTests {
    @Test func tasksPreferringTheLoopRunOnItsThreadAcrossSuspensions() async throws {
        let loop = try EventLoop(name: "executor-test")
        defer { loop.shutdown() }
        let results = await Task(executorPreference: loop) { () -> [Bool] in
            var onLoop = [loop.inEventLoop]
            for _ in 0..<100 {
                await Task.yield()
                onLoop.append(loop.inEventLoop)
            }
            // A continuation resumed from the loop thread comes back on the loop thread.
            let fromLoop = await withCheckedContinuation { continuation in
                loop.execute { continuation.resume(returning: loop.inEventLoop) }
            }
            onLoop.append(fromLoop && loop.inEventLoop)
            return onLoop
        }.value
        #expect(results.count == 102)
        #expect(results.allSatisfy { $0 })
    }

    @Test func workQueuedFromTheLoopThreadRunsWithoutAWakeUp() async throws {
        let loop = try EventLoop(name: "executor-test")
        defer { loop.shutdown() }
        // 10,000 hops queued by the loop itself: each runs on a later iteration, none is lost.
        let count = try await loop.submit { () -> Int in 0 }
        #expect(count == 0)
        let hops = await withCheckedContinuation { (continuation: CheckedContinuation<Int, Never>) in
            final class Counter: @unchecked Sendable { var value = 0 }
            let counter = Counter()
            @Sendable func hop() {
                counter.value += 1
                if counter.value == 10_000 {
                    continuation.resume(returning: counter.value)
                } else {
                    loop.execute(hop)
                }
            }
            loop.execute(hop)
        }
        #expect(hops == 10_000)
    }
}

/// `loop.runIfIdle(work)` once the loop is idle, `work` given the thread of the try that ran it. Right after a
/// `submit` returns, the loop thread may not be back in its wait yet (on a loaded machine it can be kept from
/// running for a while), and `runIfIdle` declines until then: that is its contract, not what these tests check.
/// The task may resume on another thread after each pause, hence the thread per try.
private func runWhenIdle(_ loop: EventLoop, _ work: (_ caller: pthread_t) -> Void) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(30)
    while ContinuousClock.now < deadline {
        let caller = pthread_self()
        if loop.runIfIdle({ work(caller) }) { return true }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return false
}
