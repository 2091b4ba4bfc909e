import Foundation
import NetLab
import Testing

/// `multipeer listen` and `multipeer connect` across two lab hosts: how fast each side notices that the
/// other is gone.
///
/// Contract: `listen` prints `listening ADDRESS:PORT FINGERPRINT`; `connect HOST:PORT` prints `connected NAME
/// FINGERPRINT ...`, then `closed after SECONDS s: CODE ...` when the connection ends, and exits.
@Suite(.requiresNetLab, .serialized, .oneLabAtATime)
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

    @Test func bothEndsShowOneVerificationCodeAndEachConnectionItsOwn() async throws {
        try await withNetLab(hosts: 2) { lab in
            let binary = try MultipeerBinary.require()
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mp-codes-\(UUID())")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let alpha = directory.appendingPathComponent("alpha.identity").path
            let bravo = directory.appendingPathComponent("bravo.identity").path
            let listener = try lab.spawn(
                host: 0, binary,
                ["listen", "--address", lab.hosts[0].ipv4, "--port", "47101", "--name", "Alpha", "--identity", alpha])
            let listening = await listener.nextLine(timeout: .seconds(10)) { $0.hasPrefix("listening ") }
            let fingerprint = String(try #require(listening, "\(listener.standardError)").split(separator: " ")[2])
            func code(of line: String?) -> String? {
                guard let words = line?.split(separator: " "), words.count >= 2, words[words.count - 2] == "code"
                else { return nil }
                return String(words[words.count - 1])
            }
            var dialerCodes: [String] = []
            for _ in 0..<2 {
                // The same two identities each time: Bravo's is created on the first run and loaded on the second.
                let dialer = try lab.spawn(
                    host: 1, binary,
                    [
                        "connect", "\(lab.hosts[0].ipv4):47101", "--expect", fingerprint, "--name", "Bravo",
                        "--identity", bravo,
                    ])
                let connected = await dialer.nextLine(timeout: .seconds(10)) { $0.hasPrefix("connected ") }
                let dialerCode = try #require(code(of: connected), "\(dialer.lines) \(dialer.standardError)")
                #expect(dialerCode.count == 6 && dialerCode.allSatisfy(\.isNumber))
                dialerCodes.append(dialerCode)
                dialer.signal(SIGTERM)
                _ = await dialer.nextLine(timeout: .seconds(10)) { $0.hasPrefix("closed after ") }
            }
            let listenerLines = listener.lines.filter { $0.hasPrefix("connected ") }
            #expect(listenerLines.count == 2, "\(listener.lines)")
            // The listener saw the same identity both times, and each time the code its dialer saw.
            #expect(Set(listenerLines.map { $0.split(separator: " ")[2] }).count == 1)
            #expect(listenerLines.map { code(of: $0) } == dialerCodes.map { Optional($0) })
            #expect(dialerCodes[0] != dialerCodes[1], "two connections showed the same code (one chance in a million)")
        }
    }

    @Test func aListenerServingThousandsOfConnectionsKeepsNothingOfTheFinishedOnes() async throws {
        try await withNetLab(hosts: 2) { lab in
            let binary = try MultipeerBinary.require()
            let listener = try lab.spawn(
                host: 0, binary, ["listen", "--address", lab.hosts[0].ipv4, "--port", "47102", "--name", "Alpha"])
            _ = try #require(await listener.nextLine(timeout: .seconds(10)) { $0.hasPrefix("listening ") })
            func connections(_ count: Int) async throws {
                let dialer = try lab.spawn(
                    host: 1, binary,
                    ["connect", "\(lab.hosts[0].ipv4):47102", "--repeat", "\(count)", "--send", "hello"])
                let status = await dialer.exited(within: .seconds(120))
                #expect(status == 0, "\(dialer.lines.suffix(3)) \(dialer.standardError)")
            }
            // Warm-up as long as the measured round: buffers, caches and the allocator's arenas reach the size that
            // round's concurrency needs (a 300-connection warm-up under a loaded machine left 667 KB of arena growth
            // for the measured round: resident memory, not what the listener keeps).
            try await connections(2_000)
            try await Task.sleep(for: .milliseconds(300))
            let before = try Self.residentAndDescriptors(listener.pid)
            try await connections(2_000)
            try await Task.sleep(for: .milliseconds(300))
            let after = try Self.residentAndDescriptors(listener.pid)
            let perConnection = Double(after.resident - before.resident) / 2_000
            // Was about 2.4 KB per connection when the listener kept every finished connection's task.
            // Under a sanitizer, freed memory sits in its quarantine and its shadow is resident: normal builds only.
            if !TestTime.sanitized {
                #expect(perConnection < 256, "resident memory grew \(perConnection) bytes per connection")
            }
            #expect(
                after.descriptors <= before.descriptors, "descriptors \(before.descriptors) -> \(after.descriptors)")
        }
    }

    /// The resident set size (bytes, from `/proc/PID/status`) and the open descriptors of a process.
    static func residentAndDescriptors(_ pid: Int32) throws -> (resident: Int, descriptors: Int) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        let kilobytes = try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
        let descriptors = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
        return (kilobytes * 1024, descriptors)
    }
}
