import MultipeerIO
import TestIsolation
import Testing

@testable import MulticastDNS

/// Drives a browser on a manual timeline.
struct BrowserHarness {
    var machine: BrowserStateMachine
    var now = IOInstant(nanoseconds: 1_000_000_000_000)
    var queries: [(at: IOInstant, message: DNSMessage, link: MulticastLink)] = []
    var events: [(at: IOInstant, event: BrowserEvent)] = []
    let v4 = MulticastLink(interfaceIndex: 2, interfaceName: "lab0", isIPv6: false)
    let v6 = MulticastLink(interfaceIndex: 2, interfaceName: "lab0", isIPv6: true)
    let type = try! DNSName("_chat._tcp.local.")
    let instance = try! DNSName("Bob._chat._tcp.local.")
    let host = try! DNSName("bob-host.local.")
    let source = MDNSEndpoint(address: IPAddress("198.18.0.20")!, port: 5353)

    init(configuration: BrowserConfiguration = .init(), links: Set<MulticastLink>? = nil) {
        machine = BrowserStateMachine(serviceType: type, configuration: configuration, seed: 3)
        record(machine.setLinks(links ?? [v4], now: now))
    }

    mutating func record(_ actions: [BrowserStateMachine.Action]) {
        for action in actions {
            switch action {
            case .send(let message, let destination): queries.append((now, message, destination.link))
            case .event(let event): events.append((now, event))
            }
        }
    }

    mutating func start() { record(machine.start(now: now)) }

    mutating func run(until instant: IOInstant) {
        while let deadline = machine.nextDeadline, deadline <= instant {
            now = max(now, deadline)
            record(machine.tick(now: now))
        }
        now = instant
    }

    mutating func run(for duration: Duration) { run(until: now + duration) }

    mutating func receive(_ records: [DNSResourceRecord], on link: MulticastLink? = nil) {
        record(
            machine.receive(
                DNSMessage(flags: DNSMessage.responseFlags, answers: records), from: source, on: link ?? v4, now: now))
    }

    func fullAnswer(port: UInt16 = 7000, txt: [[UInt8]] = [Array("v=1".utf8)], ttl: UInt32 = 4500)
        -> [DNSResourceRecord]
    {
        [
            DNSResourceRecord(name: type, ttl: ttl, data: .ptr(instance)),
            DNSResourceRecord(
                name: instance, ttl: 120, cacheFlush: true, data: .srv(priority: 0, weight: 0, port: port, target: host)
            ),
            DNSResourceRecord(name: instance, ttl: ttl, cacheFlush: true, data: .txt(txt)),
            DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .a(IPv4Address(198, 18, 0, 20))),
        ]
    }

    var found: [DiscoveredInstance] { events.compactMap { if case .found(let i) = $0.event { i } else { nil } } }
    var lost: [DiscoveredInstance] { events.compactMap { if case .lost(let i) = $0.event { i } else { nil } } }
    var updated: [DiscoveredInstance] { events.compactMap { if case .updated(let i) = $0.event { i } else { nil } } }
}

@Suite("Browser state machine", .ownThread)
struct BrowserStateMachineTests {
    @Test("queries at once with QU, then 1 s, 2 s, 4 s ... apart up to the cap")
    func queryBackoff() throws {
        var config = BrowserConfiguration()
        config.maximumQueryInterval = .seconds(16)
        var h = BrowserHarness(configuration: config)
        let start = h.now
        h.start()
        h.run(for: .seconds(100))
        let ptrQueries = h.queries.filter { $0.message.questions.contains { $0.name == h.type && $0.type == .ptr } }
        let offsets = ptrQueries.map { ($0.at - start) }
        #expect(Array(offsets.prefix(7)) == [0, 1, 3, 7, 15, 31, 47].map { Duration.seconds($0) })
        #expect(ptrQueries[0].message.questions[0].unicastResponse)
        #expect(!ptrQueries[1].message.questions[0].unicastResponse)
    }

    @Test("a full answer yields found with port, TXT, address and interface")
    func foundFromFullAnswer() throws {
        var h = BrowserHarness()
        h.start()
        h.receive(h.fullAnswer())
        let found = try #require(h.found.first)
        #expect(h.found.count == 1)
        #expect(found.name == "Bob")
        #expect(found.port == 7000)
        #expect(found.txt == [Array("v=1".utf8)])
        #expect(found.addresses.map(\.address) == [IPAddress("198.18.0.20")!])
        #expect(found.addresses.map(\.interfaceName) == ["lab0"])
    }

    @Test("a bare PTR triggers SRV and TXT questions, then address questions, then found")
    func resolution() throws {
        var h = BrowserHarness()
        h.start()
        h.queries.removeAll()
        let all = h.fullAnswer()
        h.receive([all[0]])
        #expect(h.found.isEmpty)
        let ask = try #require(h.queries.last)
        #expect(Set(ask.message.questions.map(\.type)).isSuperset(of: [.srv, .txt]))
        h.receive([all[1], all[2]])
        let askHost = try #require(h.queries.last)
        #expect(askHost.message.questions.contains { $0.name == h.host && $0.type == .a })
        h.receive([all[3]])
        #expect(h.found.count == 1)
    }

    @Test("periodic queries carry PTR known answers with more than half their TTL left")
    func knownAnswers() throws {
        var h = BrowserHarness()
        h.start()
        h.receive(h.fullAnswer(ttl: 4500))
        h.queries.removeAll()
        h.run(for: .seconds(2))
        let query = try #require(h.queries.first { $0.message.questions.contains { $0.type == .ptr } })
        #expect(query.message.answers.count == 1)
        #expect(query.message.answers[0].data == .ptr(h.instance))
        #expect(query.message.answers[0].ttl <= 4500 && query.message.answers[0].ttl > 4490)
    }

    @Test("records are refreshed at 80, 85, 90 and 95 % of their TTL and expire at 100 %")
    func ttlRefreshAndExpiry() throws {
        var config = BrowserConfiguration()
        config.lostTimeout = nil
        config.maximumQueryInterval = .seconds(3600)
        var h = BrowserHarness(configuration: config)
        h.start()
        let at = h.now
        h.receive(
            h.fullAnswer(ttl: 100).map {
                var r = $0; r.ttl = 100; return r
            })
        #expect(h.found.count == 1)
        h.queries.removeAll()
        h.run(for: .seconds(99))
        let refreshes = h.queries.filter { $0.message.questions.contains { $0.type == .srv } }
        let points = refreshes.map { Double(($0.at - at).components.seconds) }
        #expect(points.count == 4)
        for (point, expected) in zip(points, [80.0, 85, 90, 95]) {
            #expect(point >= expected - 1 && point <= expected + 2)
        }
        #expect(h.lost.isEmpty)
        h.run(for: .seconds(2))
        #expect(h.lost.count == 1)
        #expect(h.lost.first?.name == "Bob")
    }

    @Test("a goodbye reports lost at once")
    func goodbye() throws {
        var h = BrowserHarness()
        h.start()
        h.receive(h.fullAnswer())
        h.run(for: .milliseconds(100))
        var bye = h.fullAnswer()[0]
        bye.ttl = 0
        h.receive([bye])
        #expect(h.lost.count == 1)
        #expect(h.events.last?.at == h.now)
    }

    @Test("a silent advertiser is checked at 50, 70 and 90 % of the lost timeout and lost at 100 %")
    func livenessDetectsCrash() throws {
        var config = BrowserConfiguration()
        config.lostTimeout = .seconds(10)
        config.batchWindow = .milliseconds(100)
        var h = BrowserHarness(configuration: config)
        h.start()
        h.run(for: .seconds(20))
        let heard = h.now
        h.receive(h.fullAnswer())
        h.queries.removeAll()
        h.run(for: .seconds(12))
        let checks = h.queries.filter { $0.message.questions.contains { $0.name == h.instance && $0.type == .srv } }
        #expect(checks.map { ($0.at - heard) } == [.seconds(5), .seconds(7), .seconds(9)])
        #expect(checks.allSatisfy { $0.message.answers.isEmpty })
        let lost = try #require(h.events.first { if case .lost = $0.event { true } else { false } })
        #expect(lost.at - heard == .seconds(10))
    }

    @Test("after a liveness loss the browser queries again within a second")
    func requeriesAfterLivenessLoss() throws {
        var config = BrowserConfiguration()
        config.lostTimeout = .seconds(10)
        var h = BrowserHarness(configuration: config)
        h.start()
        h.run(for: .seconds(100))  // the periodic interval has grown to 64 s
        h.receive(h.fullAnswer())
        h.run(for: .seconds(10))
        let lostAt = try #require(h.events.first { if case .lost = $0.event { true } else { false } }?.at)
        h.queries.removeAll()
        h.run(for: .seconds(2))
        let next = try #require(h.queries.first { $0.message.questions.contains { $0.type == .ptr } })
        #expect(next.at - lostAt <= .seconds(1))
    }

    @Test("a packet that asks the PTR question carries the known answers, refresh or periodic")
    func refreshCarriesKnownAnswers() throws {
        var config = BrowserConfiguration()
        config.lostTimeout = nil
        var h = BrowserHarness(configuration: config)
        h.start()
        h.receive(h.fullAnswer(ttl: 4500))
        let other = try DNSName("Carol._chat._tcp.local.")
        h.receive([DNSResourceRecord(name: h.type, ttl: 100, data: .ptr(other))])
        h.queries.removeAll()
        h.run(for: .seconds(100))
        for query in h.queries where query.message.questions.contains(where: { $0.type == .ptr }) {
            #expect(query.message.answers.contains { $0.data == .ptr(h.instance) })
        }
    }

    @Test("another querier's identical question suppresses our next query on that link only")
    func duplicateQuestionSuppressionIsPerLink() throws {
        var h = BrowserHarness(links: [])
        h.record(h.machine.setLinks([h.v4, h.v6], now: h.now))
        h.start()
        h.run(for: .milliseconds(500))
        h.queries.removeAll()
        h.run(for: .milliseconds(400))  // next periodic query is due at +1 s
        let other = MDNSEndpoint(address: IPAddress("198.18.0.30")!, port: 5353)
        h.record(
            h.machine.receive(
                DNSMessage(questions: [DNSQuestion(name: h.type, type: .ptr)]), from: other, on: h.v4, now: h.now))
        h.run(for: .milliseconds(200))
        let links = h.queries.filter { $0.message.questions.contains { $0.type == .ptr } }.map(\.link)
        #expect(links == [h.v6])
    }

    @Test("absurd TTLs are capped, so records still expire")
    func ttlCap() throws {
        var config = BrowserConfiguration()
        config.lostTimeout = nil
        config.maximumTTL = 100
        var h = BrowserHarness(configuration: config)
        h.start()
        h.receive(
            h.fullAnswer().map {
                var r = $0; r.ttl = .max; return r
            })
        #expect(h.found.count == 1)
        h.run(for: .seconds(101))
        #expect(h.lost.count == 1)
    }

    @Test("responses from a port other than 5353 are ignored")
    func ignoresOtherPorts() throws {
        var h = BrowserHarness()
        h.start()
        let legacy = MDNSEndpoint(address: IPAddress("198.18.0.20")!, port: 40000)
        h.record(
            h.machine.receive(
                DNSMessage(flags: DNSMessage.responseFlags, answers: h.fullAnswer()), from: legacy, on: h.v4, now: h.now
            ))
        #expect(h.found.isEmpty)
    }

    @Test("an advertiser that answers the liveness checks is never lost")
    func livenessAnswered() throws {
        var h = BrowserHarness()
        h.start()
        h.receive(h.fullAnswer())
        for _ in 0..<30 {
            h.run(for: .seconds(1))
            if h.queries.last?.message.questions.contains(where: { $0.type == .srv }) == true {
                h.receive([h.fullAnswer()[1], h.fullAnswer()[3]])
                h.queries.removeAll()
            }
        }
        #expect(h.lost.isEmpty)
        #expect(h.machine.statistics.livenessQueries >= 4)
    }

    @Test("a changed TXT record is reported as updated")
    func txtUpdate() throws {
        var h = BrowserHarness()
        h.start()
        h.receive(h.fullAnswer())
        h.run(for: .seconds(2))
        h.receive([h.fullAnswer(txt: [Array("v=2".utf8)])[2]])
        #expect(h.updated.count == 1)
        #expect(h.updated.first?.txt == [Array("v=2".utf8)])
    }

    @Test("an instance seen over IPv4 and IPv6 is found once, with both addresses")
    func deduplicatesAcrossFamilies() throws {
        var h = BrowserHarness(links: nil)
        h.record(h.machine.setLinks([h.v4, h.v6], now: h.now))
        h.start()
        h.receive(h.fullAnswer(), on: h.v4)
        var v6 = h.fullAnswer()
        v6[3] = DNSResourceRecord(name: h.host, ttl: 120, cacheFlush: true, data: .aaaa(IPv6Address("fd00::20")!))
        h.run(for: .seconds(2))
        h.receive(v6, on: h.v6)
        #expect(h.found.count == 1)
        #expect(h.updated.last?.addresses.map(\.address) == [IPAddress("198.18.0.20")!, IPAddress("fd00::20")!])
        // Goodbye on one family only: still there, one address fewer.
        var bye = v6[0]
        bye.ttl = 0
        h.receive([bye], on: h.v6)
        #expect(h.lost.isEmpty)
    }

    @Test("a flood of fake instances is bounded by the instance and cache limits")
    func boundedCache() throws {
        var config = BrowserConfiguration()
        config.maximumInstances = 100
        config.maximumCachedRecords = 500
        var h = BrowserHarness(configuration: config)
        h.start()
        for i in 0..<5000 {
            let name = try DNSName(labels: ["fake\(i)", "_chat", "_tcp", "local"])
            h.receive([DNSResourceRecord(name: h.type, ttl: 4500, data: .ptr(name))])
        }
        #expect(h.machine.cachedRecordCount <= 500)
        #expect(h.machine.statistics.recordsDroppedCacheFull >= 4500)
    }

    @Test("records of other services and unrelated hosts are not cached")
    func ignoresUnrelated() throws {
        var h = BrowserHarness()
        h.start()
        let other = try DNSName("_other._tcp.local.")
        h.receive([
            DNSResourceRecord(name: other, ttl: 4500, data: .ptr(try DNSName("X._other._tcp.local."))),
            DNSResourceRecord(name: try DNSName("random.local."), ttl: 120, data: .a(IPv4Address(1, 2, 3, 4))),
        ])
        #expect(h.machine.cachedRecordCount == 0)
    }
}
