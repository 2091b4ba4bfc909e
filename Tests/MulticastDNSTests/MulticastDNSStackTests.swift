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
        #expect(await b.registered() == "Twin (2)")
        #expect(b.name == "Twin (2)")

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
        await #expect(throws: DiscoveryError.self) {
            _ = try await stack.advertise(try ServiceType("chat"), name: "", port: 1)
        }
        let long = String(repeating: "x", count: 64)
        do {
            _ = try await stack.advertise(try ServiceType("chat"), name: long, port: 1)
            Issue.record("a 64-byte name was accepted")
        } catch {
            #expect("\(error)".contains("63"))
        }
        #expect(throws: ServiceValidationError.self) { try ServiceType("Chat") }
        await stack.shutdown()
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
