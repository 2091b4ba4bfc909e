import Foundation
import NetLab
import Testing

/// Programs written the way public Multipeer Connectivity apps and wrapper libraries are (`Examples/WrapperChat`,
/// `Examples/StreamShare`: files that import only MultipeerConnectivity or one of its submodules, delegate
/// forwarding with optional methods, archived peer IDs, an upper-case service type, streams scheduled on the main
/// run loop and not kept), built unchanged in Swift 5 mode, run as processes on lab hosts.
@Suite(.serialized, .oneLabAtATime)
struct PortedCodeEndToEndTests {
    typealias Apps = TutorialAppsEndToEndTests

    @Test(.requires(.netLab)) func aWrapperLibrarysChatConnectsAndCarriesCodableMessagesBothWays() async throws {
        let folder = Apps.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withNetLab(hosts: 2) { lab in
            let ann = try Apps.app(lab, host: 0, "WrapperChat", ["Ann"], home: folder.appendingPathComponent("Ann"))
            let ben = try Apps.app(lab, host: 1, "WrapperChat", ["Ben"], home: folder.appendingPathComponent("Ben"))
            await Apps.expect(ann, "connected Ben", within: .seconds(30))
            await Apps.expect(ben, "connected Ann", within: .seconds(30))
            #expect(ann.writeLine("hello from Ann"))
            await Apps.expect(ben, "Ann: hello from Ann")
            #expect(ben.writeLine("hi Ann"))
            await Apps.expect(ann, "Ben: hi Ann")
            ann.closeInput()
            #expect(await ann.exited(within: .seconds(10)) == 0)
            await Apps.expect(ben, "gone Ann", within: .seconds(20))
            ben.closeInput()
            #expect(await ben.exited(within: .seconds(10)) == 0)
        }
    }

    @Test(.requires(.netLab)) func aStreamScheduledOnTheMainRunLoopAndNotKeptArrivesWhole() async throws {
        let folder = Apps.scratch()
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withNetLab(hosts: 2) { lab in
            let host = try Apps.app(
                lab, host: 0, "StreamShare", ["host", "Hal"], home: folder.appendingPathComponent("Hal"))
            let bytes = 3_000_000
            let sender = try Apps.app(
                lab, host: 1, "StreamShare", ["send", "Sam", "\(bytes)"], home: folder.appendingPathComponent("Sam"))
            await Apps.expect(sender, "connected Hal", within: .seconds(30))
            let sent = await Apps.expect(sender, within: .seconds(60), "sent ...") { $0.hasPrefix("sent Sam ") }
            let received = await Apps.expect(host, within: .seconds(60), "received ...") {
                $0.hasPrefix("received blob-Sam ")
            }
            // Same length, same checksum, no byte out of place.
            #expect(sent?.split(separator: " ").suffix(2) == received?.split(separator: " ").suffix(2))
            #expect(sent?.hasPrefix("sent Sam \(bytes) ") == true, "\(sent ?? "")")
            await Apps.expect(host, "summary from Sam: \(bytes) bytes")
            #expect(!host.lines.contains { $0.hasPrefix("wrong byte") || $0.hasPrefix("stream error") })
            host.forceKill()
            sender.forceKill()
        }
    }
}
