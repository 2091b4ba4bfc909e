import Foundation
import MulticastDNS
import NetLab

#if canImport(Glibc)
    import Glibc
#endif

/// Runs N chaos peers in a lab for a set time and does them harm: kills (`-9`, during handshakes, invitations and
/// transfers too), leaves and rejoins, links down and up, a receiver whose disk is full, a reader that stalls;
/// feeds what everyone printed to a ``ChaosLedger``; samples memory, descriptors, CPU and leftover files; says what
/// broke. The soak is the same run without kills and cuts, for an hour.
final class ChaosDriver {
    struct Options {
        var peers = 6
        var minutes = 2.0
        var seed: UInt64 = UInt64(Date().timeIntervalSince1970)
        var soak = false
        /// Where the per-sample CSV goes (rows: time, peer, incarnation, RSS, descriptors, CPU, partial files).
        var samples: String?
        /// Where every line the peers printed goes, each after its peer's name and incarnation.
        var log: String?
        /// Seconds between samples.
        var sampleInterval = 10.0
    }

    private struct Member {
        let name: String
        let host: Int
        var incarnation = 0
        var process: LabProcess?
        var down = false
        var linkDown = false
        var everRestarted = false
        let directory: String
        let resources: String
        var firstFds: Int?
        var firstRSS: Int?
        var firstHeap: Int64?
        var lastFds = 0
        var lastRSS = 0
        var lastHeap: Int64?
    }

    private enum Action {
        case restart(Int)
        case linkUp(Int)
        case kill(Int)
    }

    let options: Options
    private var random: SplitMix64
    private var ledger = ChaosLedger()
    private var members: [Member] = []
    private var scheduled: [(time: Double, action: Action)] = []
    private var faults: [String: Int] = [:]
    private var lab: NetLab!
    private let executable: String
    private let work: String
    private var mounted: String?
    private var csv = "seconds,minutes,peer,incarnation,rss_mib,heap_mib,fds,cpu_seconds,cpu_percent,partial_files\n"
    /// Each member's last reported heap in use (bytes).
    private var heap: [String: Int64] = [:]
    /// Each member's CPU seconds and time at its last sample (per incarnation), for the CPU share between two.
    private var lastCPU: [String: (incarnation: Int, cpu: Double, time: Double)] = [:]
    private let started = Date().timeIntervalSince1970
    private var eventLog: FileHandle?

    init(_ options: Options) throws {
        self.options = options
        random = SplitMix64(seed: options.seed)
        executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        work = NSTemporaryDirectory() + "multipeer-chaos-\(getpid())"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    }

    private var now: Double { Date().timeIntervalSince1970 }
    private func say(_ text: String) {
        let line = String(format: "%7.1f s  ", now - started) + text
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Runs; true when no rule was broken.
    func run() throws -> Bool {
        // A line written to a peer that just died must not end the driver.
        signal(SIGPIPE, SIG_IGN)
        if let path = options.log {
            _ = FileManager.default.createFile(atPath: path, contents: nil)
            eventLog = FileHandle(forWritingAtPath: path)
        }
        lab = try NetLab.create(hosts: options.peers)
        defer { cleanUp() }
        let diskFullPeer = options.soak ? nil : options.peers - 1
        for index in 0..<options.peers {
            let directory = "\(work)/P\(index)"
            let resources = "\(directory)/received"
            try FileManager.default.createDirectory(atPath: resources, withIntermediateDirectories: true)
            if index == diskFullPeer {
                let mount = try ProcessLauncher.run(
                    "/bin/mount", ["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", resources])
                guard mount.status == 0 else { throw ChaosError("mount of a 4 MiB tmpfs failed: \(mount.stderr)") }
                mounted = resources
            }
            members.append(Member(name: "P\(index)", host: index, directory: directory, resources: resources))
        }
        say(
            "multipeer-chaos: \(options.peers) peers, \(options.minutes) min, seed \(options.seed)"
                + (options.soak ? ", soak (no kills or cuts)" : "")
                + (diskFullPeer.map { ", P\($0) receives on a 4 MiB file system" } ?? ""))
        for index in members.indices { try start(index) }
        let formed = waitForMesh(within: 90)
        say(formed ? "mesh formed" : "the mesh did not form in 90 s")
        if !formed { return report(extra: ["the mesh did not form within 90 s"]) }
        let end = now + options.minutes * 60
        let calmFrom = end - (options.soak ? 30 : 25)
        var nextSend = now
        var nextFault = now + 2
        var nextSample = now
        var nextFile = now + 5
        while now < end {
            pump()
            runScheduled()
            if now >= nextSample {
                sample()
                nextSample += options.sampleInterval
            }
            if now < calmFrom - 3, now >= nextSend {
                for member in members where !member.down { member.process?.writeLine("send \(options.soak ? 2 : 3)") }
                nextSend += 1
            }
            if now < calmFrom - 3, now >= nextFile {
                randomFile()
                nextFile += options.soak ? 20 : 6
            }
            if now < calmFrom - 3, now >= nextFault {
                try fault()
                nextFault += options.soak ? 120 : Double(random.next(in: 2...5))
            }
            if now >= calmFrom { try calm() }
            usleep(50_000)
        }
        pump()
        sample()
        return try finish()
    }

    // MARK: Peers

    private func start(_ index: Int) throws {
        members[index].incarnation += 1
        // A new incarnation starts with no one connected.
        connected[members[index].name] = []
        heap[members[index].name] = nil
        members[index].down = false
        let member = members[index]
        let process = try lab.spawn(
            host: member.host, executable,
            [
                "peer", "--name", member.name, "--interface", NetLab.interfaceName, "--incarnation",
                "\(member.incarnation)", "--directory", member.directory, "--resources", member.resources,
            ], interactive: true)
        members[index].process = process
        ledger.started(member.name, incarnation: member.incarnation, at: now)
    }

    private var alive: [String] { members.filter { !$0.down }.map(\.name) }

    private func waitForMesh(within seconds: Double) -> Bool {
        let deadline = now + seconds
        while now < deadline {
            pump()
            if meshComplete { return true }
            usleep(100_000)
        }
        return false
    }

    /// Whether every live peer has every other live peer connected, by their own last reports.
    private var meshComplete: Bool {
        let names = Set(alive)
        for name in names where connectedSet(of: name) != names.subtracting([name]) { return false }
        return true
    }

    private var connected: [String: Set<String>] = [:]
    private func connectedSet(of name: String) -> Set<String> { connected[name] ?? [] }

    /// Peers that ended without being told to (a crash, a failed start), with their last words.
    private var unexpectedExits: [String] = []

    /// Reads every line the peers printed since the last call into the ledger.
    private func pump() {
        for index in members.indices {
            guard let process = members[index].process else { continue }
            drain(process, index)
            if !members[index].down, let status = process.exitStatus {
                let member = members[index]
                let words = process.standardError.split(separator: "\n").suffix(3).joined(separator: " | ")
                unexpectedExits.append("\(member.name)#\(member.incarnation) exited on its own (\(status)): \(words)")
                say("\(member.name)#\(member.incarnation) exited on its own (\(status))")
                members[index].down = true
                members[index].everRestarted = true
                scheduled.append((now + 1, .restart(index)))
            }
        }
        ledger.checkDeadlines(at: now - 0.5, alive: Set(alive))
    }

    // MARK: Faults

    private func fault() throws {
        let up = members.indices.filter { !members[$0].down && !members[$0].linkDown }
        // At most two peers harmed at once: the rest must go on meanwhile.
        guard members.count - up.count < 2, let victim = up.randomElement(using: &random) else { return }
        let kinds =
            options.soak ? ["leave"] : ["kill", "kill", "leave", "linkDown", "stall", "diskFull", "killInTransfer"]
        let kind = kinds.randomElement(using: &random)!
        faults[kind, default: 0] += 1
        let name = members[victim].name
        switch kind {
        case "kill":
            kill(victim)
            // Sometimes killed again just after it is back, while it shakes hands and is invited.
            if random.next(in: 0...2) == 0, let back = scheduled.last?.time {
                scheduled.append((back + Double(random.next(in: 2...12)) / 10, .kill(victim)))
            }
        case "leave":
            pump()
            say("\(name) leaves")
            ledger.fault(.leave, to: name, at: now, alive: alive)
            members[victim].process?.writeLine("leave")
            members[victim].down = true
            members[victim].everRestarted = true
            scheduled.append((now + (options.soak ? 10 : Double(random.next(in: 2...5))), .restart(victim)))
        case "linkDown":
            let seconds = Double(random.next(in: 3...14))
            pump()
            say("\(name)'s link down for \(Int(seconds)) s")
            ledger.fault(.linkDown(seconds: seconds), to: name, at: now, alive: alive)
            try lab.setLinkDown(host: members[victim].host)
            members[victim].linkDown = true
            scheduled.append((now + seconds, .linkUp(victim)))
        case "stall":
            let seconds = random.next(in: 2...8)
            say("\(name) stops reading for \(seconds) s")
            members[victim].process?.writeLine("stall \(seconds)")
        case "diskFull":
            guard let full = members.firstIndex(where: { $0.resources == mounted }), !members[full].down,
                let sender = members.indices.filter({ $0 != full && !members[$0].down }).randomElement(using: &random)
            else { return }
            say("\(members[sender].name) sends 6 MiB to \(members[full].name), whose disk holds 4")
            members[sender].process?.writeLine("file \(members[full].name) \(6 << 20)")
        default:  // killInTransfer
            guard
                let receiver = members.indices.filter({ $0 != victim && !members[$0].down }).randomElement(
                    using: &random)
            else { return }
            say("\(name) sends 3 MiB to \(members[receiver].name) and one of them is killed during it")
            members[victim].process?.writeLine("file \(members[receiver].name) \(3 << 20)")
            let target = random.next(in: 0...1) == 0 ? victim : receiver
            scheduled.append((now + Double(random.next(in: 1...6)) / 10, .kill(target)))
        }
    }

    private func kill(_ index: Int) {
        guard !members[index].down, let process = members[index].process else { return }
        pump()
        say("kill -9 \(members[index].name)#\(members[index].incarnation)")
        ledger.fault(.kill, to: members[index].name, at: now, alive: alive)
        process.signal(SIGKILL)
        process.waitForExit(timeout: .seconds(5))
        drain(process, index)
        members[index].down = true
        members[index].everRestarted = true
        // Back after one to four seconds (the calm brings back whoever is still down).
        scheduled.append((now + Double(random.next(in: 1...4)), .restart(index)))
    }

    /// Feeds what a process printed since the last call to the ledger (and the log).
    private func drain(_ process: LabProcess, _ index: Int) {
        let name = members[index].name
        let incarnation = members[index].incarnation
        while let line = process.readLine(timeout: .zero) {
            eventLog?.write(Data("\(name)#\(incarnation) \(line)\n".utf8))
            guard let event = ChaosEvent(line: line) else { continue }
            if event.kind == ChaosEvent.Kind.heap {
                heap[name] = event.size
                continue
            }
            if event.kind == ChaosEvent.Kind.state, let peer = event.peer {
                if event.state == "connected" {
                    connected[name, default: []].insert(peer)
                } else {
                    connected[name]?.remove(peer)
                }
            }
            ledger.record(event, from: name, incarnation: incarnation)
        }
    }

    private func runScheduled() {
        let due = scheduled.filter { $0.time <= now }
        scheduled.removeAll { $0.time <= now }
        for (_, action) in due {
            switch action {
            case .kill(let index):
                kill(index)
            case .restart(let index):
                guard members[index].down else { continue }
                if let process = members[index].process {
                    if process.waitForExit(timeout: .seconds(5)) == nil { process.forceKill() }
                    drain(process, index)
                }
                try? start(index)
                say("\(members[index].name) starts again (#\(members[index].incarnation))")
            case .linkUp(let index):
                try? lab.setLinkUp(host: members[index].host)
                members[index].linkDown = false
                say("\(members[index].name)'s link up")
            }
        }
    }

    private func randomFile() {
        let up = members.indices.filter { !members[$0].down && members[$0].resources != mounted }
        guard up.count >= 2, let sender = up.randomElement(using: &random),
            let receiver = up.filter({ $0 != sender }).randomElement(using: &random)
        else { return }
        let size = options.soak ? random.next(in: 256...4096) << 10 : random.next(in: 16...1024) << 10
        members[sender].process?.writeLine("file \(members[receiver].name) \(size)")
    }

    private var calmed = false

    /// No more harm: everyone back, every link up, then time for what is owed to arrive or be reported.
    private func calm() throws {
        guard !calmed else { return }
        calmed = true
        say("calm: every peer back, every link up; waiting for what is owed")
        for (_, action) in scheduled.sorted(by: { $0.time < $1.time }) {
            if case .linkUp(let index) = action {
                try lab.setLinkUp(host: members[index].host)
                members[index].linkDown = false
            }
        }
        scheduled = []
        for index in members.indices where members[index].down {
            if let process = members[index].process {
                if process.waitForExit(timeout: .seconds(5)) == nil { process.forceKill() }
                drain(process, index)
            }
            try start(index)
        }
    }

    // MARK: Samples

    private func sample() {
        let time = now - started
        for index in members.indices where !members[index].down {
            guard let pid = members[index].process?.pid else { continue }
            let rss = Self.residentKiB(pid) ?? 0
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
            let cpu = Self.cpuSeconds(pid) ?? 0
            let partial = partialFiles(index).count
            let name = members[index].name
            // The first sample of an incarnation has no share yet: left empty.
            var share = ""
            if let last = lastCPU[name], last.incarnation == members[index].incarnation, time > last.time {
                share = String(format: "%.1f", (cpu - last.cpu) / (time - last.time) * 100)
            }
            lastCPU[name] = (members[index].incarnation, cpu, time)
            let heapMiB = heap[name].map { String(format: "%.1f", Double($0) / 1_048_576) } ?? ""
            csv += String(
                format: "%.1f,%.2f,%@,%d,%.1f,%@,%d,%.2f,%@,%d\n", time, time / 60, name, members[index].incarnation,
                Double(rss) / 1024, heapMiB, fds, cpu, share, partial)
            if let path = options.samples {
                // Written as it goes: an hour's samples are not lost to a run that ends badly.
                _ = FileManager.default.createFile(atPath: path, contents: Data(csv.utf8))
            }
            if !members[index].everRestarted {
                if members[index].firstFds == nil, time > 20 {
                    members[index].firstFds = fds
                    members[index].firstRSS = rss
                    members[index].firstHeap = heap[name]
                }
                members[index].lastFds = fds
                members[index].lastRSS = rss
                members[index].lastHeap = heap[name]
            }
        }
    }

    private func partialFiles(_ index: Int) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: members[index].resources)) ?? []).filter {
            $0.hasPrefix(".mp-partial-")
        }
    }

    static func residentKiB(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ").dropFirst().first ?? "")
        }
        return nil
    }

    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime 14 and stime 15 (1-based over the whole line).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    // MARK: The end

    private func finish() throws -> Bool {
        // Every reconnection settled, every report in: the longest bound the ledger checks, and a margin.
        let settle = now + ledger.bounds.graceBound + 5
        while now < settle {
            pump()
            usleep(100_000)
        }
        var extra = unexpectedExits
        if !meshComplete {
            extra.append("after the calm the mesh is not whole: \(connected.mapValues { $0.sorted() })")
        }
        for index in members.indices {
            let leftovers = partialFiles(index)
            if !leftovers.isEmpty {
                extra.append(
                    "\(members[index].name): \(leftovers.count) partial files left in its folder: \(leftovers)")
            }
            let member = members[index]
            if let first = member.firstFds, member.lastFds > first + 8 {
                extra.append("\(member.name): descriptors grew from \(first) to \(member.lastFds)")
            }
            if let first = member.firstRSS, Double(member.lastRSS) > Double(first) * 1.5 + 20_000 {
                extra.append("\(member.name): resident memory grew from \(first) KiB to \(member.lastRSS) KiB")
            }
            // The heap in use is where a leak shows (resident memory also holds what the allocator keeps).
            if let first = member.firstHeap, let last = member.lastHeap, Double(last) > Double(first) * 1.5 + 4_194_304
            {
                extra.append("\(member.name): heap in use grew from \(first >> 10) KiB to \(last >> 10) KiB")
            }
        }
        var survivors: [String: Int] = [:]
        for member in members { survivors[member.name] = member.incarnation }
        let members = members
        ledger.finish(survivors: survivors) { receiver, name, sha in
            guard let member = members.first(where: { $0.name == receiver }) else { return false }
            return Self.sha256(of: member.resources + "/" + name) == sha
        }
        for member in members { member.process?.writeLine("leave") }
        for member in members { member.process?.waitForExit(timeout: .seconds(10)) }
        return report(extra: extra)
    }

    static func sha256(of path: String) -> String? {
        guard let output = try? ProcessLauncher.run("/usr/bin/sha256sum", [path]), output.status == 0 else {
            return nil
        }
        return output.stdout.split(separator: " ").first.map(String.init)
    }

    private func report(extra: [String]) -> Bool {
        let counts = ledger.counts
        let sentCount = ledger.sent.values.reduce(0) { $0 + $1.count }
        say(
            "messages: \(sentCount) queued, \(counts["deliveredMessages"] ?? 0) delivered, "
                + "\(counts["undeliveredMessages"] ?? 0) reported undelivered, "
                + "\(counts["diedWithReceiver"] ?? 0) died unread in a killed receiver")
        say(
            "files: \(counts[ChaosEvent.Kind.fileSent] ?? 0) sends ended, \(counts[ChaosEvent.Kind.fileReceived] ?? 0) "
                + "receptions ended")
        say("faults: " + faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        for member in members where !member.everRestarted {
            say(
                "\(member.name): descriptors \(member.firstFds ?? 0) → \(member.lastFds), resident "
                    + "\((member.firstRSS ?? 0) / 1024) → \(member.lastRSS / 1024) MiB, heap in use "
                    + "\((member.firstHeap ?? 0) >> 10) → \((member.lastHeap ?? 0) >> 10) KiB")
        }
        if let path = options.samples {
            _ = FileManager.default.createFile(atPath: path, contents: Data(csv.utf8))
            say("samples: \(path)")
        }
        let violations = ledger.violations + extra
        if violations.isEmpty {
            say("no rule broken")
            return true
        }
        say("\(violations.count) rules broken:")
        for violation in violations.prefix(50) { FileHandle.standardOutput.write(Data("  - \(violation)\n".utf8)) }
        return false
    }

    private func cleanUp() {
        for member in members { member.process?.forceKill() }
        lab?.teardown()
        if let mounted { _ = try? ProcessLauncher.run("/bin/umount", [mounted]) }
        try? FileManager.default.removeItem(atPath: work)
    }
}

extension SplitMix64 {
    /// A number in `range` (the driver's choices come from one seeded generator, so `--seed` replays them).
    mutating func next(in range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
}

/// Why a chaos run could not run.
struct ChaosError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
