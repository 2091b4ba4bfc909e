import MultipeerIO
import Testing

@testable import Multipeer

/// Both sides of an invitation on a manual clock.
@Suite("Invitation state machines")
struct InvitationStateMachineTests {
    static let start = IOInstant(nanoseconds: 5_000_000_000)
    static let id = [UInt8](repeating: 4, count: 16)
    /// The invitee's session, as its accepted answer names it.
    static let session = SessionWire.SessionKey(
        id: [UInt8](repeating: 6, count: 16), secret: [UInt8](repeating: 7, count: 32))

    static func invite(_ milliseconds: UInt32) -> SessionWire.Message {
        .invite(id: id, timeoutMilliseconds: milliseconds, serviceType: "_t._tcp", context: [], encryption: .required)
    }

    /// An inviter that dialed, passed its checks and sent the invite at `after` into its 10 s.
    static func awaitingAnswer(after: Duration = .seconds(3)) -> (InviterStateMachine, [InviterStateMachine.Action]) {
        var machine = InviterStateMachine(timeout: .seconds(10), id: id, now: start)
        #expect(machine.connected(refusal: nil).isEmpty)
        let actions = machine.verified(.accept, alreadyMember: false, invite: invite, now: start + after)
        return (machine, actions)
    }

    @Test func theInviteCarriesTheTimeLeftAndTheDeadlineWithdrawsIt() {
        var (machine, actions) = Self.awaitingAnswer(after: .seconds(3))
        // Dialing took 3 s of the 10: the invitee is told 7 s, and this side waits as long.
        #expect(actions == [.send(Self.invite(7_000)), .armDeadline(after: .seconds(7))])
        #expect(
            machine.deadlinePassed() == [
                .send(.inviteCancel(id: Self.id, reason: "no answer within 10.0 seconds")),
                .close(code: 0, reason: "invitation timed out"), .finish(.timedOut),
            ])
        // Whatever comes after the outcome changes nothing.
        #expect(machine.received(.inviteAnswer(id: Self.id, answer: .accepted, reason: "")).isEmpty)
        #expect(machine.outcome == .timedOut)
    }

    @Test func everyAnswerEndsTheInvitationWithItsOutcome() {
        let cases: [(SessionWire.Answer, String, InvitationOutcome?)] = [
            (.declined, "busy", .declined(reason: "busy")), (.timedOut, "", .timedOut),
            (.refused, "full", .refused(reason: "full")), (.alreadyConnected, "", .accepted), (.accepted, "", nil),
        ]
        for (answer, reason, outcome) in cases {
            var (machine, _) = Self.awaitingAnswer()
            let actions = machine.received(
                .inviteAnswer(
                    id: Self.id, answer: answer, reason: reason, session: answer == .accepted ? Self.session : nil))
            if let outcome {
                #expect(actions.last == .finish(outcome), "\(answer)")
            } else {
                // Accepted: the mesh decides whether the link is kept, knowing the session the invitee holds.
                #expect(actions == [.admit(Self.session)])
                let turnedAway = machine.admitted(
                    kept: false, isMember: false, disconnected: false, refusal: "the session is full (8 peers)")
                #expect(turnedAway == [.finish(.refused(reason: "the session is full (8 peers)"))])
            }
        }
        // An answer to another invitation, another message, an acceptance that names no session of the invitee
        // or a refusal that names one, breaks the protocol.
        let broken: [SessionWire.Message] = [
            .leave(reason: "x"),
            .inviteAnswer(id: [UInt8](repeating: 5, count: 16), answer: .accepted, reason: "", session: Self.session),
            .inviteAnswer(id: Self.id, answer: .accepted, reason: ""),
            .inviteAnswer(id: Self.id, answer: .declined, reason: "no", session: Self.session),
        ]
        for message in broken {
            var (machine, _) = Self.awaitingAnswer()
            #expect(
                machine.received(message).last
                    == .finish(.refused(reason: "the peer broke the protocol (no answer to the invitation)")),
                "\(message)")
        }
    }

    @Test func theConnectionEndingBeforeTheAnswerIsUnreachable() {
        var (machine, _) = Self.awaitingAnswer()
        guard case .finish(.unreachable(let error))? = machine.connectionEnded("reset", code: .connectionLost).last
        else {
            Issue.record("not unreachable")
            return
        }
        #expect(error.reason == "the connection ended before an answer: reset")
    }

    @Test func stoppingSaysLeaveOrWithdrawsAndADialThatRanPastTheDeadlineTimedOut() {
        var (leaving, _) = Self.awaitingAnswer()
        #expect(
            leaving.stop(.disconnected) == [
                .send(.leave(reason: "left")), .close(code: 0, reason: "the invitation ended"),
                .finish(.refused(reason: "the session was disconnected")),
            ])
        var (cancelled, _) = Self.awaitingAnswer()
        #expect(
            cancelled.stop(.cancelled).first
                == .send(.inviteCancel(id: Self.id, reason: "the inviter cancelled the invitation")))
        // The deadline cancelled the dial: timed out, not unreachable.
        var dialing = InviterStateMachine(timeout: .seconds(10), id: Self.id, now: Self.start)
        #expect(
            dialing.dialFailed(ConnectionError(code: .unreachable, reason: "cancelled"), timedOut: true)
                == [.finish(.timedOut)])
        // The hook took the whole deadline: timed out without sending the invite.
        var slow = InviterStateMachine(timeout: .seconds(10), id: Self.id, now: Self.start)
        _ = slow.connected(refusal: nil)
        #expect(
            slow.verified(.accept, alreadyMember: false, invite: Self.invite, now: Self.start + .seconds(10))
                == [.close(code: 0, reason: "invitation timed out"), .finish(.timedOut)])
        // A refusal by identity or security closes with code 3 and says why.
        var impostor = InviterStateMachine(timeout: .seconds(10), id: Self.id, now: Self.start)
        #expect(
            impostor.connected(refusal: "identity mismatch")
                == [.close(code: 3, reason: "identity mismatch"), .finish(.refused(reason: "identity mismatch"))])
    }

    // MARK: The invitee's side

    @Test func anInvitationIsAnsweredOnceAndEndsAtItsDeadline() {
        var machine = InviteeStateMachine()
        #expect(
            machine.deadlinePassed(timeout: .seconds(30)) == [
                .release, .answer(.timedOut, "no answer within 30.0 seconds"), .closeLink("invitation expired"),
            ])
        #expect(machine.claim(accepting: true) == .failure(.closed("expired: no answer within 30.0 seconds")))
        var answered = InviteeStateMachine()
        #expect(answered.claim(accepting: true) == .success([.release]))
        #expect(answered.claim(accepting: true) == .failure(.alreadyAnswered))
        // The deadline no longer counts once the application answered.
        #expect(answered.deadlinePassed(timeout: .seconds(30)).isEmpty)
        var declined = InviteeStateMachine()
        #expect(
            declined.decline(reason: "busy") == [
                .release, .answer(.declined, "busy"), .closeLink("invitation declined"),
            ])
    }

    @Test func aWithdrawalWhileAcceptingIsKeptForTheAcceptanceToStopWith() {
        var pending = InviteeStateMachine()
        #expect(pending.withdrawnByInviter("late") == [.release, .closeLink("invitation withdrawn")])
        #expect(pending.claim(accepting: true) == .failure(.closed("was withdrawn by the inviter: late")))
        var accepting = InviteeStateMachine()
        _ = accepting.claim(accepting: true)
        #expect(accepting.withdrawnByInviter("late") == [.closeLink("invitation withdrawn")])
        #expect(accepting.withdrawn == "the inviter withdrew the invitation: late")
        var left = InviteeStateMachine()
        _ = left.claim(accepting: true)
        _ = left.inviterLeft()
        #expect(left.withdrawn == "left")
        _ = left.connectionClosed("closed")
        #expect(left.connectionEnded)
    }
}
