import Foundation
import MultipeerIO
import TestIsolation
import Testing

@testable import Multipeer

@Suite("Stream receive buffer", .ownThread)
struct StreamInboundTests {
    /// Reported consumption, as the connection would receive it.
    final class Reports: Sendable {
        let counts = Lock<[Int]>([])
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
        // Every byte read is reported, once: the last read emptied the buffer, so nothing is held back.
        #expect(reports.total == total)
        #expect(reports.counts.withLock { $0.allSatisfy { $0 > 0 } })
    }

    @Test func aWaitingReaderIsWokenByBytesAndReportedAllItReadBeforeWaiting() async throws {
        let inbound = StreamInbound(window: 1 << 20)
        let reports = Reports()
        Self.bytes(0..<1000).withUnsafeBytes { inbound.append($0) }
        var first: [UInt8] = []
        #expect(try await inbound.read(into: &first, maximumCount: 400, report: reports.add) == 400)
        #expect(reports.total == 0)  // below the batch, and bytes are left
        #expect(try await inbound.read(into: &first, maximumCount: 4096, report: reports.add) == 600)
        #expect(first == Self.bytes(400..<1000))
        // The reader took everything: the credit goes back now (it may never read again).
        #expect(reports.total == 1000)
        let reader = Task {
            var buffer: [UInt8] = []
            _ = try await inbound.read(into: &buffer, maximumCount: 4096, report: reports.add)
            return buffer
        }
        while inbound.waitingReaders == 0 { await Task.yield() }
        Self.bytes(0..<10_000).withUnsafeBytes { inbound.append($0) }
        #expect(try await reader.value == Self.bytes(0..<4096))
        #expect(inbound.bufferedByteCount == 10_000 - 4096)
        // A reader asking for an array waits too.
        let rest = try await inbound.next(report: reports.add)
        #expect(rest == Self.bytes(4096..<10_000))
        let chunkReader = Task { try await inbound.next(report: reports.add) }
        while inbound.waitingReaders == 0 { await Task.yield() }
        ([5, 6] as [UInt8]).withUnsafeBytes { inbound.append($0) }
        #expect(try await chunkReader.value == [5, 6])
        #expect(inbound.bufferedByteCount == 0)
    }

    @Test func aProducerThreadAndAReaderTaskRunningAtOnceLoseAndReorderNothing() async throws {
        // The loop's side on its own thread, as on a connection: copies, partly filled reservations (as a
        // socket read straight into the buffer leaves them), empty commits, and idle releases, while a task
        // reads pieces of random sizes; the reader copies outside the lock while the producer moves or grows
        // the memory, so this is where a missed case would corrupt or lose bytes.
        let window = 1 << 20
        let inbound = StreamInbound(window: window)
        let total = 12_000_000
        let producer = Thread {
            var generator = SystemRandomNumberGenerator()
            var produced = 0
            var scratch = [UInt8](repeating: 0, count: 70_000)
            while produced < total {
                let count = min(total - produced, Int.random(in: 1...65_536, using: &generator))
                guard inbound.bufferedByteCount + count <= window else {
                    if Bool.random(using: &generator) { inbound.releaseIfEmpty() }
                    continue  // flow control: the peer waits for credit
                }
                for index in 0..<count { scratch[index] = UInt8(truncatingIfNeeded: (produced + index) &* 7) }
                if Bool.random(using: &generator) {
                    scratch.withUnsafeBytes { inbound.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                    produced += count
                } else if let room = inbound.reserve(upTo: count) {
                    let filled = Int.random(in: 0...room.count, using: &generator)
                    scratch.withUnsafeBytes { room.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[..<filled])) }
                    inbound.commit(filled)
                    produced += filled
                }
            }
            inbound.finish(nil)
        }
        producer.start()
        var generator = SystemRandomNumberGenerator()
        var buffer: [UInt8] = []
        var received = 0
        var mismatches = 0
        let reports = Reports()
        while try await inbound.read(
            into: &buffer, maximumCount: Int.random(in: 1...300_000, using: &generator), report: reports.add) > 0
        {
            for (offset, byte) in buffer.enumerated() where byte != UInt8(truncatingIfNeeded: (received + offset) &* 7)
            {
                mismatches += 1
            }
            received += buffer.count
        }
        #expect(received == total)
        #expect(mismatches == 0)
        #expect(reports.total == total)
        #expect(inbound.capacity <= 2 * window)
    }

    @Test func whileAReaderCopiesTheProducerNeverMovesOrFreesTheBytesItCopies() async throws {
        // The producer runs inside the reader's borrow: exactly the moment a real reader copies outside the lock.
        let inbound = StreamInbound(window: 1 << 20)
        Self.bytes(0..<60_000).withUnsafeBytes { inbound.append($0) }
        var first: [UInt8] = []
        _ = try await inbound.read(into: &first, maximumCount: 20_000, report: { _ in })
        // 40,000 unread from offset 20,000 of a 65,536-byte buffer: moving them to the front would overwrite
        // the bytes being copied.
        var borrowedIntact: [Bool] = []
        let taken = inbound.take(upTo: 5000) { borrowed in
            let before = Array(borrowed)
            // Needs room: must grow into new memory, not compact over `borrowed`.
            Self.bytes(60_000..<70_000).withUnsafeBytes { inbound.append($0) }
            borrowedIntact.append(Array(borrowed) == before)
            // Grows again: the memory being copied must still not be freed.
            Self.bytes(70_000..<200_000).withUnsafeBytes { inbound.append($0) }
            borrowedIntact.append(Array(borrowed) == before)
            // A reservation without a size requirement takes what is left at the end instead.
            if let room = inbound.reserve(upTo: 1 << 20) {
                #expect(room.count < 1 << 20)
                Self.bytes(200_000..<200_000 + room.count).withUnsafeBytes { room.copyMemory(from: $0) }
                inbound.commit(room.count)
            }
            borrowedIntact.append(Array(borrowed) == before && before == Self.bytes(20_000..<25_000))
        }
        #expect(taken == .took(5000))
        #expect(borrowedIntact == [true, true, true])
        let total = 20_000 + 5000 + inbound.bufferedByteCount
        var rest: [UInt8] = []
        var buffer: [UInt8] = []
        while rest.count < total - 25_000 {
            _ = try await inbound.read(into: &buffer, maximumCount: 1 << 20, report: { _ in })
            rest += buffer
        }
        #expect(rest == Self.bytes(25_000..<total))
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

    @Test func aResetDropsTheUnreadBytesAndTheirMemoryEvenWhileAReaderCopies() async throws {
        let error = ConnectionError(code: .closedLocally, reason: "reset in a test")
        // After a normal end, a reset still turns the end into the error: the bytes dropped must not look read.
        let ended = StreamInbound(window: 1 << 20)
        Self.bytes(0..<100_000).withUnsafeBytes { ended.append($0) }
        ended.finish(nil)
        ended.discard(error)
        #expect(ended.bufferedByteCount == 0)
        #expect(ended.capacity == 0)
        #expect(ended.take(upTo: 10) { _ in } == .ended(error))

        // A reader copying when the reset comes keeps its bytes intact; the memory goes when it is done.
        let copying = StreamInbound(window: 1 << 20)
        Self.bytes(0..<100_000).withUnsafeBytes { copying.append($0) }
        var copied: [UInt8] = []
        let taken = copying.take(upTo: 5000) { borrowed in
            copying.discard(error)
            #expect(copying.capacity >= 100_000, "freed under a reader")
            copied = Array(borrowed)
        }
        #expect(taken == .took(5000))
        #expect(copied == Self.bytes(0..<5000))
        #expect(copying.capacity == 0)
        #expect(copying.take(upTo: 10) { _ in } == .ended(error))

        // A reservation filled across the reset is dropped, not made readable.
        let writing = StreamInbound(window: 1 << 20)
        let room = try #require(writing.reserve(upTo: 4096))
        writing.discard(error)
        room.initializeMemory(as: UInt8.self, repeating: 1)
        writing.commit(room.count)
        #expect(writing.bufferedByteCount == 0)
        #expect(writing.capacity == 0)
        // A waiting reader wakes to the error.
        let waiting = StreamInbound(window: 1 << 20)
        let reader = Task { try await waiting.next(report: { _ in })?.count }
        while waiting.waitingReaders == 0 { await Task.yield() }
        waiting.discard(error)
        await #expect(throws: ConnectionError.self) { try await reader.value }
    }

    @Test func anIdleBufferGivesItsMemoryBack() async throws {
        let inbound = StreamInbound(window: 4 << 20)
        Self.bytes(0..<100_000).withUnsafeBytes { inbound.append($0) }
        inbound.releaseIfEmpty()
        #expect(inbound.capacity >= 100_000)  // still holds unread bytes
        var buffer: [UInt8] = []
        #expect(try await inbound.read(into: &buffer, maximumCount: 100_000, report: { _ in }) == 100_000)
        inbound.releaseIfEmpty()
        #expect(inbound.capacity == 0)
        // A buffer that grew while the reader lagged is kept while the stream is busy (freeing it whenever the
        // reader caught up cost 8 % of plaintext stream throughput in page faults) and freed when idle.
        Self.bytes(0..<3_000_000).withUnsafeBytes { inbound.append($0) }
        #expect(inbound.capacity >= 3_000_000 && inbound.capacity <= 4 << 20)
        var read = 0
        while read < 3_000_000 {
            read += try await inbound.read(into: &buffer, maximumCount: 1 << 20, report: { _ in })
        }
        #expect(inbound.capacity >= 3_000_000)
        inbound.releaseIfEmpty()
        #expect(inbound.capacity == 0)
    }

    @Test func aBorrowingReadLendsTheBytesInPlaceInOrderAndCountsThemReadEvenWhenItsBodyThrows() async throws {
        struct Refused: Error {}
        let inbound = StreamInbound(window: 1 << 20)
        let reports = Reports()
        let total = 2_000_000
        var generator = SystemRandomNumberGenerator()
        var appended = 0
        var received: [UInt8] = []
        var reads = 0
        while received.count < total {
            while appended < total && inbound.bufferedByteCount < (1 << 20) - 70_000 {
                let count = min(total - appended, Int.random(in: 1...65_536, using: &generator))
                Self.bytes(appended..<appended + count).withUnsafeBytes { inbound.append($0) }
                appended += count
            }
            let want = Int.random(in: 1...200_000, using: &generator)
            let count = try #require(
                try await inbound.read(maximumCount: want, report: reports.add) { bytes -> Int in
                    received.append(contentsOf: bytes)
                    return bytes.count
                })
            #expect(count > 0 && count <= want)
            reads += 1
        }
        #expect(received == Self.bytes(0..<total))
        #expect(reports.total == total)
        #expect(inbound.capacity <= 1 << 20)

        // A body that throws: its error comes out, and the bytes it was lent are gone (and reported) all the same.
        Self.bytes(0..<100).withUnsafeBytes { inbound.append($0) }
        await #expect(throws: Refused.self) {
            _ = try await inbound.read(maximumCount: 60, report: reports.add) { _ -> Int in throw Refused() }
        }
        #expect(inbound.bufferedByteCount == 40)
        let rest = try await inbound.read(maximumCount: 1000, report: reports.add) { Array($0) }
        #expect(rest == Self.bytes(60..<100))
        #expect(reports.total == total + 100)

        // A waiting borrower is woken by bytes, then by the end (nil), and a failed stream throws its error.
        let reader = Task { try await inbound.read(maximumCount: 10, report: reports.add) { Array($0) } }
        while inbound.waitingReaders == 0 { await Task.yield() }
        ([7, 8] as [UInt8]).withUnsafeBytes { inbound.append($0) }
        #expect(try await reader.value == [7, 8])
        inbound.finish(nil)
        #expect(try await inbound.read(maximumCount: 10, report: reports.add) { $0.count } == nil)
        let failed = StreamInbound(window: 1 << 16)
        failed.finish(ConnectionError(code: .connectionLost, reason: "test"))
        await #expect(throws: ConnectionError.self) {
            _ = try await failed.read(maximumCount: 10, report: { _ in }) { $0.count }
        }
    }
}
