import Foundation
import NetLab
import TestIsolation
import Testing

/// A running advertiser under a query flood mixed with malformed packets, from another lab host.
@Suite(.requires(.netLab, .discoveryCLI, .python3), .tags(.needsCLI))
struct HostileInputEndToEndTests {
    struct FloodReport: Decodable {
        let queries: Int
        let garbage: Int
        let responses: Int
        let answers: [String: Int]
        let seconds: Double
    }

    @Test func aQueryFloodIsAnsweredWithinTheRateLimitAndGarbageIsSurvived() async throws {
        try await withNetLab(hosts: 3) { lab in
            let advertiser = try await CLI.advertise(lab, host: 0, name: "Target")
            // Let the announcements finish so every answer counted below was caused by the flood.
            try await Task.sleep(for: .seconds(3.5))
            let arguments = [
                Repository.interopScript("mdns_flood.py"), "Target", "_chat._tcp", "--interface-ip",
                lab.hosts[1].ipv4, "--target", lab.hosts[0].ipv4, "--seconds", "5", "--rate", "1000",
            ]
            let flood = try await offPool {
                try lab.run(host: 1, Repository.python, arguments, timeout: .seconds(30))
            }
            #expect(flood.status == 0, "\(flood.stderr)")
            let report = try JSONDecoder().decode(FloodReport.self, from: Data(flood.stdout.utf8))
            print("flood report: \(report)")
            #expect(report.queries > 2000, "the flood was real: \(report)")
            #expect(report.garbage > 200)
            // Each record goes out at most once per second per link (RFC 6762 section 6): over the 5 s flood
            // plus 1.5 s of listening, at most 7 multicasts of the PTR and 7 of the SRV, whatever the query
            // count. Thousands of queries, a handful of answers: no amplification.
            #expect((report.answers["PTR"] ?? 0) <= 7, "\(report)")
            #expect((report.answers["SRV"] ?? 0) <= 7, "\(report)")
            #expect((report.answers["SRV"] ?? 0) >= 4, "it still answers: \(report)")
            #expect(advertiser.exitStatus == nil, "the advertiser survived: \(advertiser.standardError)")
            let events = try await CLI.browse(lab, host: 2, seconds: 3)
            #expect(events.contains { $0.event == "found" && $0.name == "Target" }, "still discoverable")
        }
    }
}
