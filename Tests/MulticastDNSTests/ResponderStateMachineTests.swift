import MultipeerIO
import Testing

@testable import MulticastDNS

/// Drives a responder on a manual timeline: no sockets, no sleeping.
struct ResponderHarness {
    var machine: ResponderStateMachine
    var now = IOInstant(nanoseconds: 1_000_000_000_000)
    var sent: [(at: IOInstant, message: DNSMessage, destination: MDNSDestination)] = []
    var events: [(at: IOInstant, event: ResponderEvent)] = []
    let link = MulticastLink(interfaceIndex: 2, interfaceName: "lab0", isIPv6: false)
    let service = ResponderStateMachine.Service(
        instanceName: "Alice", serviceType: try! DNSName("_chat._tcp.local."), port: 4242, txt: [Array("v=1".utf8)])
    var id: ResponderStateMachine.ServiceID?

    init(configuration: ResponderConfiguration = .init(), seed: UInt64 = 7) {
        machine = try! ResponderStateMachine(hostLabel: "host-a", configuration: configuration, seed: seed)
        record(machine.setLinks([link: [IPAddress("198.18.0.10")!]], now: now))
    }

    mutating func record(_ actions: [ResponderStateMachine.Action]) {
        for action in actions {
            switch action {
            case .send(let message, let destination): sent.append((now, message, destination))
            case .event(let event): events.append((now, event))
            }
        }
    }

    mutating func register() {
        let (id, actions) = try! machine.register(service, now: now)
        self.id = id
        record(actions)
    }

    /// Advances time to `instant`, running every deadline on the way.
    mutating func run(until instant: IOInstant) {
        while let deadline = machine.nextDeadline, deadline <= instant {
            now = max(now, deadline)
            record(machine.tick(now: now))
        }
        now = instant
    }

    mutating func run(for duration: Duration) { run(until: now + duration) }

    mutating func receive(
        _ message: DNSMessage, from source: MDNSEndpoint = .init(address: IPAddress("198.18.0.20")!, port: 5353)
    ) {
        record(machine.receive(message, from: source, on: link, now: now))
    }

    /// Registers and runs until the last announcement.
    mutating func establish() {
        register()
        run(for: .seconds(5))
        sent.removeAll()
        events.removeAll()
    }

    var instanceName: DNSName { try! DNSName("Alice._chat._tcp.local.") }

    /// Another host's SRV record for our instance name: a conflict.
    func rivalSRV(port: UInt16, cacheFlush: Bool = true) -> DNSResourceRecord {
        DNSResourceRecord(
            name: instanceName, ttl: 120, cacheFlush: cacheFlush,
            data: .srv(priority: 0, weight: 0, port: port, target: try! DNSName("other.local.")))
    }
    var hostName: DNSName { try! DNSName("host-a.local.") }
}

@Suite("Responder state machine")
struct ResponderStateMachineTests {
    @Test("probes three times 250 ms apart after a 0-250 ms delay, then announces and registers")
    func probeAnnounceTimeline() throws {
        var h = ResponderHarness()
        let start = h.now
        h.register()
        #expect(h.sent.isEmpty)
        h.run(for: .seconds(10))
        let probes = h.sent.filter { !$0.message.isResponse }
        let announcements = h.sent.filter { $0.message.isResponse }
        try #require(probes.count == 3)
        let firstDelay = probes[0].at - start
        #expect(firstDelay >= .zero && firstDelay <= .milliseconds(250))
        #expect(probes[1].at - probes[0].at == .milliseconds(250))
        #expect(probes[2].at - probes[1].at == .milliseconds(250))
        // Probe contents: ANY questions for the instance and the host, QU on the first probe only, proposed
        // records in the authority section.
        #expect(probes[0].message.questions.map(\.type) == [.any, .any])
        #expect(probes[0].message.questions.map(\.name) == [h.instanceName, h.hostName])
        #expect(probes[0].message.questions.allSatisfy { $0.unicastResponse })
        #expect(!probes[1].message.questions.contains { $0.unicastResponse })
        #expect(Set(probes[0].message.authorities.map(\.type)) == [.srv, .txt, .a])
        // Announcements: 250 ms after the third probe, then 1 s and 2 s later.
        try #require(announcements.count == 3)
        #expect(announcements[0].at - probes[2].at == .milliseconds(250))
        #expect(announcements[1].at - announcements[0].at == .seconds(1))
        #expect(announcements[2].at - announcements[1].at == .seconds(2))
        let answers = announcements[0].message.answers
        let typeName = try DNSName("_chat._tcp.local.")
        let enumeration = try DNSName("_services._dns-sd._udp.local.")
        #expect(answers.contains { $0.type == .ptr && $0.name == typeName && !$0.cacheFlush })
        #expect(answers.contains { $0.type == .ptr && $0.name == enumeration })
        #expect(answers.contains { $0.type == .srv && $0.cacheFlush && $0.ttl == 120 })
        #expect(answers.contains { $0.type == .txt && $0.cacheFlush && $0.ttl == 4500 })
        #expect(answers.contains { $0.type == .a && $0.data == .a(IPv4Address("198.18.0.10")!) })
        #expect(h.events.map(\.event) == [.registered(h.id!, name: "Alice")])
        #expect(h.events[0].at == announcements[0].at)
        #expect(h.machine.nextDeadline == nil)
    }

    @Test("a conflicting answer while probing renames the service and probes the new name")
    func conflictRenames() throws {
        var h = ResponderHarness()
        h.register()
        h.run(for: .milliseconds(300))
        let other = h.rivalSRV(port: 9, cacheFlush: true)
        h.sent.removeAll()
        h.receive(DNSMessage(flags: DNSMessage.responseFlags, answers: [other]))
        #expect(h.events.map(\.event) == [.renamed(h.id!, from: "Alice", to: "Alice (2)")])
        h.run(for: .seconds(5))
        let probes = h.sent.filter { !$0.message.isResponse }
        #expect(probes.count == 3)
        #expect(probes.allSatisfy { $0.message.questions[0].name == (try! DNSName("Alice (2)._chat._tcp.local.")) })
        #expect(h.events.last?.event == .registered(h.id!, name: "Alice (2)"))
        #expect(h.machine.instanceName(of: h.id!) == "Alice (2)")
    }

    @Test("our own probes and announcements looped back are not conflicts")
    func ownPacketsAreNotConflicts() {
        var h = ResponderHarness()
        h.register()
        h.run(for: .milliseconds(260))
        for (_, message, _) in h.sent {
            h.receive(message, from: .init(address: IPAddress("198.18.0.10")!, port: 5353))
        }
        h.run(for: .seconds(5))
        for (_, message, _) in h.sent where message.isResponse {
            h.receive(message, from: .init(address: IPAddress("198.18.0.10")!, port: 5353))
        }
        #expect(h.events.map(\.event) == [.registered(h.id!, name: "Alice")])
    }

    @Test("simultaneous probes: the lexicographically earlier set defers one second, the later one carries on")
    func simultaneousProbeTieBreak() throws {
        // Both propose the same TXT; ours has SRV port 4242, theirs port 9999, which sorts later, so we lose.
        let txt = DNSResourceRecord(
            name: try DNSName("Alice._chat._tcp.local."), ttl: 4500, data: .txt([Array("v=1".utf8)]))
        var loser = ResponderHarness()
        loser.register()
        loser.run(for: .milliseconds(260))
        let firstProbeCount = loser.sent.count
        #expect(firstProbeCount >= 1)
        let theirs = DNSResourceRecord(
            name: loser.instanceName, ttl: 120,
            data: .srv(priority: 0, weight: 0, port: 9999, target: try DNSName("other.local.")))
        loser.receive(
            DNSMessage(questions: [DNSQuestion(name: loser.instanceName, type: .any)], authorities: [theirs, txt]))
        let deferredAt = loser.now
        loser.sent.removeAll()
        loser.run(for: .seconds(10))
        let nextProbe = try #require(loser.sent.first { !$0.message.isResponse })
        #expect(nextProbe.at - deferredAt == .seconds(1))
        #expect(loser.sent.filter { !$0.message.isResponse }.count == 3)

        var winner = ResponderHarness()
        winner.register()
        winner.run(for: .milliseconds(260))
        let earlier = DNSResourceRecord(
            name: winner.instanceName, ttl: 120,
            data: .srv(priority: 0, weight: 0, port: 1, target: try DNSName("other.local.")))
        let before = winner.sent.count
        winner.receive(
            DNSMessage(questions: [DNSQuestion(name: winner.instanceName, type: .any)], authorities: [earlier, txt]))
        winner.run(for: .seconds(1))
        // Carries on: the remaining probes and the first announcement within a second.
        #expect(winner.sent.count > before)
        #expect(winner.events.first?.event == .registered(winner.id!, name: "Alice"))
        #expect(ProbeTieBreak.compare([earlier], [theirs]) < 0)
        #expect(ProbeTieBreak.compare([theirs, txt], [txt, theirs]) == 0)
        // Records are compared in sorted order (class, type, data): TXT (16) sorts before SRV (33).
        #expect(ProbeTieBreak.compare([txt], [theirs]) < 0)
        // When one list is a prefix of the other, the longer list wins.
        #expect(ProbeTieBreak.compare([txt, theirs], [txt]) > 0)
    }

    @Test("a shared-record query is answered after 20-120 ms with SRV, TXT and address as additionals")
    func answersPTRWithAdditionals() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        let asked = h.now
        h.receive(DNSMessage(questions: [DNSQuestion(name: try DNSName("_chat._tcp.local."), type: .ptr)]))
        #expect(h.sent.isEmpty)
        h.run(for: .milliseconds(200))
        let reply = try #require(h.sent.first)
        #expect(h.sent.count == 1)
        let delay = reply.at - asked
        #expect(delay >= .milliseconds(20) && delay <= .milliseconds(120))
        #expect(reply.destination == .multicast(h.link))
        #expect(reply.message.answers.map(\.type) == [.ptr])
        #expect(Set(reply.message.additionals.map(\.type)).isSuperset(of: [.srv, .txt, .a]))
    }

    @Test("service type enumeration (RFC 6763 section 9) lists our type")
    func serviceTypeEnumeration() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        h.receive(DNSMessage(questions: [DNSQuestion(name: try DNSName("_services._dns-sd._udp.local."), type: .ptr)]))
        h.run(for: .milliseconds(200))
        let reply = try #require(h.sent.first)
        #expect(reply.message.answers.map(\.data) == [.ptr(try DNSName("_chat._tcp.local."))])
    }

    @Test("known answers with at least half their TTL suppress the answer; stale ones do not")
    func knownAnswerSuppression() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        let type = try DNSName("_chat._tcp.local.")
        let ptr = DNSResourceRecord(name: type, ttl: 3000, data: .ptr(h.instanceName))
        h.receive(DNSMessage(questions: [DNSQuestion(name: type, type: .ptr)], answers: [ptr]))
        h.run(for: .seconds(1))
        #expect(h.sent.isEmpty)
        var stale = ptr
        stale.ttl = 1000
        h.receive(DNSMessage(questions: [DNSQuestion(name: type, type: .ptr)], answers: [stale]))
        h.run(for: .seconds(1))
        #expect(h.sent.count == 1)
    }

    @Test("a unique-record question is answered at once; a flood is answered at most once per second")
    func uniqueAnswersAndRateLimit() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        let question = DNSQuestion(name: h.instanceName, type: .srv)
        h.receive(DNSMessage(questions: [question]))
        #expect(h.sent.count == 1)
        #expect(h.sent[0].message.answers.map(\.type) == [.srv])
        #expect(h.sent[0].message.additionals.contains { $0.type == .a })
        // 1000 queries over 2 s: the SRV may go out at most once per second.
        h.sent.removeAll()
        for _ in 0..<1000 {
            h.receive(DNSMessage(questions: [question]))
            h.run(for: .milliseconds(2))
        }
        h.run(for: .seconds(1))
        #expect(h.sent.count <= 3)
        #expect(h.sent.count >= 2)
        for pair in zip(h.sent, h.sent.dropFirst()) { #expect(pair.1.at - pair.0.at >= .seconds(1)) }
        #expect(h.machine.statistics.rateLimitedAnswers > 900)
    }

    @Test("a QU question gets a unicast answer when the record was multicast recently")
    func unicastResponse() throws {
        var h = ResponderHarness()
        h.establish()
        let querier = MDNSEndpoint(address: IPAddress("198.18.0.20")!, port: 5353)
        h.receive(
            DNSMessage(questions: [DNSQuestion(name: h.instanceName, type: .srv, unicastResponse: true)]), from: querier
        )
        #expect(h.sent.count == 1)
        #expect(h.sent[0].destination == .unicast(querier, h.link))
    }

    @Test("a host name conflict after claiming probes again before renaming")
    func hostConflictAfterClaiming() throws {
        var h = ResponderHarness()
        h.establish()
        let other = DNSResourceRecord(
            name: h.hostName, ttl: 120, cacheFlush: true, data: .a(IPv4Address(198, 18, 0, 99)))
        h.receive(DNSMessage(flags: DNSMessage.responseFlags, answers: [other]))
        #expect(h.events.isEmpty)
        #expect(h.machine.hostName == h.hostName)
        h.run(for: .seconds(3))
        #expect(h.events.isEmpty, "\(h.events)")
        #expect(h.machine.hostName == h.hostName)
        #expect(h.sent.filter { !$0.message.isResponse }.count == 3, "probed again")
    }

    @Test("a delayed unicast answer carries the TXT record as it is when sent, not as it was when asked")
    func delayedUnicastAnswerIsNotStale() throws {
        var h = ResponderHarness()
        h.establish()
        let querier = MDNSEndpoint(address: IPAddress("198.18.0.20")!, port: 5353)
        h.receive(
            DNSMessage(questions: [
                DNSQuestion(name: try DNSName("_chat._tcp.local."), type: .ptr, unicastResponse: true)
            ]),
            from: querier)
        #expect(h.sent.isEmpty, "a shared answer waits 20-120 ms")
        h.record(h.machine.updateTXT([Array("v=2".utf8)], for: h.id!, now: h.now))
        h.run(for: .milliseconds(200))
        let reply = try #require(h.sent.first { $0.destination == .unicast(querier, h.link) })
        let txt = (reply.message.answers + reply.message.additionals).filter { $0.type == .txt }.map(\.data)
        #expect(txt == [.txt([Array("v=2".utf8)])])
    }

    @Test("legacy unicast queries get the id, the question, TTLs of at most 10 s and no cache-flush bits")
    func legacyUnicast() throws {
        var h = ResponderHarness()
        h.establish()
        let querier = MDNSEndpoint(address: IPAddress("198.18.0.20")!, port: 40000)
        let question = DNSQuestion(name: h.instanceName, type: .srv)
        h.receive(DNSMessage(id: 0x1234, questions: [question]), from: querier)
        let reply = try #require(h.sent.first)
        #expect(reply.destination == .unicast(querier, h.link))
        #expect(reply.message.id == 0x1234)
        #expect(reply.message.questions == [question])
        #expect((reply.message.answers + reply.message.additionals).allSatisfy { $0.ttl <= 10 && !$0.cacheFlush })
    }

    @Test("unicast answers are budgeted, so a query flood with spoofed sources is not amplified")
    func unicastBudget() throws {
        var config = ResponderConfiguration()
        config.unicastAnswersPerSecond = 10
        var h = ResponderHarness(configuration: config)
        h.establish()
        for i in 0..<200 {
            let source = MDNSEndpoint(address: .v4(IPv4Address(198, 18, 1, UInt8(i % 250))), port: 40000)
            h.receive(
                DNSMessage(id: UInt16(i), questions: [DNSQuestion(name: h.instanceName, type: .srv)]), from: source)
        }
        h.run(for: .milliseconds(1))
        #expect(h.sent.filter { if case .unicast = $0.destination { true } else { false } }.count == 10)
        #expect(h.machine.statistics.unicastAnswersRefused == 190)
    }

    @Test("a question for a type we lack is answered with NSEC")
    func negativeAnswer() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        h.receive(DNSMessage(questions: [DNSQuestion(name: h.hostName, type: .aaaa)]))
        let reply = try #require(h.sent.first)
        #expect(reply.message.answers.map(\.type) == [.nsec])
        #expect(reply.message.answers[0].data == .nsec(next: h.hostName, types: [.a]))
    }

    @Test("a probe for an established name is defended at once")
    func defendsName() throws {
        var h = ResponderHarness()
        h.establish()
        h.run(for: .seconds(2))
        let theirs = DNSResourceRecord(
            name: h.instanceName, ttl: 120, data: .srv(priority: 0, weight: 0, port: 1, target: try DNSName("x.local."))
        )
        h.receive(DNSMessage(questions: [DNSQuestion(name: h.instanceName, type: .any)], authorities: [theirs]))
        let reply = try #require(h.sent.first { $0.message.isResponse })
        #expect(reply.at == h.now)
        #expect(reply.message.answers.contains { $0.type == .srv && $0.cacheFlush })
    }

    @Test("a TXT update is announced with the cache-flush bit")
    func txtUpdate() throws {
        var h = ResponderHarness()
        h.establish()
        h.record(h.machine.updateTXT([Array("v=2".utf8)], for: h.id!, now: h.now))
        let announcement = try #require(h.sent.first)
        #expect(announcement.at == h.now)
        #expect(announcement.message.answers.contains { $0.data == .txt([Array("v=2".utf8)]) && $0.cacheFlush })
        h.run(for: .seconds(5))
        #expect(h.sent.count == 3)
    }

    @Test("rate-limit history stays bounded however often the TXT record changes")
    func historyStaysBounded() throws {
        var h = ResponderHarness()
        h.establish()
        let baseline = h.machine.rateLimitHistoryCount
        for version in 0..<200 {
            h.record(h.machine.updateTXT([Array("v=\(version)".utf8)], for: h.id!, now: h.now))
            h.run(for: .seconds(4))
        }
        #expect(h.machine.rateLimitHistoryCount <= baseline + 1)
    }

    @Test("stop sends goodbyes with TTL 0 twice, then reports unregistered")
    func goodbye() throws {
        var h = ResponderHarness()
        h.establish()
        h.record(h.machine.unregister(h.id!, now: h.now))
        h.run(for: .seconds(1))
        #expect(h.sent.count == 2)
        #expect(h.sent.allSatisfy { $0.message.answers.allSatisfy { $0.ttl == 0 } })
        let types = Set(h.sent[0].message.answers.map(\.type))
        #expect(types == [.ptr, .srv, .txt, .a])
        #expect(h.sent[1].at - h.sent[0].at == .milliseconds(250))
        #expect(h.events.map(\.event) == [.unregistered(h.id!)])
        #expect(h.machine.isIdle)
    }

    @Test("our own probe heard on a second interface of this host is not a rival")
    func ownProbeAcrossInterfaces() throws {
        var h = ResponderHarness()
        let eth = MulticastLink(interfaceIndex: 2, interfaceName: "eth0", isIPv6: true)
        let wlan = MulticastLink(interfaceIndex: 3, interfaceName: "wlan0", isIPv6: true)
        h.record(h.machine.setLinks([eth: [IPAddress("fd00::10")!], wlan: [IPAddress("fd00::20")!]], now: h.now))
        h.register()
        h.run(for: .milliseconds(260))
        // Each probe sent on one interface comes back in on the other (same LAN, IPv6 has no martian filter).
        for (_, message, destination) in h.sent where !message.isResponse {
            let other = destination.link == eth ? wlan : eth
            h.record(
                h.machine.receive(
                    message, from: .init(address: IPAddress("fd00::10")!, port: 5353), on: other, now: h.now))
        }
        h.run(for: .seconds(2))
        #expect(h.events.map(\.event) == [.registered(h.id!, name: "Alice")])
    }

    @Test("a conflicting SRV and TXT for a claimed name send it back to probing, without renaming")
    func conflictAfterClaimingProbesFirst() throws {
        var h = ResponderHarness()
        h.establish()
        let target = try DNSName("other.local.")
        h.receive(
            DNSMessage(
                flags: DNSMessage.responseFlags,
                answers: [
                    DNSResourceRecord(
                        name: h.instanceName, ttl: 120, cacheFlush: true,
                        data: .srv(priority: 0, weight: 0, port: 9, target: target)),
                    DNSResourceRecord(
                        name: h.instanceName, ttl: 4500, cacheFlush: true, data: .txt([Array("x=1".utf8)])),
                ]))
        #expect(h.events.isEmpty, "no rename on one packet: \(h.events)")
        #expect(h.sent.contains { !$0.message.isResponse && $0.message.questions.first?.name == h.instanceName })
        h.run(for: .seconds(3))
        #expect(h.events.isEmpty, "nobody contested the probe, so the name stays: \(h.events)")
        #expect(h.sent.filter { !$0.message.isResponse }.count == 3)
        #expect(h.sent.last?.message.isResponse == true, "announced again after probing")
    }

    @Test("a claimed name still contested while probing again is renamed and registered under the new name")
    func contestedAfterClaimingRenames() throws {
        var h = ResponderHarness()
        h.establish()
        let rival = DNSMessage(
            flags: DNSMessage.responseFlags,
            answers: [
                h.rivalSRV(port: 9, cacheFlush: true)
            ])
        h.receive(rival)
        h.run(for: .milliseconds(100))
        h.receive(rival)  // the rival answers our probe
        h.run(for: .seconds(3))
        #expect(
            h.events.map(\.event) == [
                .renamed(h.id!, from: "Alice", to: "Alice (2)"), .registered(h.id!, name: "Alice (2)"),
            ])
    }

    @Test("responses from a port other than 5353 are ignored (RFC 6762 section 11)")
    func ignoresResponsesFromOtherPorts() throws {
        var h = ResponderHarness()
        h.register()
        h.run(for: .milliseconds(300))
        let other = h.rivalSRV(port: 9, cacheFlush: true)
        h.receive(
            DNSMessage(flags: DNSMessage.responseFlags, answers: [other]),
            from: .init(address: IPAddress("198.18.0.20")!, port: 40000))
        h.run(for: .seconds(2))
        #expect(h.events.map(\.event) == [.registered(h.id!, name: "Alice")])
    }

    @Test("TXT updates in a tight loop coalesce into at most one announcement round per second")
    func rapidUpdatesCoalesce() throws {
        var h = ResponderHarness()
        h.establish()
        let start = h.now
        for version in 0..<100 {
            h.record(h.machine.updateTXT([Array("v=\(version)".utf8)], for: h.id!, now: h.now))
            h.run(for: .milliseconds(20))
        }
        let during = h.sent.filter { $0.at - start < .seconds(2) }
        #expect(during.count <= 3, "\(during.count) announcements in 2 s")
        h.run(for: .seconds(5))
        #expect(h.sent.last?.message.answers.contains { $0.data == .txt([Array("v=99".utf8)]) } == true)
    }

    @Test("a host name conflict while probing renames the host and probes again")
    func hostConflict() throws {
        var h = ResponderHarness()
        h.register()
        h.run(for: .milliseconds(300))
        let other = DNSResourceRecord(
            name: h.hostName, ttl: 120, cacheFlush: true, data: .a(IPv4Address(198, 18, 0, 99)))
        h.receive(DNSMessage(flags: DNSMessage.responseFlags, answers: [other]))
        #expect(h.events.map(\.event) == [.hostRenamed(from: "host-a.local.", to: "host-a-2.local.")])
        h.run(for: .seconds(5))
        #expect(h.machine.hostName == (try DNSName("host-a-2.local.")))
        #expect(h.events.last?.event == .registered(h.id!, name: "Alice"))
    }
}
