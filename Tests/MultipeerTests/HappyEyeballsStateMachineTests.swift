import MultipeerIO
import Testing

@testable import Multipeer

/// The dial schedule of RFC 8305 on a manual clock: which attempt starts when, who wins, what a failure says.
@Suite("Happy Eyeballs dial schedule")
struct HappyEyeballsStateMachineTests {
    typealias Machine = HappyEyeballsStateMachine

    static let v6a = SocketAddress(.v6(IPv6Address("fe80::1")!), port: 7000, scopeID: 2)
    static let v6b = SocketAddress(.v6(IPv6Address("fd00::2")!), port: 7000)
    static let v4a = SocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 7000)
    static let v4b = SocketAddress(.v4(IPv4Address(192, 0, 2, 2)), port: 7000)

    static func refused(_ address: SocketAddress) -> ConnectionError {
        ConnectionError(code: .socket(call: "connect", errno: 111), reason: "could not connect to \(address)")
    }

    /// A machine over `addresses` started at the clock's time, and what it did first.
    static func started(
        _ addresses: [SocketAddress], clock: ManualClock, delay: Duration = .milliseconds(250),
        timeout: Duration = .seconds(15)
    ) -> (Machine, [Machine.Action]) {
        var machine = Machine(
            addresses: addresses, configuration: DialConfiguration(connectionAttemptDelay: delay, timeout: timeout),
            now: clock.now())
        let actions = machine.start(now: clock.now())
        return (machine, actions)
    }

    /// Advances the clock by `step` and fires the timer if it became due, as the owner's loop timer would.
    static func advance(_ machine: inout Machine, _ clock: ManualClock, by step: Duration) -> [Machine.Action] {
        clock.advance(by: step)
        guard let deadline = machine.nextDeadline, deadline <= clock.now() else { return [] }
        return machine.timerFired(now: clock.now())
    }

    @Test func addressesAlternateFamiliesStartingWithIPv6AndKeepTheirOrderWithinAFamily() {
        #expect(Machine.ordered([Self.v4a, Self.v4b, Self.v6a, Self.v6b]) == [Self.v6a, Self.v4a, Self.v6b, Self.v4b])
        #expect(Machine.ordered([Self.v4b, Self.v6b, Self.v4a]) == [Self.v6b, Self.v4b, Self.v4a])
        #expect(Machine.ordered([Self.v4a, Self.v4a, Self.v6a, Self.v6a]) == [Self.v6a, Self.v4a])
        #expect(Machine.ordered([Self.v4b, Self.v4a]) == [Self.v4b, Self.v4a])
    }

    @Test func theNextAttemptStartsOnlyOnceTheDelayHasPassed() {
        let clock = ManualClock()
        var (machine, first) = Self.started([Self.v4a, Self.v6a, Self.v4b], clock: clock)
        #expect(first == [.startAttempt(0, Self.v6a)])
        #expect(machine.nextDeadline == clock.now() + .milliseconds(250))
        #expect(Self.advance(&machine, clock, by: .milliseconds(249)).isEmpty)
        #expect(Self.advance(&machine, clock, by: .milliseconds(1)) == [.startAttempt(1, Self.v4a)])
        #expect(Self.advance(&machine, clock, by: .milliseconds(249)).isEmpty)
        #expect(Self.advance(&machine, clock, by: .milliseconds(1)) == [.startAttempt(2, Self.v4b)])
        // Nothing left to start: the only deadline is the dial's own.
        #expect(machine.nextDeadline == machine.deadline)
        #expect(Self.advance(&machine, clock, by: .seconds(1)).isEmpty)
    }

    @Test func aFailureStartsTheNextAttemptAtOnceAndTheDelayCountsFromThen() {
        let clock = ManualClock()
        var (machine, _) = Self.started([Self.v6a, Self.v4a, Self.v6b], clock: clock)
        clock.advance(by: .milliseconds(100))
        #expect(
            machine.attemptFailed(0, error: Self.refused(Self.v6a), now: clock.now()) == [.startAttempt(1, Self.v4a)])
        #expect(Self.advance(&machine, clock, by: .milliseconds(249)).isEmpty)
        #expect(Self.advance(&machine, clock, by: .milliseconds(1)) == [.startAttempt(2, Self.v6b)])
    }

    @Test func theFirstConnectionWinsAndTheOthersAreCancelledOrClosed() {
        let clock = ManualClock()
        var (machine, _) = Self.started([Self.v6a, Self.v4a, Self.v6b, Self.v4b], clock: clock)
        _ = Self.advance(&machine, clock, by: .milliseconds(250))
        _ = Self.advance(&machine, clock, by: .milliseconds(250))
        #expect(machine.attemptSucceeded(1, now: clock.now()) == [.deliver(1), .cancelAttempt(0), .cancelAttempt(2)])
        #expect(machine.isFinished && machine.nextDeadline == nil)
        // An attempt that completes after all is closed; a late failure changes nothing.
        #expect(machine.attemptSucceeded(2, now: clock.now()) == [.closeLateConnection(2)])
        #expect(machine.attemptFailed(0, error: Self.refused(Self.v6a), now: clock.now()).isEmpty)
        #expect(Self.advance(&machine, clock, by: .seconds(20)).isEmpty)
    }

    @Test func whenEveryAttemptFailsTheErrorListsEachAddressAndItsFailure() throws {
        let clock = ManualClock()
        var (machine, _) = Self.started([Self.v4a, Self.v6a], clock: clock)
        #expect(
            machine.attemptFailed(0, error: Self.refused(Self.v6a), now: clock.now()) == [.startAttempt(1, Self.v4a)])
        let lost = ConnectionError(code: .connectionLost, reason: "reset")
        let actions = machine.attemptFailed(1, error: lost, now: clock.now())
        guard case .fail(let error) = try #require(actions.first) else {
            Issue.record("expected the dial to fail, got \(actions)")
            return
        }
        #expect(error.code == .unreachable)
        #expect(error.attempts.map(\.address) == [Self.v6a, Self.v4a])
        #expect(error.attempts.map(\.error) == [Self.refused(Self.v6a), lost])
        #expect(error.reason.contains("[fe80::1%2]:7000") && error.reason.contains("192.0.2.1:7000"))
        #expect(machine.nextDeadline == nil)
    }

    @Test(arguments: [
        ConnectionError.Code.identityMismatch(expected: TestPeers.bob.fingerprint, actual: TestPeers.eve.fingerprint),
        .groupSecretMismatch, .encryptionMismatch(local: .required, remote: .none), .plaintextRefused,
    ])
    func aSecurityRefusalIsTheDialsCodeNotHiddenAmongUnansweredAddresses(refusal: ConnectionError.Code) throws {
        let clock = ManualClock()
        var (machine, _) = Self.started([Self.v6a, Self.v4a, Self.v6b], clock: clock)
        _ = machine.attemptFailed(0, error: Self.refused(Self.v6a), now: clock.now())
        _ = machine.attemptFailed(1, error: ConnectionError(code: refusal, reason: "refused"), now: clock.now())
        let actions = machine.attemptFailed(2, error: Self.refused(Self.v6b), now: clock.now())
        guard case .fail(let error) = try #require(actions.first) else {
            Issue.record("expected the dial to fail, got \(actions)")
            return
        }
        #expect(error.code == refusal)
        #expect(error.attempts.count == 3)
        #expect(error.reason.contains("192.0.2.1:7000 failed a security check"))
    }

    @Test func theDialsTimeoutEndsPendingAttemptsAndNamesTheAddressesNotTried() throws {
        let clock = ManualClock()
        var (machine, _) = Self.started(
            [Self.v6a, Self.v4a, Self.v6b], clock: clock, delay: .milliseconds(400), timeout: .milliseconds(500))
        #expect(Self.advance(&machine, clock, by: .milliseconds(400)) == [.startAttempt(1, Self.v4a)])
        // The dial's deadline comes before the next attempt's delay ends.
        #expect(machine.nextDeadline == machine.deadline)
        #expect(Self.advance(&machine, clock, by: .milliseconds(99)).isEmpty)
        let actions = Self.advance(&machine, clock, by: .milliseconds(1))
        #expect(actions.prefix(2) == [.cancelAttempt(0), .cancelAttempt(1)])
        guard case .fail(let error) = try #require(actions.last) else {
            Issue.record("expected the dial to fail, got \(actions)")
            return
        }
        #expect(error.code == .unreachable)
        #expect(error.attempts.map(\.address) == [Self.v6a, Self.v4a])
        #expect(error.attempts.allSatisfy { $0.error.code == .handshakeTimedOut(limit: .milliseconds(500)) })
        #expect(error.reason.contains("not tried: [fd00::2]:7000"))
        #expect(machine.attemptSucceeded(0, now: clock.now()) == [.closeLateConnection(0)])
    }

    @Test func cancellingTheDialCancelsEveryPendingAttempt() {
        let clock = ManualClock()
        var (machine, _) = Self.started([Self.v6a, Self.v4a], clock: clock)
        _ = Self.advance(&machine, clock, by: .milliseconds(250))
        let actions = machine.cancel()
        #expect(actions.count == 3)
        #expect(actions.prefix(2) == [.cancelAttempt(0), .cancelAttempt(1)])
        if case .fail(let error) = actions.last {
            #expect(error.code == .closedLocally)
        } else {
            Issue.record("\(actions)")
        }
        #expect(machine.cancel().isEmpty)
    }

    @Test func aPeerWithoutAddressesIsUnreachableAtOnce() {
        let clock = ManualClock()
        let (machine, actions) = Self.started([], clock: clock)
        guard case .fail(let error) = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(error.code == .unreachable && error.attempts.isEmpty)
        #expect(machine.nextDeadline == nil)
    }

    @Test func anAttemptDelayBelowRFC8305sMinimumIsRefused() {
        #expect(throws: ConnectionError.self) {
            try DialConfiguration(connectionAttemptDelay: .milliseconds(9)).validate()
        }
        #expect(throws: ConnectionError.self) { try DialConfiguration(timeout: .zero).validate() }
        #expect(throws: Never.self) { try DialConfiguration().validate() }
    }
}
