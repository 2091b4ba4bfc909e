import Testing

@testable import Multipeer

@Suite struct DatagramReplayWindowTests {
    @Test func emptyWindowTakesAnyCounter() {
        let window = ReplayWindow()
        #expect(window.highest == nil)
        for counter: UInt64 in [0, 1, 1_023, 1_024, 1 << 47, .max] {
            #expect(window.check(counter) == .fresh)
        }
    }

    @Test func duplicatesAreReplays() {
        var window = ReplayWindow()
        window.mark(0)
        #expect(window.check(0) == .replayed)
        #expect(window.check(1) == .fresh)
        window.mark(5)
        #expect(window.check(5) == .replayed)
        #expect(window.check(0) == .replayed)
        for counter: UInt64 in 1...4 { #expect(window.check(counter) == .fresh) }
        #expect(window.highest == 5)
    }

    @Test func firstCounterFarFromZeroLeavesEarlierOnesFresh() {
        var window = ReplayWindow()
        window.mark(10_000)
        #expect(window.check(10_000 - 1_023) == .fresh)
        #expect(window.check(10_000 - 1_024) == .tooOld)
        #expect(window.check(9_999) == .fresh)
    }

    @Test func reorderingWithinTheWindowIsAcceptedOnce() {
        var window = ReplayWindow()
        let order: [UInt64] = [10, 5, 7, 9, 0, 1_000, 1, 999, 500]
        for counter in order {
            #expect(window.check(counter) == .fresh, "counter \(counter)")
            window.mark(counter)
        }
        for counter in order { #expect(window.check(counter) == .replayed, "counter \(counter)") }
        #expect(window.highest == 1_000)
        #expect(window.check(2) == .fresh)
        #expect(window.check(998) == .fresh)
    }

    @Test func exactlyAtTheEdge() {
        var window = ReplayWindow()
        window.mark(5_000)
        // 1,024 counters: 3,977 … 5,000.
        #expect(window.check(5_000 - 1_023) == .fresh)
        #expect(window.check(5_000 - 1_024) == .tooOld)
        window.mark(5_000 - 1_023)
        #expect(window.check(5_000 - 1_023) == .replayed)
        // One step forward and the edge counter leaves the window: too old now, whether seen or not.
        window.mark(5_001)
        #expect(window.check(5_000 - 1_023) == .tooOld)
        #expect(window.check(5_000 - 1_022) == .fresh)
    }

    @Test func jumpFarAheadForgetsEverything() {
        var window = ReplayWindow()
        for counter: UInt64 in 0..<100 { window.mark(counter) }
        window.mark(1_000_000)
        #expect(window.check(99) == .tooOld)
        #expect(window.check(1_000_000) == .replayed)
        // The whole new window is fresh: none of the old bits (positions 0…99) survived.
        for counter in (1_000_000 - 1_023)..<UInt64(1_000_000) {
            #expect(window.check(counter) == .fresh)
        }
        #expect(window.check(1_000_000 - 1_024) == .tooOld)
    }

    @Test func jumpOfExactlyTheWindowSizeClearsTheWholeRing() {
        var window = ReplayWindow()
        for counter: UInt64 in 0..<1_024 { window.mark(counter) }
        window.mark(1_023 + 1_024)
        #expect(window.check(1_023) == .tooOld)
        for counter: UInt64 in 1_024..<2_047 { #expect(window.check(counter) == .fresh) }
        #expect(window.check(2_047) == .replayed)
    }

    @Test func jumpOfOneLessThanTheWindowKeepsOneOldCounter() {
        var window = ReplayWindow()
        for counter: UInt64 in 0..<1_024 { window.mark(counter) }
        window.mark(1_023 + 1_023)
        // The window is now 1,023 … 2,046: 1,023 stays marked, everything it slid over is fresh.
        #expect(window.check(1_022) == .tooOld)
        #expect(window.check(1_023) == .replayed)
        for counter: UInt64 in 1_024..<2_046 { #expect(window.check(counter) == .fresh) }
        #expect(window.check(2_046) == .replayed)
    }

    @Test func slidingAcrossWordAndRingBoundaries() {
        var window = ReplayWindow()
        // Marks every counter from 0 to 3,000 in order: the ring wraps twice and every word is cleared and
        // reused; the window always holds exactly the last 1,024 marks.
        for counter: UInt64 in 0...3_000 {
            #expect(window.check(counter) == .fresh)
            window.mark(counter)
            if counter >= 1_024 { #expect(window.check(counter - 1_024) == .tooOld) }
            #expect(window.check(counter - min(counter, 1_023)) == .replayed)
        }
        // Steps that end on, start on and straddle word boundaries (multiples of 64) and the ring's end; only the
        // counters marked (3,000 and below, and each step's end) are replays.
        var marked = Set<UInt64>(0...3_000)
        for step: UInt64 in [1, 63, 64, 65, 127, 128, 500, 1_000] {
            let newest = window.highest! + step
            window.mark(newest)
            marked.insert(newest)
            for counter in (newest - 1_023)...newest {
                #expect(window.check(counter) == (marked.contains(counter) ? .replayed : .fresh), "counter \(counter)")
            }
            #expect(window.check(newest - 1_024) == .tooOld)
        }
    }

    @Test func matchesASetBasedModelOnRandomTraffic() {
        var random = SplitMix64(seed: 0xD1_0000_0001)
        var window = ReplayWindow()
        var seen = Set<UInt64>()
        var highest: UInt64?
        var base: UInt64 = 1 << 40
        for _ in 0..<50_000 {
            // Mostly near the front, sometimes far behind, sometimes a jump ahead.
            let roll = random.next() % 100
            let counter: UInt64
            if roll < 70 {
                counter = base + random.next() % 96 - 64
                base += random.next() % 3
            } else if roll < 95 {
                counter = base - random.next() % 1_200
            } else {
                base += random.next() % 3_000
                counter = base
            }
            let expected: ReplayWindow.Verdict
            if let highest, counter <= highest {
                expected = highest - counter >= 1_024 ? .tooOld : (seen.contains(counter) ? .replayed : .fresh)
            } else {
                expected = .fresh
            }
            let verdict = window.check(counter)
            #expect(verdict == expected, "counter \(counter), highest \(String(describing: highest))")
            guard verdict == expected else { return }
            if verdict == .fresh, random.next() % 4 != 0 {
                // Most fresh packets authenticate; the rest fail and must leave the window alone.
                window.mark(counter)
                seen.insert(counter)
                highest = max(highest ?? counter, counter)
            }
        }
        #expect(window.highest == highest)
    }
}
