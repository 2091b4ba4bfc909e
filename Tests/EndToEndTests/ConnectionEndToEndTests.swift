import Foundation
import NetLab
import Testing

/// `multipeer listen` and `multipeer connect` across two lab hosts: how fast each side notices that the
/// other is gone.
///
/// Contract: `listen` prints `listening ADDRESS:PORT FINGERPRINT`; `connect HOST:PORT` prints `connected NAME
/// FINGERPRINT ...`, then `closed after SECONDS s: CODE ...` when the connection ends, and exits.
@Suite(.requiresNetLab, .serialized)
struct ConnectionEndToEndTests {
    /// Starts a listener on host 0 and a dialer on host 1; returns both once connected.
    static func connectedPair(_ lab: NetLab, extra: [String] = []) async throws -> (LabProcess, LabProcess) {
        let binary = try MultipeerBinary.require()
        let listener = try lab.spawn(
            host: 0, binary, ["listen", "--address", lab.hosts[0].ipv4, "--port", "47100", "--name", "Alpha"] + extra)
        let listening = await listener.nextLine(timeout: .seconds(10)) { $0.hasPrefix("listening ") }
        try #require(listening != nil, "listener did not start: \(listener.standardError)")
        let fingerprint = String(listening!.split(separator: " ")[2])
        let dialer = try lab.spawn(
            host: 1, binary,
            ["connect", "\(lab.hosts[0].ipv4):47100", "--expect", fingerprint, "--name", "Bravo"] + extra)
        let connected = await dialer.nextLine(timeout: .seconds(10)) { $0.hasPrefix("connected ") }
        try #require(connected != nil, "dialer did not connect: \(dialer.lines) \(dialer.standardError)")
        #expect(connected!.contains("Alpha \(fingerprint) authenticated TLSv1.3"))
        return (listener, dialer)
    }

    /// The elapsed seconds and code of the dialer's `closed after S s: CODE ...` line.
    static func closedLine(_ dialer: LabProcess, within timeout: Duration) async -> (Double, String)? {
        guard let line = await dialer.nextLine(timeout: timeout, where: { $0.hasPrefix("closed after ") }) else {
            return nil
        }
        let words = line.split(separator: " ")
        guard words.count > 4, let seconds = Double(words[2]) else { return nil }
        return (seconds, String(words[4]))
    }

    @Test func aPeerKilledWithSIGKILLIsNoticedAtOnce() async throws {
        try await withNetLab(hosts: 2) { lab in
            let (listener, dialer) = try await Self.connectedPair(lab)
            let killed = ContinuousClock.now
            listener.signal(SIGKILL)
            let closed = await Self.closedLine(dialer, within: .seconds(10))
            let noticed = ContinuousClock.now - killed
            let (_, code) = try #require(closed, "no close reported: \(dialer.lines)")
            // The kernel closes a killed process's sockets, so the end of stream arrives at once.
            #expect(code == "connectionLost")
            #expect(noticed < .seconds(2), "noticed after \(noticed)")
        }
    }

    @Test func aLinkTakenDownIsNoticedWithinTheKeepaliveBound() async throws {
        try await withNetLab(hosts: 2) { lab in
            let (_, dialer) = try await Self.connectedPair(lab)
            try await Task.sleep(for: .milliseconds(500))
            let down = ContinuousClock.now
            try lab.setLinkDown(host: 0)
            // Nothing reaches the dialer any more, not even a reset: only the keepalive can tell.
            let closed = await Self.closedLine(dialer, within: .seconds(15))
            let noticed = ContinuousClock.now - down
            let (_, code) = try #require(closed, "no close reported: \(dialer.lines)")
            #expect(code == "peerWentSilent")
            // The default bound is 6 s of silence; the last byte may have arrived just before the link went down.
            #expect(noticed <= .seconds(6.5), "noticed after \(noticed)")
            #expect(noticed >= .seconds(3), "too early to be the keepalive: \(noticed)")
        }
    }

    @Test func aShorterConfiguredBoundIsHonoured() async throws {
        try await withNetLab(hosts: 2) { lab in
            let (_, dialer) = try await Self.connectedPair(lab, extra: ["--silence-timeout", "1.5"])
            try lab.setLinkDown(host: 0)
            let down = ContinuousClock.now
            let closed = await Self.closedLine(dialer, within: .seconds(10))
            let noticed = ContinuousClock.now - down
            let (_, code) = try #require(closed, "no close reported: \(dialer.lines)")
            #expect(code == "peerWentSilent")
            #expect(noticed <= .seconds(2.2), "noticed after \(noticed)")
        }
    }
}
