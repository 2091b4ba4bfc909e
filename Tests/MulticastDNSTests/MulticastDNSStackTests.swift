import MultipeerIO
import Testing

@testable import MulticastDNS

/// The public API end to end over the loopback interface: real sockets and the real event loop, nothing
/// leaves the host, no root needed. Each test uses a service type of its own, so runs never see each other.
@Suite("MulticastDNSStack over loopback")
struct MulticastDNSStackTests {
    static func uniqueType() throws -> ServiceType {
        try ServiceType("t" + String(UInt32.random(in: 0...UInt32.max), radix: 36))
    }

    static var loopback: DiscoveryConfiguration {
        var configuration = DiscoveryConfiguration()
        configuration.interfaces = .loopbackOnly
        return configuration
    }

    /// The next event matching `predicate`, or nil after `timeout`.
    static func next(
        _ events: AsyncStream<ServiceBrowserEvent>, within timeout: Duration,
        where predicate: @escaping @Sendable (ServiceBrowserEvent) -> Bool
    ) async -> ServiceBrowserEvent? {
        await withTaskGroup(of: ServiceBrowserEvent?.self) { group in
            group.addTask {
                for await event in events where predicate(event) { return event }
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    @Test("advertise, find with TXT, update TXT, stop with a goodbye")
    func lifecycle() async throws {
        let type = try Self.uniqueType()
        let browserStack = try await MulticastDNSStack(configuration: Self.loopback)
        let advertiserStack = try await MulticastDNSStack(configuration: Self.loopback)
        let browser = browserStack.browse(type)
        let ad = try await advertiserStack.advertise(
            type, name: "Lifecycle", port: 4321, txt: try TXTRecord(["status": "online"]))
        #expect(await ad.registered() == "Lifecycle")

        let found = await Self.next(browser.events, within: .seconds(5)) {
            if case .found(let s) = $0 { s.name == "Lifecycle" } else { false }
        }
        let service = try #require(found?.service)
        #expect(service.port == 4321)
        #expect(service.txt["status"] == "online")
        #expect(service.addresses.contains { $0.address == .v4(.loopback) })
        #expect(service.interfaces == ["lo"])

        ad.updateTXT(try TXTRecord(["status": "busy"]))
        let updated = await Self.next(browser.events, within: .seconds(3)) {
            if case .updated(let s) = $0 { s.txt["status"] == "busy" } else { false }
        }
        #expect(updated != nil)

        await ad.stop()
        let lost = await Self.next(browser.events, within: .seconds(2)) {
            if case .lost(let s) = $0 { s.name == "Lifecycle" } else { false }
        }
        #expect(lost != nil, "the goodbye is reported at once")
        #expect(await browser.services().isEmpty)

        let stats = await browserStack.statistics()
        #expect(stats.packetsReceived > 0)
        #expect(stats.packetsMalformed == 0)
        #expect(stats.links.map(\.interfaceName) == ["lo"])
        browser.stop()
        await browserStack.shutdown()
        await advertiserStack.shutdown()
    }

    @Test("two stacks claiming one name: one is renamed and both are found")
    func conflictRenames() async throws {
        let type = try Self.uniqueType()
        let first = try await MulticastDNSStack(configuration: Self.loopback)
        let second = try await MulticastDNSStack(configuration: Self.loopback)
        let browserStack = try await MulticastDNSStack(configuration: Self.loopback)
        let a = try await first.advertise(type, name: "Twin", port: 1)
        #expect(await a.registered() == "Twin")
        let b = try await second.advertise(type, name: "Twin", port: 2)
        _ = await b.registered()
        // b's probes normally meet a's answer, and b takes the next name. A responder that answers later than the
        // probes wait (750 ms: a thread-sanitized run of the suite once did) lets both claim it; each then sees the
        // other's records, both probe again, and the tie-break (RFC 6762 section 8.2) renames one. Either way,
        // exactly one is renamed.
        var settled = false
        for _ in 0..<300 {
            settled = Set([a.name, b.name]) == ["Twin", "Twin (2)"]
            if settled { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(settled, "a is \(a.name), b is \(b.name)")

        let browser = browserStack.browse(type)
        var names = Set<String>()
        for _ in 0..<2 {
            if case .found(let s)? = await Self.next(
                browser.events, within: .seconds(5),
                where: { event in
                    if case .found = event { true } else { false }
                })
            {
                names.insert(s.name)
            }
        }
        #expect(names == ["Twin", "Twin (2)"])
        for stack in [first, second, browserStack] { await stack.shutdown() }
    }

    @Test("invalid names and types are refused with the rule they break")
    func validation() async throws {
        let stack = try await MulticastDNSStack(configuration: Self.loopback)
        let type = try ServiceType("chat")
        let empty = await Self.refusal { try await stack.advertise(type, name: "", port: 1) }
        #expect(empty?.code == .invalidService(.instanceNameEmpty))
        let long = String(repeating: "x", count: 64)
        let tooLong = await Self.refusal { try await stack.advertise(type, name: long, port: 1) }
        #expect(tooLong?.code == .invalidService(.instanceNameTooLong(long, bytes: 64)))
        #expect(tooLong?.reason.contains("at most 63") == true, "the reason names the rule")
        #expect(throws: ServiceValidationError.self) { try ServiceType("my_app") }
        await stack.shutdown()
    }

    @Test("each refusal has a code to switch on, a sentence, and the place that raised it")
    func refusalsHaveCodes() async throws {
        var limited = Self.loopback
        limited.responder.maximumServices = 1
        let stack = try await MulticastDNSStack(configuration: limited)
        let type = try Self.uniqueType()
        let first = try await stack.advertise(type, name: "Only", port: 1)
        let second = await Self.refusal { try await stack.advertise(type, name: "Second", port: 2) }
        #expect(second?.code == .tooManyServices(limit: 1))
        #expect(second?.reason.contains("1 services") == true)
        await first.stop()
        await stack.shutdown()

        let closed = await Self.refusal { try await stack.advertise(type, name: "Late", port: 3) }
        let error = try #require(closed)
        #expect(error.code == DiscoveryError.Code.shutDown)
        #expect(error.file == "MulticastDNS/MulticastDNSStack.swift", "the throwing line, not the factory's")
        #expect(error.description.hasPrefix("DiscoveryError.shutDown: the mDNS stack was shut down ("))
        #expect(error.description.hasSuffix("MulticastDNS/MulticastDNSStack.swift:\(error.line))"))

        var badHost = Self.loopback
        let label = String(repeating: "h", count: 64)
        badHost.hostLabel = label
        do {
            _ = try await MulticastDNSStack(configuration: badHost)
            Issue.record("a 64-byte host label was accepted")
        } catch {
            #expect(error.code == .invalidHostLabel(label: label, .labelTooLong(label: label, bytes: 64)))
            #expect(error.file == "MulticastDNS/MulticastDNSEngine.swift")
        }
    }

    /// The error `body` threw, or nil (recorded as an issue) if it returned.
    static func refusal(
        _ body: () async throws -> ServiceAdvertisement, sourceLocation: SourceLocation = #_sourceLocation
    ) async -> DiscoveryError? {
        do {
            let advertisement = try await body()
            Issue.record("accepted as \(advertisement.name)", sourceLocation: sourceLocation)
        } catch let error as DiscoveryError {
            return error
        } catch {
            Issue.record("not a DiscoveryError: \(error)", sourceLocation: sourceLocation)
        }
        return nil
    }

    @Test("shutdown ends the browser's event stream")
    func shutdownEndsStreams() async throws {
        let stack = try await MulticastDNSStack(configuration: Self.loopback)
        let browser = stack.browse(try Self.uniqueType())
        await stack.shutdown()
        var count = 0
        for await _ in browser.events { count += 1 }
        #expect(count == 0)
    }
}
