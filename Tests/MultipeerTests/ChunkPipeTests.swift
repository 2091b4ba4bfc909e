import MultipeerIO
import TestIsolation
import Testing

@testable import Multipeer

/// The hand-off between a received file's reader and its writer: bounded, in order, and reusing the memory of the
/// pieces it carried (a new 1 MiB array per piece left glibc's arenas holding several MiB more under load).
@Suite("Resource chunk pipe", .ownThread)
struct ChunkPipeTests {
    private static func address(_ chunk: [UInt8]) -> UnsafeRawPointer? {
        chunk.withUnsafeBytes { UnsafeRawPointer($0.baseAddress) }
    }

    @Test func chunksComeOutInOrderAndAPutWaitsWhileTheQueueIsFull() async {
        let pipe = ChunkPipe(capacity: 2)
        #expect(await pipe.put([1]))
        let third = Lock(false)
        let putter = Task {
            #expect(await pipe.put([2]))  // the second fills the queue: it waits for a take
            #expect(await pipe.put([3]))
            third.withLock { $0 = true }
            pipe.finish()
        }
        try? await Task.sleep(for: .milliseconds(50))
        #expect(!third.withLock { $0 })
        #expect(await pipe.take() == [1])
        #expect(await pipe.take() == [2])
        #expect(await pipe.take() == [3])
        #expect(await pipe.take() == nil)
        await putter.value
        #expect(third.withLock { $0 })
    }

    @Test func aRecycledChunkIsFilledAgainInItsOwnMemory() async throws {
        let pipe = ChunkPipe(capacity: 2)
        var filled = pipe.emptyChunk(reserving: 1 << 20)
        #expect(filled.isEmpty && filled.capacity >= 1 << 20)
        filled.append(contentsOf: repeatElement(7, count: 1 << 20))
        let memory = Self.address(filled)
        #expect(await pipe.put(consume filled))
        var taken = try #require(await pipe.take())
        #expect(taken.count == 1 << 20)
        pipe.recycle(&taken)
        let again = pipe.emptyChunk(reserving: 1 << 20)
        #expect(again.isEmpty && again.capacity >= 1 << 20)
        #expect(Self.address(again) == memory)
    }

    @Test func sparesAreBoundedAndDroppedOnClose() async {
        let pipe = ChunkPipe(capacity: 2)
        for _ in 0..<6 {
            var spent = [UInt8](repeating: 1, count: 4096)
            pipe.recycle(&spent)
            #expect(spent.isEmpty)
        }
        #expect(pipe.spareCount == 3)  // capacity + 1: the most pieces out at once
        _ = pipe.emptyChunk(reserving: 4096)
        #expect(pipe.spareCount == 2)
        pipe.close()
        #expect(pipe.spareCount == 0)
        var late: [UInt8] = [1]
        pipe.recycle(&late)
        #expect(pipe.spareCount == 0)
        #expect(await pipe.put([1]) == false)
        #expect(await pipe.take() == nil)
    }
}
