import Foundation
import MulticastDNS
import MultipeerIO
import NetLab
import TestIsolation
import Testing

@testable import Multipeer

/// Wide-area DNS-SD against a real authoritative server, Knot, on 127.0.0.1: signed updates it accepts and
/// refuses, records `kdig` reads back, record sets `knsupdate` wrote that our browser finds, leases, TCP after a
/// truncated answer, domain enumeration.
@Suite(
    "Wide-area DNS-SD against Knot on loopback", .busy,
    .enabled(if: KnotServer.unavailableReason == nil, "\(KnotServer.unavailableReason ?? "")"))
struct WideAreaServerTests {
    static func uniqueType() -> String { "wa" + String(UInt32.random(in: 0...UInt32.max), radix: 36) }

    /// A loopback network that registers in and browses the server's zone.
    static func network(_ server: KnotServer, key: TSIGKey? = nil, lease: Duration = .seconds(30)) throws
        -> PeerNetwork
    {
        var configuration = PeerNetwork.Configuration.loopback
        var wideArea = WideAreaConfiguration(
            domain: try DNSName(server.zone), server: SocketAddress(.v4(.loopback), port: server.port),
            key: try key ?? TSIGKey(parsing: server.keyLine))
        wideArea.pollInterval = .milliseconds(300)
        wideArea.lease = lease
        configuration.wideArea = wideArea
        return try PeerNetwork(configuration: configuration)
    }

    /// Waits until `condition` holds, looking every 50 ms for at most `seconds`; looks once more at the end.
    static func eventually(_ seconds: Double = 30, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds * TestTime.factor)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    @Test(.ownThread) func anAdvertiserRegistersWhatItMulticastsAndRemovesItWhenItStops() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        let network = try Self.network(server)
        let type = Self.uniqueType()
        let identity = try PeerIdentity.generate(displayName: "Ada Lovelace")
        let advertiser = try await PeerAdvertiser(
            serviceType: type, identity: identity, discoveryInfo: ["room": "blue"], network: network)
        let typeName = "_\(type)._tcp.lab.test."
        let instance = WideAreaRecords.instanceLabel(displayName: "Ada Lovelace", fingerprint: identity.fingerprint)
        // Knot keeps owner names in lower case: the display name is read from the TXT record, never from them.
        #expect(try Self.eventually { try server.dig([typeName, "PTR", "+short"]).contains("ada") })
        // kdig reads what we wrote: the instance under the type, its SRV to our host at the listener's port, the
        // TXT with the identity, the application's info and the lease, the host's address.
        let ptr = try server.dig([typeName, "PTR", "+short"])
        let escaped = instance.replacingOccurrences(of: " ", with: "\\032")
        #expect(ptr.contains(escaped.lowercased()), "\(ptr)")
        let owner = escaped + "." + typeName
        let srv = try server.dig([owner, "SRV", "+short"])
        let host = WideAreaRecords.hostLabel(fingerprint: identity.fingerprint) + ".lab.test."
        #expect(srv.trimmingCharacters(in: .whitespacesAndNewlines) == "0 0 \(advertiser.port) \(host)", "\(srv)")
        let txt = try server.dig([owner, "TXT", "+short"])
        #expect(txt.contains("mp.id=\(identity.fingerprint)") && txt.contains("room=blue"), "\(txt)")
        #expect(txt.contains("mp.until="), "\(txt)")
        #expect(try server.dig([host, "A", "+short"]).trimmingCharacters(in: .whitespacesAndNewlines) == "127.0.0.1")
        #expect(try server.dig(["_services._dns-sd._udp.lab.test.", "PTR", "+short"]).contains("_\(type)._tcp"))
        // New discovery info reaches the zone too.
        try advertiser.updateDiscoveryInfo(["room": "red"])
        #expect(try Self.eventually { try server.dig([owner, "TXT", "+short"]).contains("room=red") })
        await advertiser.stop()
        #expect(try server.dig([typeName, "PTR", "+short"]).isEmpty)
        #expect(try server.dig([owner, "SRV", "+short"]).isEmpty)
        #expect(try server.dig([host, "A", "+short"]).isEmpty)
        await network.shutdown()
    }

    @Test(.ownThread) func aBrowserFindsUpdatesAndLosesThroughTheServer() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        let type = Self.uniqueType()
        let network = try Self.network(server)
        let browse = try #require(network.wideArea).browse(try ServiceType(type), bufferLimit: 64)
        defer { browse.stop() }
        var events = browse.events.makeAsyncIterator()
        // Written by knsupdate, as another DNS-SD implementation would: nothing of ours in the TXT record. (The
        // space is written \032: knsupdate's delete does not parse an escaped space.)
        let owner = "Printer\\0322._\(type)._tcp.lab.test."
        let added = try server.nsupdate([
            "add _\(type)._tcp.lab.test. 60 PTR \(owner)",
            "add \(owner) 60 SRV 0 0 631 printer.lab.test.",
            "add \(owner) 60 TXT \"rp=queue\" \"note=second floor\"",
            "add printer.lab.test. 60 A 192.0.2.7",
            "add printer.lab.test. 60 AAAA 2001:db8::7",
        ])
        #expect(added.status == 0, "\(added.output)")
        guard case .found(let found)? = await events.next() else { Issue.record("no found event"); return }
        #expect(found.name.lowercased() == "printer 2", "Knot folds owner names to lower case")
        #expect(found.port == 631)
        #expect(found.txt["rp"] == "queue" && found.txt["note"] == "second floor")
        #expect(found.hostName == "printer.lab.test.")
        #expect(found.addresses.map(\.address) == [.v4(IPv4Address(192, 0, 2, 7)), .v6(IPv6Address("2001:db8::7")!)])
        #expect(found.interfaces == ["lab.test."])
        let changed = try server.nsupdate(["update delete \(owner) TXT", "add \(owner) 60 TXT \"rp=other\""])
        #expect(changed.status == 0, "\(changed.output)")
        guard case .updated(let updated)? = await events.next() else { Issue.record("no update"); return }
        #expect(updated.txt["rp"] == "other")
        _ = try server.nsupdate(["update delete _\(type)._tcp.lab.test. PTR \(owner)"])
        guard case .lost(let lost)? = await events.next() else { Issue.record("no lost event"); return }
        #expect(lost.name.lowercased() == "printer 2")
        await network.shutdown()
    }

    @Test(.ownThread) func aPeerOnTheLinkAndInTheDomainIsFoundOnceWithBothSources() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        let type = Self.uniqueType()
        let advertising = try Self.network(server)
        let browsing = try Self.network(server)
        let identity = try PeerIdentity.generate(displayName: "Bea")
        let advertiser = try await PeerAdvertiser(serviceType: type, identity: identity, network: advertising)
        let browser = try await PeerBrowser(
            serviceType: type, identity: try PeerIdentity.generate(displayName: "Cy"), network: browsing)
        // Found once (by whichever source came first), then updated until both sources show it.
        var sources: Set<String> = []
        var founds = 0
        for await event in browser.events {
            switch event {
            case .found(let peer):
                founds += 1
                sources.formUnion(peer.interfaces)
            case .updated(let peer):
                sources.formUnion(peer.interfaces)
            case .lost:
                Issue.record("lost while both sources show the peer")
            }
            if sources.isSuperset(of: ["lo", "lab.test."]) { break }
        }
        #expect(founds == 1)
        #expect(browser.peers.map(\.peer.displayName) == ["Bea"])
        browser.stop()
        await advertiser.stop()
        await advertising.shutdown()
        await browsing.shutdown()
    }

    @Test(.ownThread) func aWrongKeyIsRefusedWithTheServersReasonAndTheLinkStillWorks() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        for (key, expected, words) in [
            (
                try TSIGKey(parsing: "hmac-sha256:mp-key.:\(Data(repeating: 7, count: 32).base64EncodedString())"),
                UInt16(16), "BADSIG"
            ),
            (
                try TSIGKey(parsing: "hmac-sha256:stranger.:\(Data(repeating: 7, count: 32).base64EncodedString())"),
                UInt16(17), "BADKEY"
            ),
        ] {
            let network = try Self.network(server, key: key)
            let type = Self.uniqueType()
            var reports = network.events.makeAsyncIterator()
            let advertiser = try await PeerAdvertiser(
                serviceType: type, identity: try PeerIdentity.generate(displayName: "Eve"), network: network)
            guard case .wideAreaFailed(let error)? = await reports.next() else {
                Issue.record("no failure reported")
                continue
            }
            #expect(error.code == .refused(responseCode: 9, signatureError: expected), "\(error)")
            #expect(error.reason.contains(words) && error.reason.contains("NOTAUTH"), "\(error.reason)")
            #expect(try server.dig(["_\(type)._tcp.lab.test.", "PTR", "+short"]).isEmpty)
            // Multicast DNS on the link is not affected: a browser on loopback finds the advertiser.
            let browser = try await PeerBrowser(
                serviceType: type, identity: try PeerIdentity.generate(displayName: "Lo"),
                network: try PeerNetwork(configuration: .loopback))
            var found = false
            for await event in browser.events {
                if case .found(let peer) = event, peer.peer.displayName == "Eve" {
                    found = true
                    break
                }
            }
            #expect(found)
            browser.stop()
            await browser.network.shutdown()
            await advertiser.stop()
            await network.shutdown()
        }
    }

    @Test(.ownThread) func anUnreachableServerIsReportedWithWhatWasTried() async throws {
        // A port where nothing listens: the questions go unanswered.
        let port = try KnotServer.freeLoopbackPort()
        var configuration = PeerNetwork.Configuration.loopback
        var wideArea = WideAreaConfiguration(
            domain: try DNSName("lab.test."), server: SocketAddress(.v4(.loopback), port: port),
            key: try TSIGKey(parsing: "hmac-sha256:k.:\(Data(repeating: 1, count: 32).base64EncodedString())"))
        wideArea.queryTimeout = .milliseconds(100)
        configuration.wideArea = wideArea
        let network = try PeerNetwork(configuration: configuration)
        var reports = network.events.makeAsyncIterator()
        let advertiser = try await PeerAdvertiser(
            serviceType: Self.uniqueType(), identity: try PeerIdentity.generate(displayName: "Ann"), network: network)
        guard case .wideAreaFailed(let error)? = await reports.next() else {
            Issue.record("no failure reported")
            return
        }
        #expect(error.code == .unreachable)
        #expect(error.reason.contains("127.0.0.1:\(port)") && error.reason.contains("3 tries"), "\(error.reason)")
        await advertiser.stop()
        await network.shutdown()
    }

    @Test(.ownThread) func aRegistrationThatFailedIsRetriedWithinSecondsNotAtTheNextRefresh() async throws {
        // The server is not there when the advertiser starts; it comes 2 s later. Refreshes are 30 s apart (a third
        // of the 90 s lease): the records must appear long before, from the retries after the failure (1, 2, 4 s).
        let port = try KnotServer.freeLoopbackPort()
        var configuration = PeerNetwork.Configuration.loopback
        let keyLine = "hmac-sha256:mp-key.:\(Data(repeating: 4, count: 32).base64EncodedString())"
        var wideArea = WideAreaConfiguration(
            domain: try DNSName("lab.test."), server: SocketAddress(.v4(.loopback), port: port),
            key: try TSIGKey(parsing: keyLine))
        wideArea.queryTimeout = .milliseconds(100)
        wideArea.lease = .seconds(90)
        configuration.wideArea = wideArea
        let network = try PeerNetwork(configuration: configuration)
        var reports = network.events.makeAsyncIterator()
        let type = Self.uniqueType()
        let advertiser = try await PeerAdvertiser(
            serviceType: type, identity: try PeerIdentity.generate(displayName: "Late"), network: network)
        guard case .wideAreaFailed(let error)? = await reports.next() else {
            Issue.record("the failure was not reported")
            return
        }
        #expect(error.code == .unreachable)
        try await Task.sleep(for: .seconds(2))
        let server = try KnotServer(port: port, secret: Data(repeating: 4, count: 32).base64EncodedString())
        defer { server.stop() }
        let started = ContinuousClock.now
        #expect(
            try Self.eventually(20) { try server.dig(["_\(type)._tcp.lab.test.", "PTR", "+short"]).contains("late") })
        #expect(
            ContinuousClock.now - started < TestTime.scaled(.seconds(20)), "registered only at the regular refresh")
        guard case .wideAreaRegistered? = await reports.next() else {
            Issue.record("the registration after the failure was not reported")
            return
        }
        await advertiser.stop()
        await network.shutdown()
    }

    @Test(.ownThread) func anExpiredLeaseIsNotReportedAndARegisteringBrowserRemovesIt() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        let type = Self.uniqueType()
        let stale = "Gone._\(type)._tcp.lab.test."
        let fresh = "Here._\(type)._tcp.lab.test."
        let now = UInt64(Date().timeIntervalSince1970)
        _ = try server.nsupdate([
            "add _\(type)._tcp.lab.test. 60 PTR \(stale)", "add \(stale) 60 SRV 0 0 7000 h.lab.test.",
            "add \(stale) 60 TXT \"mp.until=\(now - 120)\"",
            "add _\(type)._tcp.lab.test. 60 PTR \(fresh)", "add \(fresh) 60 SRV 0 0 7001 h.lab.test.",
            "add \(fresh) 60 TXT \"mp.until=\(now + 600)\"",
            "add h.lab.test. 60 A 192.0.2.9",
        ])
        let network = try Self.network(server)
        let browse = try #require(network.wideArea).browse(try ServiceType(type), bufferLimit: 64)
        defer { browse.stop() }
        var events = browse.events.makeAsyncIterator()
        guard case .found(let found)? = await events.next() else { Issue.record("nothing found"); return }
        #expect(found.name.lowercased() == "here")
        // The lease is not part of what is reported.
        #expect(found.txt.entry(forKey: "mp.until") == nil)
        // This network holds the key, so it removes the record set whose lease ran out, and only that one.
        #expect(try Self.eventually { try server.dig([stale, "SRV", "+short"]).isEmpty })
        #expect(!(try server.dig(["_\(type)._tcp.lab.test.", "PTR", "+short"]).contains("Gone")))
        #expect(try server.dig([fresh, "SRV", "+short"]).contains("7001"))
        await network.shutdown()
    }

    @Test(.ownThread) func aListingTooLongForUDPIsAskedAgainOverTCP() async throws {
        let server = try KnotServer()
        defer { server.stop() }
        let type = Self.uniqueType()
        var commands: [String] = []
        for index in 0..<60 {
            let owner = "A-rather-long-instance-name-to-fill-the-answer-\(index)._\(type)._tcp.lab.test."
            commands += [
                "add _\(type)._tcp.lab.test. 60 PTR \(owner)", "add \(owner) 60 SRV 0 0 \(7000 + index) h.lab.test.",
                "add \(owner) 60 TXT \"n=\(index)\"",
            ]
        }
        commands.append("add h.lab.test. 60 A 192.0.2.9")
        let added = try server.nsupdate(commands)
        #expect(added.status == 0, "\(added.output)")
        // Over UDP with our payload size the answer is truncated.
        #expect(try server.dig(["_\(type)._tcp.lab.test.", "PTR", "+notcp", "+bufsize=1232"]).contains("tc"))
        let network = try Self.network(server)
        let browse = try #require(network.wideArea).browse(try ServiceType(type), bufferLimit: 256)
        defer { browse.stop() }
        var names: Set<String> = []
        for await event in browse.events {
            if case .found(let service) = event { names.insert(service.name) }
            if names.count == 60 { break }
        }
        #expect(names.count == 60)
        await network.shutdown()
    }

    @Test(.ownThread) func domainsComeFromEnumerationWhenNoneIsSet() async throws {
        let server = try KnotServer(
            extraZone: """
                b._dns-sd._udp PTR lab.test.
                lb._dns-sd._udp PTR lab.test.
                r._dns-sd._udp PTR lab.test.
                dr._dns-sd._udp PTR lab.test.
                """)
        defer { server.stop() }
        var wideArea = WideAreaConfiguration(
            domain: nil, server: SocketAddress(.v4(.loopback), port: server.port),
            key: try TSIGKey(parsing: server.keyLine))
        wideArea.enumerationDomain = try DNSName("lab.test.")
        let discovery = WideAreaDiscovery(
            configuration: wideArea, loop: try EventLoop(name: "wa-enum"), logger: MultipeerLogging.fallback,
            addresses: { [] }, report: { _ in })
        let domains = try await discovery.resolveDomains()
        #expect(domains.registration == (try DNSName("lab.test.")))
        #expect(domains.zone == (try DNSName("lab.test.")))
        #expect(domains.browsing == [try DNSName("lab.test.")])
        discovery.loop.shutdown()
    }
}
