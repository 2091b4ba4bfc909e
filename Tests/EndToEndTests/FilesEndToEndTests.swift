import Foundation
import NetLab
import Testing

/// `multipeer send` and `multipeer receive` across lab hosts: a 1 GiB file within 64 MiB of memory per process,
/// cancellation on either side, a sender killed mid-transfer, a full disk, and a link down for 3 s in the middle
/// of a transfer and of a burst of messages.
@Suite(.tags(.needsCLI), .serialized, .oneLabAtATime)
struct FilesEndToEndTests {
    static let service = "mp-files-e2e"

    static func receive(_ lab: NetLab, host: Int = 0, dir: String, _ extra: [String] = []) throws -> LabProcess {
        try lab.spawn(
            host: host, try MultipeerBinary.require(),
            [
                "receive", "--name", "Rx", "--dir", dir, "--yes", "--service", service, "--interface",
                NetLab.interfaceName,
            ]
                + extra, environment: ["MULTIPEER_REPORT_MEMORY": "1", "XDG_CONFIG_HOME": dir + "-config"])
    }

    static func send(_ lab: NetLab, host: Int = 1, file: String, _ extra: [String] = []) throws -> LabProcess {
        try lab.spawn(
            host: host, try MultipeerBinary.require(),
            ["send", file, "--to", "Rx", "--name", "Tx", "--service", service, "--interface", NetLab.interfaceName]
                + extra, environment: ["MULTIPEER_REPORT_MEMORY": "1"])
    }

    static func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("mp-files-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// A file of random bytes (dd from /dev/urandom).
    static func randomFile(_ path: String, mebibytes: Int) throws {
        let result = try Subprocess.run(
            "/bin/dd", ["if=/dev/urandom", "of=\(path)", "bs=1M", "count=\(mebibytes)", "status=none"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    static func sha256(_ path: String) throws -> String {
        let result = try Subprocess.run("/usr/bin/sha256sum", [path])
        return String(result.stdout.split(separator: " ").first ?? "")
    }

    static func peakKiB(_ process: LabProcess) -> Int? {
        process.lines.first { $0.hasPrefix("peak memory ") }.flatMap { Int($0.split(separator: " ")[2]) }
    }

    static func line(_ process: LabProcess, _ prefix: String, within timeout: Duration = .seconds(60)) async -> String?
    {
        await process.nextLine(timeout: timeout) { $0.hasPrefix(prefix) }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aGibibyteArrivesVerifiedWithinSixtyFourMebibytesPerProcess()
        async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let directory = try Self.temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let source = directory + "/one-gibibyte.bin"
            try Self.randomFile(source, mebibytes: 1024)
            let expected = try Self.sha256(source)
            let inbox = directory + "/inbox"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            let receiver = try Self.receive(lab, dir: inbox)
            _ = await Self.line(receiver, "receiving as Rx", within: .seconds(10))
            let sender = try Self.send(lab, file: source)
            let sent = await Self.line(sender, "sent ", within: .seconds(120))
            #expect(sent == "sent one-gibibyte.bin 1073741824 sha256 \(expected) to Rx", "\(sender.standardError)")
            let received = await Self.line(receiver, "received ", within: .seconds(30))
            #expect(received == "received one-gibibyte.bin 1073741824 sha256 \(expected) from Tx")
            #expect(await sender.exited(within: .seconds(10)) == 0)
            #expect(await receiver.exited(within: .seconds(10)) == 0)
            #expect(try Self.sha256(inbox + "/one-gibibyte.bin") == expected)
            let senderPeak = Self.peakKiB(sender) ?? .max
            let receiverPeak = Self.peakKiB(receiver) ?? .max
            // Under a sanitizer the peak counts its shadow memory: the bound is the normal build's.
            if !TestTime.sanitized {
                #expect(senderPeak <= 64 * 1024, "sender peak \(senderPeak) KiB")
                #expect(receiverPeak <= 64 * 1024, "receiver peak \(receiverPeak) KiB")
            }
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func cancellingOnEitherSideLeavesNoPartialFile() async throws {
        try await withNetLab(hosts: 2) { lab in
            let directory = try Self.temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let source = directory + "/big.bin"
            try Self.randomFile(source, mebibytes: 512)
            let inbox = directory + "/inbox"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            // The sender is interrupted (Ctrl-C).
            let receiver = try Self.receive(lab, dir: inbox, ["--keep-going"])
            _ = await Self.line(receiver, "receiving as Rx", within: .seconds(10))
            let sender = try Self.send(lab, file: source)
            _ = await Self.line(sender, "sending big.bin", within: .seconds(30))
            sender.signal(SIGINT)
            #expect(await sender.exited(within: .seconds(10)) == 130, "\(sender.standardError)")
            #expect(sender.standardError.contains("cancelled"), "\(sender.standardError)")
            #expect(
                await waitFor { receiver.standardError.contains("big.bin from Tx failed: Tx cancelled") },
                "\(receiver.standardError)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: inbox).isEmpty)
            // The receiver is interrupted: the sender fails with the reason.
            let second = try Self.send(lab, file: source)
            _ = await Self.line(second, "sending big.bin", within: .seconds(30))
            receiver.signal(SIGINT)
            #expect(await second.exited(within: .seconds(20)) == 1)
            #expect(second.standardError.contains("not sent"), "\(second.standardError)")
            _ = await receiver.exited(within: .seconds(10))
            #expect(try FileManager.default.contentsOfDirectory(atPath: inbox).isEmpty)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aSenderKilledMidTransferIsReportedAndItsPartialFileRemoved()
        async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let directory = try Self.temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let source = directory + "/big.bin"
            try Self.randomFile(source, mebibytes: 512)
            let inbox = directory + "/inbox"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            let receiver = try Self.receive(lab, dir: inbox)
            _ = await Self.line(receiver, "receiving as Rx", within: .seconds(10))
            let sender = try Self.send(lab, file: source)
            // Mid-transfer: once the receiver is receiving (the sender's first progress line comes as soon as its
            // offer is queued, and a sender killed before the offer left is one the receiver never heard of).
            #expect(await Self.line(receiver, "receiving big.bin", within: .seconds(30)) != nil)
            sender.signal(SIGKILL)
            // The receiver waits for the reconnection grace (10 s), then gives the transfer up.
            #expect(await receiver.exited(within: .seconds(25)) == 1, "\(receiver.lines) \(receiver.standardError)")
            #expect(receiver.standardError.contains("not back within"), "\(receiver.standardError)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: inbox).isEmpty)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aFullDiskFailsTheTransferOnBothSidesWithThatReason() async throws {
        try await withNetLab(hosts: 2) { lab in
            let directory = try Self.temporaryDirectory()
            defer {
                _ = try? Subprocess.run("/bin/umount", [directory + "/small"])
                try? FileManager.default.removeItem(atPath: directory)
            }
            let source = directory + "/big.bin"
            try Self.randomFile(source, mebibytes: 32)
            let small = directory + "/small"
            try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
            let mount = try Subprocess.run("/bin/mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", small])
            try #require(mount.status == 0, "cannot mount a tmpfs: \(mount.stderr)")
            let receiver = try Self.receive(lab, dir: small)
            _ = await Self.line(receiver, "receiving as Rx", within: .seconds(10))
            let sender = try Self.send(lab, file: source)
            #expect(await sender.exited(within: .seconds(30)) == 1)
            #expect(sender.standardError.contains("the receiver's disk is full"), "\(sender.standardError)")
            #expect(await receiver.exited(within: .seconds(10)) == 1)
            #expect(receiver.standardError.contains("the receiver's disk is full"), "\(receiver.standardError)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: small).isEmpty)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aLinkDownForThreeSecondsMidTransferResumesAndCompletes() async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let directory = try Self.temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let source = directory + "/big.bin"
            try Self.randomFile(source, mebibytes: 256)
            let expected = try Self.sha256(source)
            let inbox = directory + "/inbox"
            try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
            // A 1 s silence timeout, so the 3 s outage ends the connection and the session must reconnect.
            let receiver = try Self.receive(lab, dir: inbox, ["--silence-timeout", "1"])
            _ = await Self.line(receiver, "receiving as Rx", within: .seconds(10))
            // A slow link (tbf) so the transfer is still running when the link goes down.
            _ = try lab.run(
                host: 1, "/usr/sbin/tc",
                [
                    "qdisc", "add", "dev", NetLab.interfaceName, "root", "tbf", "rate", "400mbit", "burst", "256kb",
                    "latency", "50ms",
                ])
            let sender = try Self.send(lab, file: source, ["--silence-timeout", "1"])
            _ = await Self.line(sender, "sending big.bin", within: .seconds(30))
            try await Task.sleep(for: .seconds(1))
            try lab.setLinkDown(host: 1)
            try await Task.sleep(for: .seconds(3))
            try lab.setLinkUp(host: 1)
            let sent = await Self.line(sender, "sent ", within: .seconds(60))
            #expect(
                sent == "sent big.bin 268435456 sha256 \(expected) to Rx",
                "\(sender.lines.suffix(5)) \(sender.standardError)")
            #expect(await receiver.exited(within: .seconds(15)) == 0, "\(receiver.standardError)")
            #expect(receiver.lines.contains { $0.hasPrefix("reconnecting Tx") }, "\(receiver.lines.suffix(8))")
            #expect(try Self.sha256(inbox + "/big.bin") == expected)
        }
    }

    @Test(.requires(.netLab, .discoveryCLI)) func aBurstOfTenThousandMessagesSurvivesALinkDownForThreeSeconds()
        async throws
    {
        try await withNetLab(hosts: 2) { lab in
            let binary = try MultipeerBinary.require()
            // A 1 s silence timeout, so the 3 s outage ends the connection and the session must reconnect.
            let base = ["chat", "mp-burst-e2e", "--interface", NetLab.interfaceName, "--silence-timeout", "1"]
            let alpha = try lab.spawn(
                host: 0, binary, base + ["--name", "Alpha", "--accept", "all"], interactive: true)
            let bravo = try lab.spawn(
                host: 1, binary, base + ["--name", "Bravo", "--invite", "Alpha"], interactive: true)
            #expect(await bravo.nextLine(timeout: .seconds(15)) { $0 == "connected Alpha" } != nil)
            #expect(await alpha.nextLine(timeout: .seconds(15)) { $0 == "connected Bravo" } != nil)
            let count = 10_000
            let writer = Task {
                for index in 0..<count {
                    bravo.writeLine("m \(index)")
                    if index % 500 == 0 { try? await Task.sleep(for: .milliseconds(60)) }
                }
            }
            try await Task.sleep(for: .seconds(1))
            try lab.setLinkDown(host: 1)
            try await Task.sleep(for: .seconds(3))
            try lab.setLinkUp(host: 1)
            await writer.value
            let deadline = ContinuousClock.now + .seconds(60)
            var received: [Int] = []
            while ContinuousClock.now < deadline {
                received = alpha.lines.filter { $0.hasPrefix("message Bravo: m ") }.map {
                    Int($0.split(separator: " ").last!)!
                }
                if received.count >= count { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(received == Array(0..<count), "\(received.count) received; \(firstGap(received))")
            #expect(
                alpha.lines.contains { $0.hasPrefix("reconnecting Bravo") },
                "the outage was seen: \(alpha.lines.filter { !$0.hasPrefix("message") })")
            #expect(!alpha.lines.contains { $0.hasPrefix("disconnected") })
        }
    }
}

func firstGap(_ sequence: [Int]) -> String {
    for (index, value) in sequence.enumerated() where value != index { return "first mismatch at \(index): \(value)" }
    return "no mismatch"
}

/// Polls `condition` for up to 20 s (times the sanitizer builds' factor).
func waitFor(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<Int(400 * TestTime.factor) {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return condition()
}
