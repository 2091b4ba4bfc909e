import Foundation
import TestIsolation
import Testing

/// The README's quick start: `multipeer demo` runs on loopback only and walks through discovery, invitations
/// (accepted, declined), introductions, messages and a departure, ending with status 0.
@Suite(.serialized)
struct DemoEndToEndTests {
    @Test func theDemoDiscoversInvitesMeshesAndFinishes() async throws {
        let binary = try MultipeerBinary.require()
        let result = try await offPool { try Subprocess.run("/usr/bin/timeout", ["30", binary, "demo"]) }
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        func seen(_ text: String) -> Bool { lines.contains { $0.contains(text) } }
        for name in ["Alice", "Bob", "Dave"] { #expect(seen("found \(name) [")) }
        #expect(seen("Alice: invitation from Carol [") && seen("(code ") && seen("): lunch?; accepts"))
        #expect(seen("invitation to Alice: accepted") && seen("invitation to Bob: accepted"))
        #expect(seen("invitation to Dave: declined: in a meeting"))
        #expect(seen("Carol's session: Dave notConnected (declined: in a meeting)"))
        #expect(seen("Alice's session: Bob connected (joined through an introduction)"))
        #expect(seen("all three linked: yes"))
        #expect(seen("Alice received from Carol: hello everyone") && seen("Bob received from Carol: hello everyone"))
        #expect(seen("Bob received from Alice: see you at noon"))
        #expect(seen("Alice: Bob's application has her message (acknowledged send returned)"))
        #expect(seen("updated Alice [") && seen("status=busy"))
        #expect(seen("Carol's session: Bob notConnected (left)") && seen("Alice's session: Bob notConnected (left)"))
        #expect(seen("lost Bob ["))
        // Both sides of each link show the same verification code.
        for name in ["Alice", "Bob"] {
            let inviter = lines.first { $0.contains("Carol's side of the link to \(name): code ") }
            let code = inviter.map { String($0.suffix(6)) } ?? "?"
            #expect(seen("\(name): invitation from Carol [") && seen("(code \(code)): lunch?"), "\(name) \(code)")
        }
        #expect(seen("Bob: color teal from Alice") && seen("Carol: color teal from Alice"))
        #expect(seen("[####################] 100%"))
        let received = lines.first { $0.contains("Bob: received photo.jpg 8388608 bytes sha256 ") }
        let hash = received.flatMap { $0.split(separator: " ").drop { $0 != "sha256" }.dropFirst().first }
        #expect(hash.map { $0.count == 64 } == true, "\(received ?? "")")
        if let hash { #expect(seen("Carol: sent photo.jpg 8388608 bytes sha256 \(hash) to Bob")) }
        #expect(seen("summary") && seen("an 8 MiB file, verified") && seen("total"))
        #expect(lines.last?.hasSuffix("done") == true)
    }
}
