/// What a chaos run promised and what it saw: every peer's events and the driver's faults go in, violations come
/// out. Pure (no I/O, no clock), so its rules are tested on made-up histories.
///
/// The rules:
/// - **Messages**: a receiver's application gets each sender incarnation's messages once and in order; a gap is
///   allowed only for messages the sender reported undelivered; none reaches two incarnations of a receiver; at the
///   end, every message a surviving sender queued was delivered or reported undelivered. Excused (and counted):
///   messages queued while a receiver incarnation that was then killed lived, which its application never took: a
///   session acknowledges what reached it, so what sat in a killed process's inbox died with it.
/// - **Departures**: a peer connected to one that is killed sees it leave `connected` within `lossBound`; to one
///   that leaves, sees `notConnected` with the code `left` within `lossBound`; to one whose link is down longer
///   than `silenceBound`, sees it leave `connected` within `silenceBound`; `reconnecting` ends (back, or
///   `notConnected`) within `graceBound`.
/// - **Files**: a file the sender saw verified arrived verified at a receiver; a file that started arriving ends
///   (received or failed) unless its receiver was killed.
struct ChaosLedger {
    /// What the driver did.
    enum Fault: Equatable {
        case kill
        case leave
        case linkDown(seconds: Double)
    }

    struct Bounds {
        /// A killed or leaving peer is seen gone within this (seconds).
        var lossBound = 3.0
        /// A peer cut off is seen gone within this (the connection's silence timeout plus slack).
        var silenceBound = 9.0
        /// `reconnecting` ends within this (the session's reconnection grace plus slack).
        var graceBound = 13.0
    }

    struct SenderKey: Hashable, Comparable {
        var sender: String
        var incarnation: Int
        var receiver: String

        static func < (a: Self, b: Self) -> Bool {
            (a.sender, a.incarnation, a.receiver) < (b.sender, b.incarnation, b.receiver)
        }
    }

    private struct Stream {
        var last = 0
        var seen: Set<Int> = []
    }

    let bounds: Bounds
    private(set) var violations: [String] = []
    private(set) var sent: [SenderKey: [Int]] = [:]
    private var undelivered: [SenderKey: Set<Int>] = [:]
    /// Receiver incarnations each message reached.
    private var reached: [SenderKey: [Int: Int]] = [:]
    /// Per receiver incarnation and sender incarnation: what was delivered so far.
    private var streams: [String: Stream] = [:]
    /// Per observer and peer: the observer's last state for the peer, and since when.
    private var states: [String: (state: String, time: Double)] = [:]
    private var pendingChecks: [(deadline: Double, observer: String, peer: String, since: Double, what: String)] = []
    private var killed: [String: Set<Int>] = [:]
    /// Until when each peer's link is down.
    private var cutUntil: [String: Double] = [:]
    /// When each incarnation of each peer started and (if it was killed) died.
    private var lifetimes: [String: [Int: (start: Double, killed: Double?)]] = [:]
    /// When each message was queued.
    private var sentAt: [SenderKey: [Int: Double]] = [:]
    private var incarnations: [String: Int] = [:]
    private var filesSent: [(sender: String, receiver: String, name: String, sha256: String)] = []
    private var filesReceived: [String: [String: String]] = [:]
    private var filesOpen: [String: Set<String>] = [:]
    private(set) var counts: [String: Int] = [:]

    init(bounds: Bounds = Bounds()) { self.bounds = bounds }

    private static func stateKey(_ observer: String, _ peer: String) -> String { observer + "\u{0}" + peer }

    /// A peer process started (its incarnation).
    mutating func started(_ peer: String, incarnation: Int, at time: Double) {
        incarnations[peer] = incarnation
        lifetimes[peer, default: [:]][incarnation] = (time, nil)
        // A new incarnation knows nobody yet, and waits for nothing its predecessor waited for.
        states = states.filter { !$0.key.hasPrefix(peer + "\u{0}") }
        pendingChecks.removeAll { $0.observer == peer }
    }

    /// Whether the message may have died in the inbox of a killed incarnation of its receiver.
    private func diedWithReceiver(_ key: SenderKey, _ sequence: Int) -> Bool {
        guard let time = sentAt[key]?[sequence] else { return false }
        return lifetimes[key.receiver]?.values.contains { life in
            guard let death = life.killed else { return false }
            return life.start <= time && time <= death
        } ?? false
    }

    /// One event a peer incarnation printed.
    mutating func record(_ event: ChaosEvent, from observer: String, incarnation: Int) {
        counts[event.kind, default: 0] += 1
        guard let other = event.peer else {
            if event.kind == ChaosEvent.Kind.error { violations.append("\(observer): \(event.reason ?? "error")") }
            return
        }
        switch event.kind {
        case ChaosEvent.Kind.sent:
            let key = SenderKey(sender: observer, incarnation: incarnation, receiver: other)
            sent[key, default: []] += event.sequences ?? []
            for sequence in event.sequences ?? [] { sentAt[key, default: [:]][sequence] = event.time }
        case ChaosEvent.Kind.sendFailed:
            // Refused by `send` (the peer was no longer connected): never numbered, never owed.
            refused[SenderKey(sender: observer, incarnation: incarnation, receiver: other), default: []]
                .formUnion(event.sequences ?? [])
        case ChaosEvent.Kind.undelivered:
            undelivered[SenderKey(sender: observer, incarnation: incarnation, receiver: other), default: []]
                .formUnion(event.sequences ?? [])
            counts["undeliveredMessages", default: 0] += event.sequences?.count ?? 0
        case ChaosEvent.Kind.received:
            received(event, by: observer, incarnation: incarnation, from: other)
        case ChaosEvent.Kind.state:
            stateChanged(observer: observer, peer: other, to: event.state ?? "", code: event.code, at: event.time)
        case ChaosEvent.Kind.fileSent where event.state == "sent":
            filesSent.append((observer, other, event.name ?? "", event.sha256 ?? ""))
        case ChaosEvent.Kind.fileStarted:
            filesOpen["\(observer) \(incarnation)", default: []].insert(event.name ?? "")
        case ChaosEvent.Kind.fileReceived:
            filesOpen["\(observer) \(incarnation)"]?.remove(event.name ?? "")
            if event.state == "received" { filesReceived[observer, default: [:]][event.name ?? ""] = event.sha256 }
        default:
            break
        }
    }

    private mutating func received(_ event: ChaosEvent, by receiver: String, incarnation: Int, from sender: String) {
        let senderIncarnation = event.incarnation ?? 0
        let key = SenderKey(sender: sender, incarnation: senderIncarnation, receiver: receiver)
        let streamKey = "\(receiver) \(incarnation) \(sender) \(senderIncarnation)"
        var stream = streams[streamKey] ?? Stream()
        for sequence in event.sequences ?? [] {
            counts["deliveredMessages", default: 0] += 1
            if sequence <= stream.last {
                violations.append(
                    "\(receiver)#\(incarnation) got \(sender)#\(senderIncarnation)'s message \(sequence) after "
                        + "\(stream.last)" + (stream.seen.contains(sequence) ? " (twice)" : " (out of order)"))
            } else {
                let skipped = (stream.last + 1..<sequence).filter { !(undelivered[key]?.contains($0) ?? false) }
                // A gap is only allowed for messages the sender reported lost (they may be reported after the
                // receiver moved on: checked again at the end).
                if !skipped.isEmpty { gaps[key, default: []].formUnion(skipped) }
                stream.last = sequence
            }
            stream.seen.insert(sequence)
            if let other = reached[key]?[sequence], other != incarnation {
                violations.append(
                    "\(sender)#\(senderIncarnation)'s message \(sequence) reached \(receiver)#\(other) and "
                        + "\(receiver)#\(incarnation)")
            }
            reached[key, default: [:]][sequence] = incarnation
        }
        streams[streamKey] = stream
    }

    private var gaps: [SenderKey: Set<Int>] = [:]
    /// Messages `send` refused at once, by sender incarnation and receiver.
    private var refused: [SenderKey: Set<Int>] = [:]

    private mutating func stateChanged(observer: String, peer: String, to state: String, code: String?, at time: Double)
    {
        let key = Self.stateKey(observer, peer)
        states[key] = (state, time)
        if state == "reconnecting" {
            pendingChecks.append(
                (time + bounds.graceBound, observer, peer, time, "reconnecting to end (back or notConnected)"))
        }
        // Checks this change satisfies.
        pendingChecks.removeAll { check in
            guard check.observer == observer, check.peer == peer, time >= check.since else { return false }
            switch check.what {
            case "left": return state == "notConnected" && code == "left"
            case "gone": return state != "connected"
            default: return state != "reconnecting"
            }
        }
    }

    /// The driver did `fault` to `peer` at `time` (before the peer's events after it are recorded).
    mutating func fault(_ fault: Fault, to peer: String, at time: Double, alive: [String]) {
        if fault == .kill {
            let incarnation = incarnations[peer] ?? 0
            killed[peer, default: []].insert(incarnation)
            lifetimes[peer, default: [:]][incarnation]?.killed = time
        }
        if case .linkDown(let seconds) = fault { cutUntil[peer] = time + seconds }
        for observer in alive where observer != peer {
            guard states[Self.stateKey(observer, peer)]?.state == "connected" else { continue }
            // When the observer's link or the peer's is down, neither a reset nor a `leave` gets through: the
            // observer finds the peer gone by silence.
            let cut = (cutUntil[observer] ?? 0) > time || (cutUntil[peer] ?? 0) > time
            let bound = cut ? bounds.silenceBound : bounds.lossBound
            switch fault {
            case .kill: pendingChecks.append((time + bound, observer, peer, time, "gone"))
            case .leave where bound == bounds.silenceBound:
                // Its `leave` cannot reach a cut-off observer, which sees the link lost instead.
                pendingChecks.append((time + bound, observer, peer, time, "gone"))
            case .leave: pendingChecks.append((time + bound, observer, peer, time, "left"))
            case .linkDown(let seconds) where seconds > bounds.silenceBound:
                pendingChecks.append((time + bounds.silenceBound, observer, peer, time, "gone"))
            case .linkDown: break
            }
        }
        if fault == .leave || fault == .kill {
            // What the peer itself was waiting for ends with it.
            pendingChecks.removeAll { $0.observer == peer }
        }
    }

    /// Checks the deadlines that passed by `time`, for observers in `alive` (a check of a peer that died since is
    /// dropped).
    mutating func checkDeadlines(at time: Double, alive: Set<String>) {
        pendingChecks.removeAll { check in
            guard check.deadline <= time else { return false }
            if alive.contains(check.observer) {
                let now = states[Self.stateKey(check.observer, check.peer)]
                violations.append(
                    "\(check.observer) did not see \(check.peer) \(check.what) within "
                        + "\(Int(check.deadline - check.since)) s (its state: \(now.map { "\($0.state)" } ?? "none"))")
            }
            return true
        }
    }

    /// The end: the rules that need the whole history. `survivors` are the sender incarnations alive at the end
    /// (name to incarnation); `verify` says whether a received file is on disk with its checksum.
    mutating func finish(survivors: [String: Int], verify: (String, String, String) -> Bool) {
        for (key, missing) in gaps.sorted(by: { $0.key < $1.key }) {
            // Skipped here and delivered to an earlier incarnation of the receiver (one that was killed or left)
            // is delivered once, not lost.
            var unexplained = missing.subtracting(undelivered[key] ?? []).subtracting(refused[key] ?? []).subtracting(
                reached[key].map { Set($0.keys) } ?? [])
            unexplained = unexplained.filter { !diedWithReceiver(key, $0) }
            if !unexplained.isEmpty {
                violations.append(
                    "\(key.receiver) skipped \(key.sender)#\(key.incarnation)'s messages "
                        + "\(Self.ranges(unexplained)) and none was reported undelivered")
            }
        }
        for (key, sequences) in sent.sorted(by: { $0.key < $1.key }) where survivors[key.sender] == key.incarnation {
            var unaccounted = Set(sequences).subtracting(reached[key].map { Set($0.keys) } ?? [])
                .subtracting(undelivered[key] ?? [])
            let excused = unaccounted.filter { diedWithReceiver(key, $0) }
            counts["diedWithReceiver", default: 0] += excused.count
            unaccounted.subtract(excused)
            if !unaccounted.isEmpty {
                violations.append(
                    "\(key.sender)#\(key.incarnation) → \(key.receiver): \(unaccounted.count) of \(sequences.count) "
                        + "messages neither delivered nor reported undelivered: \(Self.ranges(unaccounted))")
            }
        }
        for file in filesSent {
            guard let sha = filesReceived[file.receiver]?[file.name], sha == file.sha256 else {
                violations.append(
                    "\(file.sender)'s \(file.name) was verified as sent but \(file.receiver) has no such file")
                continue
            }
            if !verify(file.receiver, file.name, sha) {
                violations.append("\(file.receiver)'s \(file.name) is not on disk with its checksum")
            }
        }
        for (receiver, open) in filesOpen.sorted(by: { $0.key < $1.key }) where !open.isEmpty {
            let parts = receiver.split(separator: " ")
            let name = String(parts[0])
            let incarnation = Int(parts[1]) ?? 0
            if killed[name]?.contains(incarnation) == true || survivors[name] != incarnation { continue }
            violations.append("\(receiver): files started and never ended: \(open.sorted())")
        }
    }

    /// `1-4, 9` for a set of numbers.
    static func ranges(_ numbers: Set<Int>) -> String {
        var parts: [String] = []
        var sorted = numbers.sorted()[...]
        while let first = sorted.popFirst() {
            var last = first
            while sorted.first == last + 1 { last = sorted.popFirst()! }
            parts.append(first == last ? "\(first)" : "\(first)-\(last)")
            if parts.count == 8, !sorted.isEmpty {
                parts.append("…")
                break
            }
        }
        return parts.joined(separator: ", ")
    }
}
