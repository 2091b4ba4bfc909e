/// Which counters of one receiving direction have been delivered, so a replayed packet is dropped: a pure,
/// fixed-size sliding window over the last ``size`` counters.
///
/// The window remembers the highest counter delivered and, in a ring of ``size`` bits (``wordCount`` words), the
/// counters from `highest − (size − 1)` to `highest`. Bit `c mod size` stands for counter `c`. A counter above
/// the highest is fresh; one at most `size − 1` behind is fresh unless its bit is set; one `size` or more behind
/// is too old to tell and is rejected.
///
/// Use it in two steps: ``check(_:)`` before decrypting (cheap, so a flood of replays costs no cryptography), and
/// ``mark(_:)`` only after the packet authenticated, so a forged packet with a huge counter cannot move the
/// window and make genuine packets look too old.
struct ReplayWindow: Hashable, Sendable {
    /// The number of counters the window covers.
    static let size = 1_024
    /// The number of 64-bit words of the bitmap.
    static let wordCount = size / 64

    /// What ``check(_:)`` found.
    enum Verdict: Hashable, Sendable {
        /// Not delivered yet, and within or ahead of the window: decrypt it.
        case fresh
        /// Already delivered.
        case replayed
        /// At least ``ReplayWindow/size`` behind the highest counter delivered.
        case tooOld
    }

    /// The highest counter marked so far; nil before the first.
    private(set) var highest: UInt64?
    /// The ring bitmap: bit `c mod size` (word `index / 64`, bit `index % 64`) is set when counter `c` was marked.
    private var words = [UInt64](repeating: 0, count: wordCount)

    /// Creates an empty window: every counter is fresh.
    init() {}

    /// Whether a packet with `counter` may be delivered, without changing the window.
    /// - Parameter counter: The packet's counter.
    /// - Returns: `.fresh`, `.replayed` or `.tooOld`.
    func check(_ counter: UInt64) -> Verdict {
        guard let highest, counter <= highest else { return .fresh }
        if highest - counter >= UInt64(Self.size) { return .tooOld }
        return isSet(counter) ? .replayed : .fresh
    }

    /// Records that the packet with `counter` was delivered, sliding the window forward if it is the new highest.
    ///
    /// Call it only for a counter ``check(_:)`` found fresh, after the packet authenticated.
    /// - Parameter counter: The packet's counter.
    mutating func mark(_ counter: UInt64) {
        precondition(check(counter) == .fresh, "marking a counter the window rejects")
        if let highest, counter > highest {
            let advance = counter - highest
            if advance >= UInt64(Self.size) {
                for index in words.indices { words[index] = 0 }
            } else {
                // Positions highest+1 … counter held counters that are now out of the window.
                clear(from: highest &+ 1, count: Int(advance))
            }
        }
        if highest.map({ counter > $0 }) ?? true { highest = counter }
        let position = Self.position(counter)
        words[position >> 6] |= 1 << UInt64(position & 63)
    }

    // MARK: - Private

    private static func position(_ counter: UInt64) -> Int {
        Int(truncatingIfNeeded: counter % UInt64(size))
    }

    private func isSet(_ counter: UInt64) -> Bool {
        let position = Self.position(counter)
        return words[position >> 6] & (1 << UInt64(position & 63)) != 0
    }

    /// Clears the bits of `count` consecutive counters from `start` (fewer than `size`), a word at a time,
    /// wrapping around the ring.
    private mutating func clear(from start: UInt64, count: Int) {
        var position = Self.position(start)
        var remaining = count
        while remaining > 0 {
            let bit = position & 63
            let run = min(remaining, 64 - bit)
            let mask: UInt64 = run == 64 ? .max : ((1 << UInt64(run)) - 1) << UInt64(bit)
            words[position >> 6] &= ~mask
            remaining -= run
            position = (position + run) & (Self.size - 1)
        }
    }
}
