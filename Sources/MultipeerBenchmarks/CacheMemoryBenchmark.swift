import Foundation
import MulticastDNS
import MultipeerIO

#if canImport(Glibc)
    import Glibc
#endif

/// Scenario 7: heap growth per cached service of a ``BrowserStateMachine`` fed N resolved instances
/// (PTR + SRV + TXT with three short entries + A), in process and without a network.
enum CacheMemoryBenchmark {
    /// What one measurement found.
    struct Result {
        /// Instances fed.
        let instances: Int
        /// Records the browser cached.
        let cachedRecords: Int
        /// Instances the browser reported found.
        let found: Int
        /// Heap growth (glibc `mallinfo2`, `uordblks + hblkhd`) divided by `instances`.
        let heapBytesPerInstance: Double
        /// Resident set growth divided by `instances` (page granularity, so coarse).
        let rssBytesPerInstance: Double
        /// Wall time of feeding all `instances` responses (building the messages included).
        let feedSeconds: Double
    }

    /// Feeds `count` instances to a fresh browser and measures the heap before and after.
    static func run(count: Int) throws -> Result {
        // Warm up: the first use of every code path allocates runtime metadata and caches that are not per service.
        _ = try feed(count: 64, prefix: "Warm")
        let heapBefore = heapInUse()
        let rssBefore = residentBytes()
        let feedStart = ContinuousClock.now
        let browser = try feed(count: count, prefix: "Instance")
        let feedTime = ContinuousClock.now - feedStart
        let heapAfter = heapInUse()
        guard let heapBefore, let heapAfter else {
            throw BenchmarkError("mallinfo2 is only wired up on x86-64 Linux")
        }
        let rssAfter = residentBytes()
        let result = Result(
            instances: count, cachedRecords: browser.cachedRecordCount, found: browser.foundInstances.count,
            heapBytesPerInstance: Double(heapAfter - heapBefore) / Double(count),
            rssBytesPerInstance: Double(rssAfter - rssBefore) / Double(count),
            feedSeconds: Double(feedTime.components.seconds) + Double(feedTime.components.attoseconds) / 1e18)
        withExtendedLifetime(browser) {}
        return result
    }

    /// A browser started on one link that has received one response per instance. Every message is built and
    /// dropped inside the loop, so what remains allocated is what the browser keeps.
    private static func feed(count: Int, prefix: String) throws -> BrowserStateMachine {
        let serviceType = try DNSName("_mpbench._tcp.local.")
        var configuration = BrowserConfiguration()
        configuration.maximumInstances = count * 2
        configuration.maximumCachedRecords = count * 8
        var browser = BrowserStateMachine(serviceType: serviceType, configuration: configuration, seed: 1)
        let link = MulticastLink(interfaceIndex: 2, interfaceName: "lab0", isIPv6: false)
        let source = MDNSEndpoint(address: .v4(IPv4Address(198, 18, 0, 11)), port: 5353)
        var now = IOInstant(nanoseconds: 1_000_000_000)
        _ = browser.setLinks([link], now: now)
        _ = browser.start(now: now)
        for index in 0..<count {
            now = now + .microseconds(100)
            let instance = try DNSName("\(prefix)-\(index)._mpbench._tcp.local.")
            let host = try DNSName("\(prefix)-host-\(index).local.")
            let message = DNSMessage(
                flags: DNSMessage.responseFlags,
                answers: [DNSResourceRecord(name: serviceType, ttl: 4500, data: .ptr(instance))],
                additionals: [
                    DNSResourceRecord(
                        name: instance, ttl: 120, cacheFlush: true,
                        data: .srv(priority: 0, weight: 0, port: 4242, target: host)),
                    DNSResourceRecord(
                        name: instance, ttl: 4500, cacheFlush: true,
                        data: .txt([Array("a=1".utf8), Array("b=two".utf8), Array("c=three".utf8)])),
                    DNSResourceRecord(
                        name: host, ttl: 120, cacheFlush: true,
                        data: .a(IPv4Address(198, 18, UInt8(index / 250), UInt8(index % 250 + 1)))),
                ])
            _ = browser.receive(message, from: source, on: link, now: now)
        }
        return browser
    }

    static func heapInUse() -> Int? { ProcessMemory.heapInUse() }

    static func residentBytes() -> Int { ProcessMemory.residentBytes() }
}
