import Foundation
import Testing

/// The README's quick start: `multipeer demo` runs on loopback only and walks through discovery and a secure
/// connection, ending with status 0.
@Suite(.serialized)
struct DemoEndToEndTests {
    @Test func theDemoDiscoversConnectsOverTLSAndFinishes() async throws {
        let binary = try MultipeerBinary.require()
        let result = try await offPool { try Subprocess.run("/usr/bin/timeout", ["30", binary, "demo"]) }
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        func seen(_ text: String) -> Bool { lines.contains { $0.contains(text) } }
        #expect(seen("found   Alice") && seen("found   Bob"))
        #expect(seen("connected: Alice") && seen("authenticated, TLSv1.3"))
        #expect(seen("verification code"))
        #expect(seen("Carol received: hello Carol, Alice here (you said: hello from Carol)"))
        #expect(seen("Alice saw the connection end: closedByPeer"))
        #expect(seen("Carol closed the connection: closedLocally"))
        #expect(seen("updated Alice") && seen("lost    Bob"))
        #expect(lines.last?.hasSuffix("done") == true)
    }
}
