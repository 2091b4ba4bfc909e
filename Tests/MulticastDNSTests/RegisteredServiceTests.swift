import MultipeerIO
import Testing

@testable import MulticastDNS

@Suite("Registered service")
struct RegisteredServiceTests {
    static func service(named name: String) throws -> RegisteredService {
        let type = try DNSName("_chat._tcp.local.")
        let request = ResponderStateMachine.Service(instanceName: name, serviceType: type, port: 1, txt: [])
        return RegisteredService(
            service: request, instanceName: try type.prepending(name),
            phase: .probing(sent: 0, next: IOInstant(nanoseconds: 0)))
    }

    @Test("renames count up from the name first asked for (RFC 6763 appendix D)")
    func renamesCountUp() throws {
        var entry = try Self.service(named: "Alice")
        entry.takeNextName()
        #expect(entry.service.instanceName == "Alice (2)")
        #expect(entry.instanceName == (try DNSName("Alice (2)._chat._tcp.local.")))
        entry.takeNextName()
        #expect(entry.service.instanceName == "Alice (3)")
        #expect(entry.baseName == "Alice")
    }

    @Test("a name of 63 bytes is shortened so the renamed one is still one label")
    func longNameIsShortened() throws {
        var entry = try Self.service(named: String(repeating: "é", count: 31) + "x")
        #expect(entry.service.instanceName.utf8.count == 63)
        entry.takeNextName()
        #expect(entry.service.instanceName.utf8.count <= DNSName.maximumLabelLength)
        #expect(entry.service.instanceName == String(repeating: "é", count: 29) + " (2)")
    }
}
