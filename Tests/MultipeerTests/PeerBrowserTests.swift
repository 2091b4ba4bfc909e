import MulticastDNS
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// `PeerBrowser` over loopback multicast DNS: one event per identity, no ghosts, our own advertisement hidden,
/// discovery info changes reported, and a found peer invited through its advertisement.
@Suite("PeerBrowser over loopback", .busy)
struct PeerBrowserTests {
    static func uniqueType() -> String { "pb" + String(UInt32.random(in: 0...UInt32.max), radix: 36) }

    static func next(
        _ iterator: inout AsyncStream<PeerBrowser.Event>.Iterator, within timeout: Duration = .seconds(10)
    ) async -> PeerBrowser.Event? {
        let deadline = ContinuousClock.now + TestTime.scaled(timeout)
        while ContinuousClock.now < deadline {
            if let event = await iterator.next() { return event }
        }
        return nil
    }

    @Test func oneFoundPerIdentityOwnAdvertisementHiddenUpdatesAndLost() async throws {
        let type = Self.uniqueType()
        let me = try PeerIdentity.generate(displayName: "Me")
        let alice = try PeerIdentity.generate(displayName: "Alice")
        let myNetwork = try PeerNetwork(configuration: .loopback)
        let aliceNetwork = try PeerNetwork(configuration: .loopback)
        let secondNetwork = try PeerNetwork(configuration: .loopback)
        let mine = try await PeerAdvertiser(serviceType: type, identity: me, network: myNetwork)
        let browser = try await PeerBrowser(serviceType: type, identity: me, network: myNetwork)
        let advertiser = try await PeerAdvertiser(
            serviceType: type, identity: alice, discoveryInfo: ["status": "online"], network: aliceNetwork)
        // The same identity advertised a second time (another instance, renamed "Alice (2)"): still one peer.
        let again = try await PeerAdvertiser(serviceType: type, identity: alice, network: secondNetwork)
        var events = browser.events.makeAsyncIterator()
        guard case .found(let found)? = await Self.next(&events) else {
            Issue.record("Alice was not found")
            return
        }
        #expect(found.peer.displayName == "Alice" && found.peer.identity == .advertised(alice.fingerprint))
        #expect(found.discoveryInfo == ["status": "online"] || found.discoveryInfo == [:])
        try await Task.sleep(for: .seconds(1.5))
        try advertiser.updateDiscoveryInfo(["status": "busy"])
        var sawUpdate = false
        while let event = await Self.next(&events, within: .seconds(5)) {
            switch event {
            case .found(let other): Issue.record("a second found: \(other.peer)")
            case .updated(let peer) where peer.discoveryInfo["status"] == "busy": sawUpdate = true
            default: break
            }
            if sawUpdate { break }
        }
        #expect(sawUpdate)
        #expect(browser.peers.count == 1)
        #expect(!browser.peers.contains { $0.peer.displayName == "Me" })
        await advertiser.stop()
        try await Task.sleep(for: .milliseconds(500))
        #expect(browser.peers.count == 1, "one instance left: still found")
        await again.stop()
        var lost = false
        while let event = await Self.next(&events, within: .seconds(5)) {
            if case .lost(let peer) = event, peer == found.peer { lost = true }
            if lost { break }
        }
        #expect(lost)
        browser.stop()
        await mine.stop()
        for network in [myNetwork, aliceNetwork, secondNetwork] { await network.shutdown() }
    }
}
