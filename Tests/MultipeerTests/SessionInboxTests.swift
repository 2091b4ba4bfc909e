import Testing

@testable import Multipeer

@Suite("Session inbox")
struct SessionInboxTests {
    private static let peer = Peer(
        identity: .claimed(PeerFingerprint(bytes: [UInt8](repeating: 7, count: 32))!), displayName: "Bob")

    private static func entries(_ values: some Sequence<Int>) -> [SessionInbox.Entry] {
        values.map { SessionInbox.Entry(message: ReceivedMessage(peer: peer, bytes: [UInt8($0)][...]), onTaken: nil) }
    }

    private static func values(_ entries: [SessionInbox.Entry]) -> [Int] { entries.map { Int($0.message.bytes[0]) } }

    @Test("entries given back are taken again first, in order, before what came after them")
    func givenBackEntriesComeFirst() async {
        let inbox = SessionInbox(messageLimit: 100, byteLimit: 1 << 20)
        await inbox.push(contentsOf: Self.entries(0..<10))
        let first = await inbox.next(upTo: 4)
        #expect(Self.values(first) == [0, 1, 2, 3])
        // The iterator handed out one of them before it was dropped.
        inbox.giveBack(first[1...])
        #expect(Self.values(await inbox.next(upTo: 5)) == [1, 2, 3, 4, 5])
        #expect(Self.values(await inbox.next(upTo: 64)) == [6, 7, 8, 9])
    }

    @Test("a reader just keeping up with a queue that never empties takes every entry in order")
    func queueThatNeverEmptiesStaysInOrder() async {
        let inbox = SessionInbox(messageLimit: 100, byteLimit: 1 << 20)
        await inbox.push(contentsOf: Self.entries(0..<10))
        var taken: [Int] = []
        for round in 0..<2_000 {
            await inbox.push(contentsOf: Self.entries([(10 + 3 * round) % 256, (11 + 3 * round) % 256]))
            await inbox.push(contentsOf: Self.entries([(12 + 3 * round) % 256]))
            taken += Self.values(await inbox.next(upTo: 3))
        }
        #expect(taken == (0..<6_000).map { $0 % 256 })
    }

    @Test("waiting readers are served in the order they began waiting; a cancelled one is skipped")
    func readersTakeTurnsInOrder() async {
        let inbox = SessionInbox(messageLimit: 100, byteLimit: 1 << 20)
        var readers: [Task<[Int], Never>] = []
        for count in 1...3 {
            readers.append(Task { Self.values(await inbox.next(upTo: 64)) })
            #expect(await waitUntil { inbox.waitingReaders == count })
        }
        readers[1].cancel()
        #expect(await readers[1].value.isEmpty)
        #expect(inbox.waitingReaders == 2)
        await inbox.push(contentsOf: Self.entries([1]))
        await inbox.push(contentsOf: Self.entries([2, 3]))
        #expect(await readers[0].value == [1])
        #expect(await readers[2].value == [2, 3])
        #expect(inbox.waitingReaders == 0)
    }
}
