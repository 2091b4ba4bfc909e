import DequeModule
import Testing

@testable import MultipeerChaos

/// The chaos run's rules on made-up histories: each rule catches what it is for and lets through what is allowed.
@Suite struct ChaosLedgerTests {
    static func event(
        _ kind: String, _ peer: String, at time: Double = 0, sequences: [Int]? = nil, incarnation: Int? = nil,
        state: String? = nil, code: String? = nil
    ) -> ChaosEvent {
        var event = ChaosEvent(kind: kind, peer: peer)
        event.time = time
        event.sequences = sequences
        event.incarnation = incarnation
        event.state = state
        event.code = code
        return event
    }

    /// Two peers, A sending 1...5 to B.
    static func ledger() -> ChaosLedger {
        var ledger = ChaosLedger()
        ledger.started("A", incarnation: 1, at: 0)
        ledger.started("B", incarnation: 1, at: 0)
        ledger.record(event(ChaosEvent.Kind.sent, "B", at: 1, sequences: [1, 2, 3, 4, 5]), from: "A", incarnation: 1)
        return ledger
    }

    @Test func everyMessageDeliveredInOrderBreaksNoRule() {
        var ledger = Self.ledger()
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [1, 2, 3, 4, 5], incarnation: 1), from: "B",
            incarnation: 1)
        ledger.finish(survivors: ["A": 1, "B": 1]) { _, _, _ in true }
        #expect(ledger.violations.isEmpty, "\(ledger.violations)")
    }

    @Test func aDuplicateAReorderAndASilentLossAreEachCaught() {
        var ledger = Self.ledger()
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [1, 2, 2, 4], incarnation: 1), from: "B",
            incarnation: 1)
        ledger.finish(survivors: ["A": 1, "B": 1]) { _, _, _ in true }
        let text = ledger.violations.joined(separator: "\n")
        #expect(text.contains("message 2 after 2 (twice)"), "\(text)")
        #expect(text.contains("skipped A#1's messages 3"), "\(text)")
        #expect(text.contains("2 of 5 messages neither delivered nor reported undelivered: 3, 5"), "\(text)")
        #expect(ledger.violations.count == 3, "\(text)")
    }

    @Test func lossesTheSenderReportedAreAllowed() {
        var ledger = Self.ledger()
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [1, 2, 4], incarnation: 1), from: "B", incarnation: 1)
        ledger.record(Self.event(ChaosEvent.Kind.undelivered, "B", sequences: [3, 5]), from: "A", incarnation: 1)
        ledger.finish(survivors: ["A": 1, "B": 1]) { _, _, _ in true }
        #expect(ledger.violations.isEmpty, "\(ledger.violations)")
    }

    /// Messages `send` refused (the peer had left) were never owed.
    @Test func messagesSendRefusedLeaveAnAllowedGap() {
        var ledger = Self.ledger()
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [1, 2], incarnation: 1), from: "B", incarnation: 1)
        ledger.record(Self.event(ChaosEvent.Kind.sendFailed, "B", sequences: [6, 7]), from: "A", incarnation: 1)
        ledger.record(Self.event(ChaosEvent.Kind.undelivered, "B", sequences: [3, 4, 5]), from: "A", incarnation: 1)
        ledger.record(Self.event(ChaosEvent.Kind.sent, "B", sequences: [8]), from: "A", incarnation: 1)
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [8], incarnation: 1), from: "B", incarnation: 2)
        ledger.finish(survivors: ["A": 1, "B": 2]) { _, _, _ in true }
        #expect(ledger.violations.isEmpty, "\(ledger.violations)")
    }

    /// What sat in a killed receiver's inbox died with it (excused and counted); what was queued after it died
    /// must be reported.
    @Test func aKilledReceiversInboxIsExcusedButNotWhatCameAfter() {
        var ledger = Self.ledger()
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [1, 2], incarnation: 1), from: "B", incarnation: 1)
        ledger.fault(.kill, to: "B", at: 2, alive: ["A", "B"])
        ledger.started("B", incarnation: 2, at: 3)
        ledger.record(Self.event(ChaosEvent.Kind.sent, "B", at: 4, sequences: [6, 7]), from: "A", incarnation: 1)
        ledger.record(
            Self.event(ChaosEvent.Kind.received, "A", sequences: [7], incarnation: 1), from: "B", incarnation: 2)
        ledger.finish(survivors: ["A": 1, "B": 2]) { _, _, _ in true }
        #expect(ledger.counts["diedWithReceiver"] == 3)
        #expect(ledger.violations.count == 2, "\(ledger.violations)")
        #expect(ledger.violations.allSatisfy { $0.contains("6") }, "\(ledger.violations)")
    }

    @Test func aLeaveMustBeSeenAsLeftInTime() {
        var ledger = ChaosLedger()
        ledger.record(Self.event(ChaosEvent.Kind.state, "B", at: 1, state: "connected"), from: "A", incarnation: 1)
        ledger.record(Self.event(ChaosEvent.Kind.state, "C", at: 1, state: "connected"), from: "A", incarnation: 1)
        ledger.fault(.leave, to: "B", at: 10, alive: ["A", "B", "C"])
        ledger.fault(.leave, to: "C", at: 10, alive: ["A", "B", "C"])
        ledger.record(
            Self.event(ChaosEvent.Kind.state, "B", at: 11, state: "notConnected", code: "left"), from: "A",
            incarnation: 1)
        // C is reported lost, not left: the wrong reason.
        ledger.record(
            Self.event(ChaosEvent.Kind.state, "C", at: 11, state: "reconnecting", code: "linkLost"), from: "A",
            incarnation: 1)
        ledger.checkDeadlines(at: 12, alive: ["A"])
        #expect(ledger.violations.isEmpty)
        ledger.checkDeadlines(at: 14, alive: ["A"])
        #expect(ledger.violations == ["A did not see C left within 3 s (its state: reconnecting)"])
        // And reconnecting must end within the grace.
        ledger.checkDeadlines(at: 30, alive: ["A"])
        #expect(ledger.violations.last?.contains("reconnecting to end") == true, "\(ledger.violations)")
    }

    /// A peer restarted just before another is killed knew nothing of it: nothing is expected of it.
    @Test func aNewIncarnationIsNotHeldToWhatItsPredecessorSaw() {
        var ledger = ChaosLedger()
        ledger.started("A", incarnation: 1, at: 0)
        ledger.record(Self.event(ChaosEvent.Kind.state, "B", at: 1, state: "connected"), from: "A", incarnation: 1)
        ledger.started("A", incarnation: 2, at: 5)
        ledger.fault(.kill, to: "B", at: 6, alive: ["A", "B"])
        ledger.checkDeadlines(at: 20, alive: ["A"])
        #expect(ledger.violations.isEmpty, "\(ledger.violations)")
    }

    /// An observer whose own link is down learns of a kill by silence: the silence bound applies, not the 3 s.
    @Test func aCutOffObserverHasTheSilenceBound() {
        var ledger = ChaosLedger()
        ledger.record(Self.event(ChaosEvent.Kind.state, "B", at: 1, state: "connected"), from: "A", incarnation: 1)
        ledger.fault(.linkDown(seconds: 14), to: "A", at: 10, alive: ["A", "B"])
        ledger.fault(.kill, to: "B", at: 12, alive: ["A", "B"])
        ledger.record(
            Self.event(ChaosEvent.Kind.state, "B", at: 16, state: "reconnecting", code: "linkLost"), from: "A",
            incarnation: 1)
        ledger.checkDeadlines(at: 22, alive: ["A"])
        #expect(ledger.violations.isEmpty, "\(ledger.violations)")
    }

    @Test func aFileVerifiedAsSentMustBeOnTheReceiversDisk() {
        var ledger = ChaosLedger()
        var sent = Self.event(ChaosEvent.Kind.fileSent, "B", state: "sent")
        sent.name = "f.bin"
        sent.sha256 = "aa"
        ledger.record(sent, from: "A", incarnation: 1)
        var started = Self.event(ChaosEvent.Kind.fileStarted, "A")
        started.name = "g.bin"
        ledger.record(started, from: "B", incarnation: 1)
        ledger.finish(survivors: ["A": 1, "B": 1]) { _, _, _ in true }
        #expect(ledger.violations.count == 2, "\(ledger.violations)")
        #expect(ledger.violations.contains { $0.contains("has no such file") })
        #expect(ledger.violations.contains { $0.contains("never ended") })
    }

    @Test func anUndeliveredReportIsMappedToTheConversationThatEnded() {
        // Numbers 1...4 of a first conversation (1, 2 delivered), then the peer restarted: 1, 2 of the next.
        var outstanding: Deque<(number: UInt64, sequence: Int)> = [(1, 1), (2, 2), (3, 3), (4, 4), (1, 5), (2, 6)]
        let (found, missing) = ChaosPeer.resolve([3, 4], in: &outstanding)
        #expect(found == [3, 4] && missing.isEmpty)
        #expect(outstanding.map(\.sequence) == [5, 6])
    }
}
