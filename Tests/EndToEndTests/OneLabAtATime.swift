import Foundation
import TestIsolation
import Testing

/// Runs the tests of the suites that carry it one at a time, across suites: the heavy ones (a 1 GiB transfer,
/// crowds of 16 processes) would otherwise share the two cores with the ones that measure timing (a keepalive
/// bound, discovery latency) and make them measure the machine instead of the protocol.
struct OneLabAtATime: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard testCase != nil else { return try await function() }
        await LabTurn.shared.acquire()
        // A test that holds the turn far longer than any should (they take seconds to a minute or two) says so,
        // with what its processes are doing: a hung test would otherwise stop the whole run without a word.
        let name = test.name
        let watchdog = Task.detached {
            var held = 0
            for minutes in [4, 8, 16, 32] {
                try await Task.sleep(for: .seconds((minutes - held) * 60))
                held = minutes
                FileHandle.standardError.write(Data(LabWatchdog.report(name, minutes: minutes).utf8))
            }
        }
        defer { watchdog.cancel() }
        do {
            // Lab tests block their thread (namespaces made, processes started and waited for): on the shared
            // pool's two threads that would stop every other test in the process meanwhile.
            try await onOwnThread { try await function() }
        } catch {
            await LabTurn.shared.release()
            throw error
        }
        await LabTurn.shared.release()
    }
}

/// What a test that holds the lab too long is doing: the processes this one started, with their state.
enum LabWatchdog {
    static func report(_ test: String, minutes: Int) -> String {
        // Every process once, then the descendants of this one.
        var children: [Int32: [Int32]] = [:]
        var described: [Int32: String] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 2, let parent = Int32(fields[1]) else { continue }
            children[parent, default: []].append(pid)
            let command =
                ((try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(entry)/cmdline"))) ?? Data())
                .split(separator: 0).prefix(6).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
            let wchan = (try? String(contentsOfFile: "/proc/\(entry)/wchan", encoding: .utf8)) ?? "?"
            described[pid] = "  \(pid) (parent \(parent)) \(fields[0]) \(wchan): \(command)"
        }
        var lines = ["lab watchdog: \(test) has held the lab for about \(minutes) minutes; its processes:"]
        var pending = children[getpid()] ?? []
        while let pid = pending.popLast() {
            if let line = described[pid] { lines.append(line) }
            pending += children[pid] ?? []
        }
        return lines.joined(separator: "\n") + "\n"
    }
}

/// A first-come, first-served turn.
actor LabTurn {
    static let shared = LabTurn()
    private var busy = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        guard busy else {
            busy = true
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
    }
}

extension Trait where Self == OneLabAtATime {
    /// One such test at a time, across suites.
    static var oneLabAtATime: Self { OneLabAtATime() }
}
