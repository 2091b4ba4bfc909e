import DequeModule
import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO

/// One peer of a chaos run, in a process of its own: advertises, browses, invites whoever it finds and accepts
/// every invitation into one session (the "connected colors" crowd), and obeys the driver's lines on stdin:
///
/// - `send K`: K numbered messages to every connected peer (each receiver has its own queue, in order);
/// - `file NAME BYTES`: a file of random bytes to NAME;
/// - `stall SECONDS`: the application stops reading messages for that long (the senders' flow control holds);
/// - `leave`: leaves the session and exits.
///
/// Everything it sees is printed as one ``ChaosEvent`` per line for the driver's ledger.
final class ChaosPeer: Sendable {
    struct Options {
        var name = "peer"
        var service = "chaos"
        var interface = "lo"
        var incarnation = 1
        /// Where the identity (kept across restarts) and the outgoing files live.
        var directory = FileManager.default.temporaryDirectory.path
        /// Where received files go (the driver may mount a small file system there).
        var resources: String?
    }

    let options: Options
    let session: Session
    let browser: PeerBrowser
    let advertiser: PeerAdvertiser
    let network: PeerNetwork
    private let state = Lock(State())
    private static let output = Lock(())

    private struct State {
        var connected: [String: Peer] = [:]
        var inviting: Set<PeerFingerprint> = []
        var queues: [PeerFingerprint: AsyncStream<Int>.Continuation] = [:]
        var nextSequence: [PeerFingerprint: Int] = [:]
        /// Per receiver, the messages `send` numbered and nobody reported lost yet, oldest first.
        var outstanding: [PeerFingerprint: Deque<(number: UInt64, sequence: Int)>] = [:]
        /// Numbers reported lost before their `send` returned (matched when it does).
        var unresolved: [PeerFingerprint: Set<UInt64>] = [:]
        var stalledUntil: ContinuousClock.Instant?
        var files = 0
    }

    /// The most messages kept per receiver to map loss reports back (see ``resolve(_:in:)``).
    static let outstandingLimit = 20_000

    static func emit(_ event: ChaosEvent) {
        let line = event.line + "\n"
        output.withLock { _ in
            FileHandle.standardOutput.write(Data(line.utf8))
        }
    }

    init(_ options: Options) async throws {
        self.options = options
        let identityPath = options.directory + "/identity"
        var identity: PeerIdentity
        if FileManager.default.fileExists(atPath: identityPath) {
            identity = try PeerIdentity.load(from: identityPath)
        } else {
            identity = try PeerIdentity.generate(displayName: options.name)
            try identity.save(to: identityPath)
        }
        var configuration = PeerNetwork.Configuration()
        configuration.discovery.interfaces = .named([options.interface])
        network = try PeerNetwork(configuration: configuration)
        var sessionConfiguration = SessionConfiguration()
        sessionConfiguration.maximumPeers = 64
        sessionConfiguration.resourceDirectory = options.resources ?? options.directory + "/received"
        try? FileManager.default.createDirectory(
            atPath: sessionConfiguration.resourceDirectory, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        session = try await Session(identity: identity, configuration: sessionConfiguration, network: network)
        advertiser = try await PeerAdvertiser(serviceType: options.service, identity: identity, network: network)
        browser = try await PeerBrowser(serviceType: options.service, identity: identity, network: network)
        var ready = ChaosEvent(kind: ChaosEvent.Kind.ready, peer: options.name)
        ready.incarnation = options.incarnation
        ready.path = sessionConfiguration.resourceDirectory
        Self.emit(ready)
    }

    /// Runs until `leave` or the end of input.
    func run() async {
        let tasks = [
            Task { for await invitation in advertiser.invitations { try? await invitation.accept(into: session) } },
            Task { for await event in session.events { self.sessionEvent(event) } },
            Task { await self.read() },
            Task { await self.inviteLoop() },
            Task {
                // The heap in use, which tells a leak from the allocator keeping freed pages (resident memory).
                while !Task.isCancelled {
                    var event = ChaosEvent(kind: ChaosEvent.Kind.heap)
                    event.size = ProcessMemory.heapInUse().map(Int64.init)
                    Self.emit(event)
                    try? await Task.sleep(for: .seconds(10))
                }
            },
        ]
        for await line in Self.standardInput() {
            if line == "leave" { break }
            await command(line)
        }
        browser.stop()
        await session.disconnect()
        await advertiser.stop()
        await network.shutdown()
        for task in tasks { task.cancel() }
    }

    /// Standard input's lines, read on a thread of their own (a blocking read must not hold a thread of the
    /// concurrency pool).
    private static func standardInput() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream<String>.makeStream()
        Thread.detachNewThread {
            while let line = readLine() { continuation.yield(line) }
            continuation.finish()
        }
        return stream
    }

    /// Invites every peer found and not connected, again every second while it is not (a peer killed and
    /// restarted, or cut off past the reconnection grace, is invited anew).
    private func inviteLoop() async {
        while !Task.isCancelled {
            for found in browser.peers {
                let fp = found.peer.claimedFingerprint
                let start = state.withLock { state -> Bool in
                    guard state.connected[found.peer.displayName]?.claimedFingerprint != fp,
                        !state.inviting.contains(fp)
                    else { return false }
                    state.inviting.insert(fp)
                    return true
                }
                guard start else { continue }
                let peer = found.peer
                Task {
                    _ = await browser.invite(peer, into: session, timeout: .seconds(10))
                    state.withLock { _ = $0.inviting.remove(fp) }
                }
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func command(_ line: String) async {
        let words = line.split(separator: " ").map(String.init)
        switch (words.first, words.count) {
        case ("send", 2):
            guard let count = Int(words[1]), count > 0 else { return error("send needs a count: \(line)") }
            let peers = state.withLock { Array($0.connected.values) }
            for peer in peers { queue(for: peer).yield(count) }
        case ("file", 3):
            guard let size = Int(words[2]), size >= 0 else { return error("file needs a size: \(line)") }
            guard let peer = state.withLock({ $0.connected[words[1]] }) else {
                var event = ChaosEvent(kind: ChaosEvent.Kind.fileSent, peer: words[1])
                event.state = "notConnected"
                return Self.emit(event)
            }
            sendFile(size: size, to: peer)
        case ("stall", 2):
            guard let seconds = Double(words[1]) else { return error("stall needs seconds: \(line)") }
            state.withLock { $0.stalledUntil = .now + .milliseconds(Int(seconds * 1000)) }
            var event = ChaosEvent(kind: ChaosEvent.Kind.reader)
            event.state = "stalled"
            Self.emit(event)
        default:
            error("unknown command: \(line)")
        }
    }

    private func error(_ text: String) {
        var event = ChaosEvent(kind: ChaosEvent.Kind.error)
        event.reason = text
        Self.emit(event)
    }

    // MARK: Messages

    /// The peer's queue of sends: one task writes them in order, so a stalled receiver holds up only its own.
    private func queue(for peer: Peer) -> AsyncStream<Int>.Continuation {
        let fp = peer.claimedFingerprint
        let (made, existing) = state.withLock { state -> (AsyncStream<Int>?, AsyncStream<Int>.Continuation) in
            if let existing = state.queues[fp] { return (nil, existing) }
            let (stream, continuation) = AsyncStream<Int>.makeStream()
            state.queues[fp] = continuation
            return (stream, continuation)
        }
        if let made {
            Task {
                for await count in made { await self.send(count, to: peer) }
            }
        }
        return existing
    }

    private func send(_ count: Int, to peer: Peer) async {
        let fp = peer.claimedFingerprint
        var sent = ChaosEvent(kind: ChaosEvent.Kind.sent, peer: peer.displayName)
        var failed = ChaosEvent(kind: ChaosEvent.Kind.sendFailed, peer: peer.displayName)
        sent.sequences = []
        sent.numbers = []
        failed.sequences = []
        for _ in 0..<count {
            let sequence = state.withLock { state -> Int in
                defer { state.nextSequence[fp, default: 1] += 1 }
                return state.nextSequence[fp, default: 1]
            }
            let body = "\(options.name) \(options.incarnation) \(sequence)"
            let result = await session.send(Array(body.utf8), to: [peer])[peer]
            switch result {
            case .enqueued(let number):
                let lostAlready = state.withLock { state -> Bool in
                    if state.unresolved[fp]?.remove(number) != nil { return true }
                    state.outstanding[fp, default: []].append((number, sequence))
                    // Bounded: a message this old was acknowledged long ago (the session's replay buffer holds far
                    // fewer); a loss report naming it would show as unresolved.
                    if state.outstanding[fp]!.count > Self.outstandingLimit { state.outstanding[fp]!.removeFirst() }
                    return false
                }
                sent.sequences!.append(sequence)
                sent.numbers!.append(number)
                if lostAlready {
                    var lost = ChaosEvent(kind: ChaosEvent.Kind.undelivered, peer: peer.displayName)
                    lost.sequences = [sequence]
                    lost.reason = "reported before send returned"
                    Self.emit(sent)
                    Self.emit(lost)
                    sent.sequences = []
                    sent.numbers = []
                }
            case .failed(let error):
                failed.sequences!.append(sequence)
                failed.reason = error.reason
            case nil:
                failed.sequences!.append(sequence)
                failed.reason = "no result"
            }
        }
        if !sent.sequences!.isEmpty { Self.emit(sent) }
        if !failed.sequences!.isEmpty { Self.emit(failed) }
    }

    /// Reads messages, one line each as the application takes it (a line written before a kill still reaches the
    /// driver), unless stalled.
    private func read() async {
        var iterator = session.messages.makeAsyncIterator()
        while true {
            if let until = state.withLock({ $0.stalledUntil }) {
                if until > .now { try? await Task.sleep(until: until) }
                state.withLock { $0.stalledUntil = nil }
                var event = ChaosEvent(kind: ChaosEvent.Kind.reader)
                event.state = "reading"
                Self.emit(event)
            }
            guard let message = await iterator.next() else { break }
            let parts = String(decoding: message.bytes, as: UTF8.self).split(separator: " ")
            guard parts.count == 3, let incarnation = Int(parts[1]), let sequence = Int(parts[2]) else {
                error("a message that is not ours: \(String(decoding: message.bytes, as: UTF8.self))")
                continue
            }
            var event = ChaosEvent(kind: ChaosEvent.Kind.received, peer: String(parts[0]))
            event.incarnation = incarnation
            event.sequences = [sequence]
            Self.emit(event)
        }
    }

    // MARK: Session events

    private func sessionEvent(_ event: SessionEvent) {
        switch event {
        case .peerChanged(let peer, let peerState, let reason):
            state.withLock { state in
                if peerState == .connected {
                    state.connected[peer.displayName] = peer
                } else if state.connected[peer.displayName] == peer {
                    state.connected[peer.displayName] = nil
                }
            }
            var line = ChaosEvent(kind: ChaosEvent.Kind.state, peer: peer.displayName)
            line.state = peerState.description
            line.code = "\(reason.code)"
            line.reason = reason.description
            Self.emit(line)
        case .undelivered(let peer, let numbers, let reason):
            let fp = peer.claimedFingerprint
            let sequences = state.withLock { state -> [Int] in
                let (found, missing) = Self.resolve(numbers, in: &state.outstanding[fp, default: []])
                state.unresolved[fp, default: []].formUnion(missing)
                return found
            }
            var line = ChaosEvent(kind: ChaosEvent.Kind.undelivered, peer: peer.displayName)
            line.sequences = sequences
            line.numbers = numbers
            line.code = "\(reason.code)"
            line.reason = reason.description
            Self.emit(line)
        case .stream(let stream, _):
            stream.reset()
        case .resourceStarted(let resource):
            var line = ChaosEvent(kind: ChaosEvent.Kind.fileStarted, peer: resource.peer.displayName)
            line.name = resource.name
            line.size = resource.size
            Self.emit(line)
        case .resourceFinished(let resource, let result):
            var line = ChaosEvent(kind: ChaosEvent.Kind.fileReceived, peer: resource.peer.displayName)
            line.name = resource.name
            line.sha256 = resource.sha256
            switch result {
            case .success(let url):
                line.state = "received"
                line.path = url.path
            case .failure(let error):
                line.state = "failed"
                line.reason = error.reason
            }
            Self.emit(line)
        }
    }

    /// Maps the numbers of an `undelivered` report back to the messages `send` numbered. A conversation's numbers
    /// rise one by one and start again at 1 with a new one (the peer restarted), so `outstanding` is a run of
    /// segments; what a report names is the tail of the segment that just ended: the newest segment whose last
    /// number is the highest reported. That segment goes (what came before the tail was delivered), with every
    /// older one.
    static func resolve(_ numbers: [UInt64], in outstanding: inout Deque<(number: UInt64, sequence: Int)>) -> (
        [Int], [UInt64]
    ) {
        guard let highest = numbers.max() else { return ([], []) }
        var end = outstanding.count
        while end > 0 {
            var start = end - 1
            while start > 0, outstanding[start - 1].number < outstanding[start].number { start -= 1 }
            if outstanding[end - 1].number == highest {
                let segment = outstanding[start..<end]
                let wanted = Set(numbers)
                let found = segment.filter { wanted.contains($0.number) }.map(\.sequence)
                let seen = Set(segment.map(\.number))
                outstanding.removeFirst(end)
                return (found, numbers.filter { !seen.contains($0) })
            }
            end = start
        }
        return ([], numbers)
    }

    // MARK: Files

    private func sendFile(size: Int, to peer: Peer) {
        let number = state.withLock { state -> Int in
            state.files += 1
            return state.files
        }
        let name = "\(options.name)-\(options.incarnation)-\(number).bin"
        let outbox = options.directory + "/outbox"
        try? FileManager.default.createDirectory(atPath: outbox, withIntermediateDirectories: true)
        let path = outbox + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(SecureRandom.bytes(size)))
        let session = session
        Task {
            var event = ChaosEvent(kind: ChaosEvent.Kind.fileSent, peer: peer.displayName)
            event.name = name
            event.size = Int64(size)
            do throws(SessionError) {
                let transfer = try await session.sendResource(
                    at: URL(fileURLWithPath: path), named: name, to: peer)
                let receipt = try await transfer.finished()
                event.state = "sent"
                event.sha256 = receipt.sha256
            } catch {
                event.state = "failed"
                event.reason = error.reason
            }
            try? FileManager.default.removeItem(atPath: path)
            Self.emit(event)
        }
    }
}
