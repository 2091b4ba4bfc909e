import Foundation
import MultipeerIO
import Synchronization

/// `multipeer-bench lock`: the project's ``Lock`` (a POSIX mutex the thread sanitizer sees) against
/// `Synchronization.Mutex` (a futex it does not), alternating run by run in one process: a lock taken and released
/// by one thread, by two threads at once, and a lock made and freed.
enum LockBenchmark {
    /// One measurement: nanoseconds per operation for each lock.
    private struct Pair {
        var ours: [Double] = []
        var mutex: [Double] = []
    }

    static func run(_ options: BenchmarkOptions) {
        let operations = options.quick ? 2_000_000 : 10_000_000
        let creations = options.quick ? 200_000 : 1_000_000
        var single = Pair()
        var contended = Pair()
        var made = Pair()
        // Warm-up, not counted.
        _ = uncontendedOurs(operations / 10)
        _ = uncontendedMutex(operations / 10)
        for run in 0..<options.runs {
            // Alternate which goes first, so drift in the machine's load falls on both.
            if run.isMultiple(of: 2) {
                single.ours.append(uncontendedOurs(operations))
                single.mutex.append(uncontendedMutex(operations))
                contended.ours.append(contendedOurs(operations / 4))
                contended.mutex.append(contendedMutex(operations / 4))
                made.ours.append(createOurs(creations))
                made.mutex.append(createMutex(creations))
            } else {
                single.mutex.append(uncontendedMutex(operations))
                single.ours.append(uncontendedOurs(operations))
                contended.mutex.append(contendedMutex(operations / 4))
                contended.ours.append(contendedOurs(operations / 4))
                made.mutex.append(createMutex(creations))
                made.ours.append(createOurs(creations))
            }
        }
        print("multipeer-bench lock: \(options.runs) runs, alternating, \(machineDescription())")
        print("baseline: Synchronization.Mutex in the same runs; ns per operation, median (min-max), ratio ours/Mutex")
        for (label, pair) in [
            ("1 thread, lock+unlock+increment", single), ("2 threads at once, each lock+unlock+increment", contended),
            ("make and free a lock guarding an Int", made),
        ] {
            let ours = Summary(pair.ours)
            let mutex = Summary(pair.mutex)
            print(
                "\(label): Lock \(format(ours)), Mutex \(format(mutex)), ratio "
                    + String(format: "%.2f", ours.median / mutex.median))
            ResultLog.shared.add(
                ResultLog.Record(
                    label: label, ours: String(format: "%.1f ns", ours.median),
                    baseline: String(format: "%.1f ns", mutex.median), baselineName: "Synchronization.Mutex",
                    ratio: ours.median / mutex.median, runs: options.runs))
        }
    }

    private static func format(_ summary: Summary) -> String {
        String(format: "%.1f (%.1f-%.1f)", summary.median, summary.sorted.first ?? .nan, summary.sorted.last ?? .nan)
    }

    private static func nanoseconds(_ operations: Int, _ body: () -> Void) -> Double {
        let start = ContinuousClock.now
        body()
        let elapsed = ContinuousClock.now - start
        let (seconds, attoseconds) = elapsed.components
        return (Double(seconds) * 1e9 + Double(attoseconds) / 1e9) / Double(operations)
    }

    // One function per lock kind on purpose: a shared one taking the lock behind a closure or a protocol would
    // add a call to every operation on both sides and dilute the ratio being measured.

    private static func uncontendedOurs(_ operations: Int) -> Double {
        let lock = Lock(0)
        let result = nanoseconds(operations) {
            for _ in 0..<operations { lock.withLock { $0 &+= 1 } }
        }
        precondition(lock.withLock { $0 } == operations)
        return result
    }

    private static func uncontendedMutex(_ operations: Int) -> Double {
        let lock = Mutex(0)
        let result = nanoseconds(operations) {
            for _ in 0..<operations { lock.withLock { $0 &+= 1 } }
        }
        precondition(lock.withLock { $0 } == operations)
        return result
    }

    /// Two threads, each taking the lock `operations` times; nanoseconds per operation of either.
    private static func contended(_ operations: Int, _ increment: @escaping @Sendable () -> Void) -> Double {
        nanoseconds(operations * 2) {
            let done = DispatchGroup()
            for _ in 0..<2 {
                done.enter()
                Thread.detachNewThread {
                    for _ in 0..<operations { increment() }
                    done.leave()
                }
            }
            done.wait()
        }
    }

    private static func contendedOurs(_ operations: Int) -> Double {
        let lock = Lock(0)
        let result = contended(operations) { lock.withLock { $0 &+= 1 } }
        precondition(lock.withLock { $0 } == operations * 2)
        return result
    }

    private static func contendedMutex(_ operations: Int) -> Double {
        final class Box: Sendable { let lock = Mutex(0) }
        let box = Box()
        let result = contended(operations) { box.lock.withLock { $0 &+= 1 } }
        precondition(box.lock.withLock { $0 } == operations * 2)
        return result
    }

    /// Locks as the project makes them: a class holding one, made and freed.
    private static func createOurs(_ count: Int) -> Double {
        final class Holder: Sendable { let lock = Lock(0) }
        var total = 0
        let result = nanoseconds(count) {
            for index in 0..<count { total &+= Holder().lock.withLock { $0 &+ index } }
        }
        precondition(total >= 0)
        return result
    }

    private static func createMutex(_ count: Int) -> Double {
        final class Holder: Sendable { let lock = Mutex(0) }
        var total = 0
        let result = nanoseconds(count) {
            for index in 0..<count { total &+= Holder().lock.withLock { $0 &+ index } }
        }
        precondition(total >= 0)
        return result
    }
}
