import Synchronization
import Testing

@testable import Multipeer

@Suite("Stream receive buffer")
struct StreamInboundTests {
    /// Reported consumption, as the connection would receive it.
    final class Reports: Sendable {
        let counts = Mutex<[Int]>([])
        var total: Int { counts.withLock { $0.reduce(0, +) } }
        func add(_ count: Int) { counts.withLock { $0.append(count) } }
    }

    private static func bytes(_ range: Range<Int>) -> [UInt8] {
        range.map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
    }

    @Test func bytesComeOutInOrderWhateverTheSizesOfAppendsAndReads() async throws {
        let inbound = StreamInbound(window: 1 << 20)
        let reports = Reports()
        let total = 3_000_000
        var generator = SystemRandomNumberGenerator()
        var appended = 0
        var received: [UInt8] = []
        var scratch: [UInt8] = []
        while received.count < total {
            // Append while the reader is at most one window behind, as flow control guarantees.
            while appended < total && inbound.bufferedByteCount < (1 << 20) - 70_000 {
                let count = min(total - appended, Int.random(in: 1...65_536, using: &generator))
                Self.bytes(appended..<appended + count).withUnsafeBytes { inbound.append($0) }
                appended += count
            }
            let want = Int.random(in: 1...200_000, using: &generator)
            let count = try await inbound.read(into: &scratch, maximumCount: want, report: reports.add)
            #expect(count > 0 && count <= want && scratch.count == count)
            received += scratch
        }
        #expect(received == Self.bytes(0..<total))
        // Memory stays within the window however the reads and appends interleave.
        #expect(inbound.capacity <= 1 << 20)
        // Credit comes back in batches (a quarter of the window), not per read, and never more than was read.
        #expect(reports.total <= total && reports.total > total - (1 << 18))
        #expect(reports.counts.withLock { $0.allSatisfy { $0 >= 1 << 18 } })
    }

    @Test func aWaitingReaderIsWokenByBytesAndReportedAllItReadBeforeWaiting() async throws {
        let inbound = StreamInbound(window: 1 << 20)
        let reports = Reports()
        Self.bytes(0..<1000).withUnsafeBytes { inbound.append($0) }
        var first: [UInt8] = []
        #expect(try await inbound.read(into: &first, maximumCount: 4096, report: reports.add) == 1000)
        #expect(first == Self.bytes(0..<1000))
        #expect(reports.total == 0)  // below the batch
        let reader = Task {
            var buffer: [UInt8] = []
            _ = try await inbound.read(into: &buffer, maximumCount: 4096, report: reports.add)
            return buffer
        }
        while inbound.waitingReaders == 0 { await Task.yield() }
        // The reader reported the 1,000 bytes it had read before it started waiting.
        #expect(reports.total == 1000)
        Self.bytes(0..<10_000).withUnsafeBytes { inbound.append($0) }
        #expect(try await reader.value == Self.bytes(0..<4096))
        #expect(inbound.bufferedByteCount == 10_000 - 4096)
        // A reader asking for an array waits too, and is handed the bytes directly.
        let rest = try await inbound.next(report: reports.add)
        #expect(rest == Self.bytes(4096..<10_000))
        let chunkReader = Task { try await inbound.next(report: reports.add) }
        while inbound.waitingReaders == 0 { await Task.yield() }
        ([5, 6] as [UInt8]).withUnsafeBytes { inbound.append($0) }
        #expect(try await chunkReader.value == [5, 6])
        #expect(inbound.bufferedByteCount == 0)
    }

    @Test func theEndComesAfterTheBufferedBytesAndAnErrorAfterThemToo() async throws {
        let clean = StreamInbound(window: 1 << 16)
        ([1, 2, 3] as [UInt8]).withUnsafeBytes { clean.append($0) }
        clean.finish(nil)
        ([4] as [UInt8]).withUnsafeBytes { clean.append($0) }  // nothing counts after the end
        #expect(try await clean.next(report: { _ in }) == [1, 2, 3])
        #expect(try await clean.next(report: { _ in }) == nil)
        var buffer: [UInt8] = [1]
        #expect(try await clean.read(into: &buffer, maximumCount: 8, report: { _ in }) == 0)
        #expect(buffer.isEmpty)

        let failed = StreamInbound(window: 1 << 16)
        ([9] as [UInt8]).withUnsafeBytes { failed.append($0) }
        let error = ConnectionError(code: .connectionLost, reason: "test")
        failed.finish(error)
        #expect(try await failed.next(report: { _ in }) == [9])
        await #expect(throws: ConnectionError.self) { try await failed.next(report: { _ in }) }

        // A reader already waiting is woken by the end.
        let waiting = StreamInbound(window: 1 << 16)
        let reader = Task { try await waiting.next(report: { _ in }) }
        while waiting.waitingReaders == 0 { await Task.yield() }
        waiting.finish(nil)
        #expect(try await reader.value == nil)
    }

    @Test func anIdleBufferGivesItsMemoryBack() async throws {
        let inbound = StreamInbound(window: 1 << 20)
        Self.bytes(0..<100_000).withUnsafeBytes { inbound.append($0) }
        inbound.releaseIfEmpty()
        #expect(inbound.capacity >= 100_000)  // still holds unread bytes
        var buffer: [UInt8] = []
        #expect(try await inbound.read(into: &buffer, maximumCount: 100_000, report: { _ in }) == 100_000)
        inbound.releaseIfEmpty()
        #expect(inbound.capacity == 0)
    }
}
