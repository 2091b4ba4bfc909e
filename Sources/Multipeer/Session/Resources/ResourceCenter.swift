internal import Foundation
internal import Glibc
internal import Logging
internal import MultipeerIO
internal import Synchronization

#if canImport(FoundationNetworking)
    internal import FoundationNetworking
#endif

/// A session's resource transfers, both ways: files streamed from disk and to disk in pieces (memory stays
/// bounded whatever the size), verified by SHA-256, resumed after a reconnection from what the receiver holds,
/// and cancelled or failed with a reason on both sides.
///
/// The data travels in a stream named `mp.resource/<id>`; the control messages `resourceOffer`,
/// `resourceProgress`, `resourceResult` and `resourceCancel` say what, how far and how it ended
/// (`docs/PROTOCOL.md` section 4.6).
final class ResourceCenter: Sendable {
    /// The prefix of the streams that carry resources.
    static let streamPrefix = "mp.resource/"
    /// The piece size read from disk and written to the stream.
    static let chunkSize = 256 * 1024
    /// The piece size the receiver writes and hashes at a time.
    static let stagingSize = 1 << 20
    /// How often the receiver confirms what it wrote.
    static let progressInterval: UInt64 = 1 << 20
    /// The most transfers from one peer at a time, and in all.
    static let maximumIncomingPerPeer = 8
    static let maximumIncoming = 64

    /// What the center needs of its session.
    struct Hooks: Sendable {
        /// Sends a control message on the peer's current link; false if it has none.
        var control: @Sendable (PeerFingerprint, SessionWire.Message) async -> Bool
        /// Opens a stream to the peer on its current link.
        var openStream: @Sendable (PeerFingerprint, String) async throws(SessionError) -> PeerStream
        /// Reports an event.
        var emit: @Sendable (SessionEvent) -> Void
    }

    private struct Outgoing {
        let transfer: ResourceTransfer
        let path: String
        let size: UInt64
        let sha256: [UInt8]
        /// A downloaded copy of an http(s) resource, removed when the transfer ends.
        let temporary: Bool
        var sender: Task<Void, Never>?
        /// Cancelled: no more data, no resumption; it ends once the receiver has been told.
        var isCancelling = false
    }

    private final class Incoming: Sendable {
        let resource: IncomingResource
        let id: [UInt8]
        let fingerprint: PeerFingerprint
        let partialPath: String
        let sha256: [UInt8]
        let size: UInt64
        let fd: Int32
        let hasher = SHA256Hasher()
        let written = Atomic<UInt64>(0)
        let reader = Lock<Task<Void, Never>?>(nil)
        /// The stream being read, so stopping the reader can unblock it.
        let stream = Lock<PeerStream?>(nil)

        init(
            resource: IncomingResource, id: [UInt8], fingerprint: PeerFingerprint, partialPath: String, sha256: [UInt8],
            size: UInt64, fd: Int32
        ) {
            self.resource = resource
            self.id = id
            self.fingerprint = fingerprint
            self.partialPath = partialPath
            self.sha256 = sha256
            self.size = size
            self.fd = fd
        }
    }

    private struct State {
        /// The offsets transfers were resumed from (tests check a cut transfer did not start over).
        var resumedFrom: [UInt64] = []
        var outgoing: [[UInt8]: Outgoing] = [:]
        var incoming: [[UInt8]: Incoming] = [:]
        var hooks: Hooks?
        /// Control messages for a peer without a link right now, sent when its next link is ready (bounded).
        var queued: [PeerFingerprint: [SessionWire.Message]] = [:]
        /// What each peer says about the transfers it sends (offers, cancellations, its departure) takes effect one
        /// after another, in arrival order.
        var offerChains: [PeerFingerprint: OfferChain] = [:]
        var isShutDown = false
    }

    /// A peer's chain: the last task (each waits for the one before), numbered so the chain knows how many wait
    /// and removes itself once the last is done.
    private struct OfferChain {
        var last: Int
        var done: Int
        var task: Task<Void, Never>
        var waiting: Int { last &- done }
    }

    /// The most offers and cancellations of one peer waiting in its chain: a peer cannot make this side hold a task
    /// per message it sends while one of its offers is slow (a resumption waiting for a write on a slow disk).
    static let maximumWaitingPerPeer = 64

    let directory: String
    let maximumSize: Int64
    private let state = Lock(State())

    /// The session's logger, for resources.
    let logger: Logger

    init(directory: String, maximumSize: Int64, logger: Logger) {
        self.directory = directory
        self.maximumSize = maximumSize
        self.logger = logger
        Self.sweepPartialFiles(in: directory, logger: logger)
    }

    func attach(_ hooks: Hooks) { state.withLock { $0.hooks = hooks } }

    /// The offsets outgoing transfers were resumed from.
    var resumedFrom: [UInt64] { state.withLock { $0.resumedFrom } }

    /// Transfers under way, both ways.
    var activeCount: Int { state.withLock { $0.outgoing.count + $0.incoming.count } }

    private var hooks: Hooks? { state.withLock { $0.hooks } }

    /// Sends a control message now, or, while the peer has no link (reconnecting), when its next link is ready:
    /// a cancellation or a verdict must not be lost to an outage.
    private func sendControl(_ fp: PeerFingerprint, _ message: SessionWire.Message) async {
        guard let hooks else { return }
        if await hooks.control(fp, message) { return }
        state.withLock { state in
            guard !state.isShutDown else { return }
            if state.queued[fp, default: []].count < 256 { state.queued[fp, default: []].append(message) }
        }
    }

    // MARK: Sending

    func send(url: URL, name: String, to peer: Peer, progress given: Progress? = nil) async throws(SessionError)
        -> ResourceTransfer
    {
        let fp = peer.claimedFingerprint
        var path = url.path
        var temporary = false
        if let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" {
            path = try await Self.download(url)
            temporary = true
        } else if !url.isFileURL {
            throw SessionError(.invalidParameter, "\(url) is neither a file URL nor an http(s) URL")
        }
        let (size, sha256): (UInt64, [UInt8])
        do {
            (size, sha256) = try await Self.measure(path)
        } catch {
            if temporary { unlink(path) }
            throw error
        }
        let id = SecureRandom.bytes(SessionWire.idLength)
        let progress = given ?? Progress(totalUnitCount: Int64(size))
        progress.totalUnitCount = Int64(size)
        let transfer = ResourceTransfer(id: id, name: name, peer: peer, progress: progress)
        state.withLock {
            $0.outgoing[id] = Outgoing(
                transfer: transfer, path: path, size: size, sha256: sha256, temporary: temporary, sender: nil)
        }
        guard let hooks, await hooks.control(fp, .resourceOffer(id: id, name: name, size: size, sha256: sha256)) else {
            let error = SessionError(.notConnected, "\(peer.displayName) is not connected to this session")
            finishOutgoing(id, .failure(error))
            throw error
        }
        // Only once the offer is on the link, so a cancellation can never reach the peer before its offer; a
        // progress the caller gave may have been cancelled before that (cancelling twice does nothing more).
        progress.cancellationHandler = { [weak self] in
            self?.cancelOutgoing(id, reason: "cancelled by the sender")
        }
        if progress.isCancelled { cancelOutgoing(id, reason: "cancelled by the sender") }
        return transfer
    }

    /// Fetches an http(s) resource into a temporary file (FoundationNetworking).
    private static func download(_ url: URL) async throws(SessionError) -> String {
        do {
            let (file, response) = try await URLSession.shared.download(from: url)
            if let http = response as? HTTPURLResponse, !(200..<300).contains(http.statusCode) {
                try? FileManager.default.removeItem(at: file)
                throw SessionError(.unavailable, "fetching \(url) answered HTTP \(http.statusCode)")
            }
            let kept = FileManager.default.temporaryDirectory.appendingPathComponent("mp-download-\(UUID().uuidString)")
            try FileManager.default.moveItem(at: file, to: kept)
            return kept.path
        } catch let error as SessionError {
            throw error
        } catch {
            throw SessionError(.unavailable, "cannot fetch \(url): \(error.localizedDescription)")
        }
    }

    /// The size and SHA-256 of a file, read in pieces off the cooperative pool.
    private static func measure(_ path: String) async throws(SessionError) -> (UInt64, [UInt8]) {
        let result: Result<(UInt64, [UInt8]), SessionError> = await Task.detached {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                return .failure(
                    SessionError(.invalidParameter, "cannot read \(path): \(String(cString: strerror(errno)))"))
            }
            defer { close(fd) }
            var status = stat()
            guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
                return .failure(SessionError(.invalidParameter, "\(path) is not a regular file"))
            }
            let hasher = SHA256Hasher()
            var buffer = [UInt8](repeating: 0, count: chunkSize)
            var total: UInt64 = 0
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    return .failure(
                        SessionError(.unavailable, "cannot read \(path): \(String(cString: strerror(errno)))"))
                }
                if count == 0 { break }
                hasher.update(buffer[0..<count])
                total += UInt64(count)
            }
            return .success((total, hasher.finish()))
        }.value
        return try result.get()
    }

    /// The receiver said how much it holds: (re)start streaming from there.
    private func resumeSending(_ id: [UInt8], from have: UInt64) {
        guard let hooks else { return }
        let started = state.withLock { state -> (Outgoing)? in
            guard let outgoing = state.outgoing[id], !outgoing.isCancelling else { return nil }
            outgoing.sender?.cancel()
            return outgoing
        }
        guard let outgoing = started else { return }
        if have > 0 { state.withLock { $0.resumedFrom.append(have) } }
        outgoing.transfer.progress.completedUnitCount = Int64(min(have, outgoing.size))
        let fp = outgoing.transfer.peer.claimedFingerprint
        let task = Task { [weak self] in
            guard have <= outgoing.size else {
                self?.cancelOutgoing(id, reason: "the receiver claims more bytes than the resource has")
                return
            }
            let stream: PeerStream
            do {
                stream = try await hooks.openStream(fp, Self.streamPrefix + id.hexString + "/" + String(have))
            } catch {
                return  // The link is gone; the next one re-offers the resource.
            }
            let fd = open(outgoing.path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                stream.reset()
                self?.cancelOutgoing(id, reason: "the sender cannot read the file: \(String(cString: strerror(errno)))")
                return
            }
            defer { close(fd) }
            var offset = have
            var buffer = [UInt8](repeating: 0, count: Self.chunkSize)
            while offset < outgoing.size, !Task.isCancelled {
                let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(offset)) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else {
                    stream.reset()
                    self?.cancelOutgoing(id, reason: "the sender's file changed or cannot be read")
                    return
                }
                do {
                    try await stream.write(Array(buffer[0..<count]))
                } catch {
                    return  // The link dropped: wait for the next one.
                }
                offset += UInt64(count)
            }
            if Task.isCancelled {
                stream.reset()
                return
            }
            try? await stream.finish()
        }
        // Kept only if the transfer is still wanted: one cancelled (or ended) since the check above must not
        // leave this task streaming.
        let kept = state.withLock { state -> Bool in
            guard let outgoing = state.outgoing[id], !outgoing.isCancelling else { return false }
            state.outgoing[id]?.sender = task
            return true
        }
        if !kept { task.cancel() }
    }

    private func cancelOutgoing(_ id: [UInt8], reason: String) {
        let cancelled = state.withLock { state -> Outgoing? in
            guard var outgoing = state.outgoing[id], !outgoing.isCancelling else { return nil }
            outgoing.isCancelling = true
            state.outgoing[id] = outgoing
            return outgoing
        }
        guard let outgoing = cancelled else { return }
        outgoing.sender?.cancel()
        let fp = outgoing.transfer.peer.claimedFingerprint
        // The transfer ends once the cancellation is on the peer's link (or queued for its next one): a caller that
        // disconnects as soon as it ends (a command-line tool on Ctrl-C) must not cut the message off, leaving the
        // receiver to report the peer gone instead of the transfer cancelled.
        Task {
            // Not if the transfer ended meanwhile (the peer gone, the session shut down): nothing to tell then.
            if state.withLock({ $0.outgoing[id] != nil }) {
                await sendControl(fp, .resourceCancel(id: id, reason: reason))
            }
            finishOutgoing(id, .failure(SessionError(.cancelled, reason)))
        }
    }

    private func finishOutgoing(_ id: [UInt8], _ result: Result<ResourceReceipt, SessionError>) {
        guard let outgoing = state.withLock({ $0.outgoing.removeValue(forKey: id) }) else { return }
        outgoing.sender?.cancel()
        if outgoing.temporary { unlink(outgoing.path) }
        if case .success = result { outgoing.transfer.progress.completedUnitCount = Int64(outgoing.size) }
        let peerName = outgoing.transfer.peer.displayName
        switch result {
        case .success(let receipt):
            logger.info(
                "sent '\(outgoing.transfer.name)' to '\(peerName)': \(receipt.size) bytes, sha256 \(receipt.sha256)",
                metadata: outgoing.transfer.peer.logMetadata)
        case .failure(let error):
            logger.warning(
                "sending '\(outgoing.transfer.name)' to '\(peerName)' failed: \(error.reason)",
                metadata: outgoing.transfer.peer.logMetadata)
        }
        outgoing.transfer.complete(result)
    }

    // MARK: Receiving

    private func offer(_ id: [UInt8], name: String, size: UInt64, sha256: [UInt8], from peer: Peer) async {
        guard let hooks else { return }
        let fp = peer.claimedFingerprint
        if let existing = state.withLock({ $0.incoming[id] }) {
            guard existing.fingerprint == fp else { return }
            // A resumption: stop the old stream's reader, then say how far we are.
            await Self.stopReader(existing)
            await sendControl(fp, .resourceResume(id: id, have: existing.written.load(ordering: .relaxed)))
            return
        }
        func refuse(_ reason: String) async {
            await sendControl(fp, .resourceResult(id: id, ok: false, reason: reason))
        }
        guard Int64(clamping: size) <= maximumSize else {
            return await refuse("the resource is \(size) bytes; this peer accepts at most \(maximumSize)")
        }
        let counts = state.withLock { state in
            (state.incoming.count, state.incoming.values.filter { $0.fingerprint == fp }.count)
        }
        guard counts.0 < Self.maximumIncoming, counts.1 < Self.maximumIncomingPerPeer else {
            return await refuse("too many transfers are under way here; try again later")
        }
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            return await refuse("the receiver cannot create its resource folder: \(error.localizedDescription)")
        }
        if let problem = Self.folderProblem(directory) {
            return await refuse("the receiver's resource folder is unsafe: \(problem)")
        }
        Self.sweepPartialFiles(in: directory, logger: logger)
        let partial = directory + Self.partialPrefix + id.hexString
        let fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            return await refuse("the receiver cannot create a file: \(String(cString: strerror(errno)))")
        }
        // Held while the transfer runs (and released by the kernel if this process dies): how a sweep tells a
        // partial file of a live transfer from one a dead process left.
        _ = flock(fd, LOCK_EX | LOCK_NB)
        let progress = Progress(totalUnitCount: Int64(clamping: size))
        let resource = IncomingResource(
            name: name, peer: peer, size: Int64(clamping: size), progress: progress, sha256: sha256.hexString)
        let incoming = Incoming(
            resource: resource, id: id, fingerprint: fp, partialPath: partial, sha256: sha256, size: size, fd: fd)
        let shutDown = state.withLock { state -> Bool in
            if state.isShutDown { return true }
            state.incoming[id] = incoming
            return false
        }
        if shutDown {
            close(fd)
            unlink(partial)
            return
        }
        progress.cancellationHandler = { [weak self] in
            self?.failIncoming(id, "cancelled by the receiver", tellSender: true)
        }
        logger.info("receiving '\(name)' (\(size) bytes) from '\(peer.displayName)'", metadata: peer.logMetadata)
        hooks.emit(.resourceStarted(resource))
        await sendControl(fp, .resourceResume(id: id, have: 0))
    }

    /// The name of a file being received, before the id.
    static let partialPrefix = "/.mp-partial-"

    /// Removes the partial files of transfers whose process died (killed, crashed) in `directory`: those no process
    /// holds locked and that were not written to for a second (the lock follows the file's creation at once).
    /// Returns how many went.
    @discardableResult
    static func sweepPartialFiles(in directory: String, logger: Logger? = nil) -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var removed = 0
        let now = time(nil)
        for name in names where name.hasPrefix(String(partialPrefix.dropFirst())) {
            let path = directory + "/" + name
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var status = stat()
            guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == getuid(),
                now - status.st_mtim.tv_sec >= 1, flock(fd, LOCK_EX | LOCK_NB) == 0
            else { continue }
            if unlink(path) == 0 { removed += 1 }
        }
        if removed > 0 {
            logger?.notice("removed \(removed) partial files of transfers whose process ended, in \(directory)")
        }
        return removed
    }

    /// Why a resource folder must not be written into, or nil: it must be a directory (not a link to one) of
    /// this user, and the default one, whose name in the shared temporary directory anyone can predict, must be
    /// private (0700), so another local user cannot plant a link or a folder of theirs where files are saved.
    static func folderProblem(_ directory: String) -> String? {
        var status = stat()
        guard lstat(directory, &status) == 0 else { return "\(directory): \(String(cString: strerror(errno)))" }
        guard status.st_mode & S_IFMT == S_IFDIR else { return "\(directory) is not a directory (a link?)" }
        guard status.st_uid == geteuid() else { return "\(directory) belongs to another user" }
        if directory == SessionConfiguration.defaultResourceDirectory, status.st_mode & 0o077 != 0 {
            return "\(directory) (the default, in the shared temporary directory) is open to other users"
        }
        return nil
    }

    /// Stops whatever reads an incoming transfer's stream (resetting the stream so a blocked read ends) and
    /// waits until its writer has written its last piece.
    private static func stopReader(_ incoming: Incoming) async {
        let stream = incoming.stream.withLock { stream -> PeerStream? in
            defer { stream = nil }
            return stream
        }
        stream?.reset()
        let reader = incoming.reader.withLock { $0 }
        reader?.cancel()
        await reader?.value
    }

    /// A member opened a stream named `mp.resource/<id>/<offset>`: write it to the partial file, once the
    /// previous stream's reader (if any) has stopped, and only if it starts where the file ends; otherwise the
    /// sender is told where to start.
    func incomingStream(_ stream: PeerStream, from peer: Peer) {
        let parts = stream.name.dropFirst(Self.streamPrefix.count).split(separator: "/")
        guard parts.count == 2, let offset = UInt64(parts[1]),
            let incoming = state.withLock({ $0.incoming.values.first { $0.id.hexString == parts[0] } }),
            incoming.fingerprint == peer.claimedFingerprint
        else {
            stream.reset()
            return
        }
        let previous = incoming.reader.withLock { $0 }
        let task = Task { [weak self] () -> Void in
            let old = incoming.stream.withLock { current -> PeerStream? in
                defer { current = stream }
                return current
            }
            old?.reset()
            previous?.cancel()
            await previous?.value
            guard let self else { return }
            let written = incoming.written.load(ordering: .relaxed)
            guard offset == written else {
                stream.reset()
                await self.sendControl(incoming.fingerprint, .resourceResume(id: incoming.id, have: written))
                return
            }
            await self.receive(stream, into: incoming)
        }
        incoming.reader.withLock { $0 = task }
    }

    private func receive(_ stream: PeerStream, into incoming: Incoming) async {
        guard let hooks else { return }
        // Reading the stream and writing/hashing the file overlap: the reader stages 1 MiB pieces and hands them
        // to a writer through a pipe of two, so the network is read while the previous piece is written. The
        // writer gives each written piece back for the reader to fill again, so a transfer holds at most four
        // pieces (one filling, two queued, one writing) beside the stream's window, allocated once.
        let pipe = ChunkPipe(capacity: 2)
        let failure = Lock<String?>(nil)
        let writer = Task {
            var lastConfirmed = incoming.written.load(ordering: .relaxed)
            while var chunk = await pipe.take() {
                let offset = incoming.written.load(ordering: .relaxed)
                if let problem = Self.write(chunk, to: incoming.fd, at: offset) {
                    failure.withLock { $0 = $0 ?? problem }
                    pipe.close()
                    return
                }
                incoming.hasher.update(chunk)
                let written = offset + UInt64(chunk.count)
                pipe.recycle(&chunk)
                incoming.written.store(written, ordering: .relaxed)
                incoming.resource.progress.completedUnitCount = Int64(written)
                if written - lastConfirmed >= Self.progressInterval {
                    lastConfirmed = written
                    _ = await hooks.control(incoming.fingerprint, .resourceProgress(id: incoming.id, have: written))
                }
            }
        }
        var staged = pipe.emptyChunk(reserving: Self.stagingSize)
        var received = incoming.written.load(ordering: .relaxed)
        var ended = false
        var linkFailed = false
        reading: while !Task.isCancelled, failure.withLock({ $0 }) == nil {
            let count: Int?
            do {
                // Borrowed where the bytes lie in the stream's buffer: one copy, into the piece.
                count = try await stream.read(maximumCount: Self.stagingSize - staged.count) { bytes in
                    staged.append(contentsOf: bytes)
                    return bytes.count
                }
            } catch {
                linkFailed = true  // The link dropped (or the sender reset the stream): wait for a resumption.
                break reading
            }
            if let count {
                received += UInt64(count)
                guard received <= incoming.size else {
                    failure.withLock { $0 = $0 ?? "the sender sent more bytes than announced" }
                    break reading
                }
            } else {
                ended = true
            }
            if staged.count >= Self.stagingSize || (ended && !staged.isEmpty) {
                // Handed over, not shared: the writer's recycled piece must be this task's alone to refill.
                guard await pipe.put(consume staged) else { break reading }
                staged = pipe.emptyChunk(reserving: Self.stagingSize)
            }
            if ended { break reading }
        }
        pipe.finish()
        await writer.value
        if let problem = failure.withLock({ $0 }) {
            stream.reset()
            return failIncoming(incoming.id, problem, tellSender: true)
        }
        if linkFailed || !ended { return }
        guard !Task.isCancelled else { return }
        let written = incoming.written.load(ordering: .relaxed)
        guard written == incoming.size else {
            return failIncoming(
                incoming.id, "the stream ended after \(written) of \(incoming.size) bytes", tellSender: true)
        }
        guard incoming.hasher.finish() == incoming.sha256 else {
            return failIncoming(incoming.id, "the SHA-256 of what arrived differs from the sender's", tellSender: true)
        }
        guard fsync(incoming.fd) == 0 || errno == EINVAL else {
            return failIncoming(
                incoming.id, "the receiver cannot save the file: \(String(cString: strerror(errno)))", tellSender: true)
        }
        guard state.withLock({ $0.incoming.removeValue(forKey: incoming.id) }) != nil else { return }
        close(incoming.fd)
        do {
            let path = try ResourceName.place(partial: incoming.partialPath, as: incoming.resource.name, in: directory)
            await sendControl(incoming.fingerprint, .resourceResult(id: incoming.id, ok: true, reason: ""))
            logger.info(
                "received '\(incoming.resource.name)' from '\(incoming.resource.peer.displayName)' as \(path)",
                metadata: incoming.resource.peer.logMetadata)
            hooks.emit(.resourceFinished(incoming.resource, .success(URL(fileURLWithPath: path))))
        } catch {
            logger.warning(
                "'\(incoming.resource.name)' could not be saved: \(error.reason)",
                metadata: incoming.resource.peer.logMetadata)
            unlink(incoming.partialPath)
            await sendControl(incoming.fingerprint, .resourceResult(id: incoming.id, ok: false, reason: error.reason))
            hooks.emit(.resourceFinished(incoming.resource, .failure(error)))
        }
    }

    /// Writes all of `bytes` at `offset`, or says why not (a full disk in so many words).
    private static func write(_ bytes: [UInt8], to fd: Int32, at offset: UInt64) -> String? {
        var done = 0
        while done < bytes.count {
            let count = bytes.withUnsafeBytes {
                pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset) + off_t(done))
            }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == ENOSPC || errno == EDQUOT { return "the receiver's disk is full" }
                return "the receiver cannot write the file: \(String(cString: strerror(errno)))"
            }
            done += count
        }
        return nil
    }

    private func failIncoming(_ id: [UInt8], _ reason: String, tellSender: Bool) {
        guard let incoming = state.withLock({ $0.incoming.removeValue(forKey: id) }) else { return }
        // The file is closed only once its reader and writer are done with it (the descriptor must not be reused
        // under a write still queued), and removed at once.
        unlink(incoming.partialPath)
        Task {
            await Self.stopReader(incoming)
            close(incoming.fd)
        }
        if tellSender {
            Task { await sendControl(incoming.fingerprint, .resourceResult(id: id, ok: false, reason: reason)) }
        }
        logger.warning(
            "receiving '\(incoming.resource.name)' failed: \(reason)", metadata: incoming.resource.peer.logMetadata)
        hooks?.emit(.resourceFinished(incoming.resource, .failure(SessionError(.cancelled, reason))))
    }

    // MARK: Control messages and links

    /// A resource control message from a member.
    func handle(_ message: SessionWire.Message, from peer: Peer) {
        let fp = peer.claimedFingerprint
        switch message {
        case .resourceOffer(let id, let name, let size, let sha256):
            // One after another: two offers of one resource (two links during a reconnection) must not race.
            let queued = afterEarlierOffers(from: fp) {
                await self.offer(id, name: name, size: size, sha256: sha256, from: peer)
            }
            if !queued {
                let reason = "too many offers are waiting here; try again later"
                Task { await sendControl(fp, .resourceResult(id: id, ok: false, reason: reason)) }
            }
        case .resourceProgress(let id, let have):
            guard let outgoing = state.withLock({ $0.outgoing[id] }), outgoing.transfer.peer.claimedFingerprint == fp
            else { return }
            outgoing.transfer.progress.completedUnitCount = Int64(min(have, outgoing.size))
        case .resourceResume(let id, let have):
            guard let outgoing = state.withLock({ $0.outgoing[id] }), outgoing.transfer.peer.claimedFingerprint == fp
            else { return }
            resumeSending(id, from: have)
        case .resourceResult(let id, let ok, let reason):
            guard let outgoing = state.withLock({ $0.outgoing[id] }), outgoing.transfer.peer.claimedFingerprint == fp
            else { return }
            finishOutgoing(
                id,
                ok
                    ? .success(ResourceReceipt(size: Int64(outgoing.size), sha256: outgoing.sha256.hexString))
                    : .failure(SessionError(.cancelled, "\(peer.displayName): \(reason)")))
        case .resourceCancel(let id, let reason):
            if let outgoing = state.withLock({ $0.outgoing[id] }), outgoing.transfer.peer.claimedFingerprint == fp {
                finishOutgoing(id, .failure(SessionError(.cancelled, "\(peer.displayName) cancelled: \(reason)")))
                return
            }
            // After the offers that came before it: a sender cancelling at once must not overtake the handling of
            // its offer (which creates the transfer), or the cancellation finds nothing and the file waits for data
            // that never comes.
            // Beyond the chain's bound the peer is flooding: the cancellation is dropped.
            afterEarlierOffers(from: fp) {
                guard let incoming = self.state.withLock({ $0.incoming[id] }), incoming.fingerprint == fp else {
                    return
                }
                self.failIncoming(id, "\(peer.displayName) cancelled: \(reason)", tellSender: false)
            }
        default:
            break
        }
    }

    /// A new link to the peer is ready: offer again what is unfinished, so the receiver says where to resume.
    func linkResumed(_ fp: PeerFingerprint) {
        guard let hooks else { return }
        let queued = state.withLock { $0.queued.removeValue(forKey: fp) ?? [] }
        if !queued.isEmpty {
            Task { for message in queued { await sendControl(fp, message) } }
        }
        let offers = state.withLock { state in
            state.outgoing.values.filter { $0.transfer.peer.claimedFingerprint == fp && !$0.isCancelling }.map {
                ($0.transfer.id, $0.transfer.name, $0.size, $0.sha256)
            }
        }
        for (id, name, size, sha256) in offers {
            Task { _ = await hooks.control(fp, .resourceOffer(id: id, name: name, size: size, sha256: sha256)) }
        }
    }

    /// Runs `body` once the peer's offers and cancellations that came before it are handled: what a peer says
    /// about its transfers takes effect in the order it was said (another peer's slow offer does not hold it up).
    /// Returns false, running nothing, when `bounded` and ``maximumWaitingPerPeer`` already wait.
    @discardableResult
    func afterEarlierOffers(
        from fp: PeerFingerprint, bounded: Bool = true, _ body: @escaping @Sendable () async -> Void
    ) -> Bool {
        state.withLock { state in
            let previous = state.offerChains[fp]
            if bounded, let previous, previous.waiting >= Self.maximumWaitingPerPeer { return false }
            let number = (previous?.last ?? 0) &+ 1
            let task = Task {
                await previous?.task.value
                await body()
                self.state.withLock { state in
                    guard var chain = state.offerChains[fp] else { return }
                    chain.done = number
                    state.offerChains[fp] = chain.waiting == 0 ? nil : chain
                }
            }
            state.offerChains[fp] = OfferChain(last: number, done: previous?.done ?? number &- 1, task: task)
            return true
        }
    }

    /// How many of a peer's offers and cancellations wait in its chain (for tests of the bound).
    func waitingOfferCount(from fp: PeerFingerprint) -> Int {
        state.withLock { $0.offerChains[fp]?.waiting ?? 0 }
    }

    /// The peer is gone for good: its transfers fail both ways with the reason.
    ///
    /// The files it was sending fail after its offers and cancellations still being handled: an offer handled
    /// later would make a transfer from a peer already gone (waiting for ever), and a cancellation it sent before
    /// leaving would lose its reason to this one.
    func peerGone(_ fp: PeerFingerprint, reason: String) {
        let outgoing = state.withLock { state in
            state.queued[fp] = nil
            return state.outgoing.values.filter { $0.transfer.peer.claimedFingerprint == fp }.map(\.transfer.id)
        }
        for id in outgoing { finishOutgoing(id, .failure(SessionError(.notConnected, reason))) }
        failIncoming(from: fp, reason)
    }

    /// The peer came back as a new incarnation (it restarted): the files it was sending us fail (it does not know
    /// them any more), after its offers still being handled; the ones we send it are offered again by
    /// ``linkResumed(_:)``.
    func peerRestarted(_ fp: PeerFingerprint, reason: String) {
        failIncoming(from: fp, reason)
    }

    /// Fails the transfers from a peer once its earlier offers and cancellations are handled.
    private func failIncoming(from fp: PeerFingerprint, _ reason: String) {
        // Never dropped: it is this side's own decision, once per departure or restart.
        afterEarlierOffers(from: fp, bounded: false) {
            let incoming = self.state.withLock { state in
                state.incoming.values.filter { $0.fingerprint == fp }.map(\.id)
            }
            for id in incoming { self.failIncoming(id, reason, tellSender: false) }
        }
    }

    /// The session ends: everything fails.
    func shutdown(reason: String) {
        let (outgoing, incoming) = state.withLock { state in
            state.isShutDown = true
            state.queued = [:]
            return (Array(state.outgoing.keys), Array(state.incoming.keys))
        }
        for id in outgoing { finishOutgoing(id, .failure(SessionError(.cancelled, reason))) }
        for id in incoming { failIncoming(id, reason, tellSender: false) }
    }
}

/// A bounded hand-off of byte chunks from one task to another: `put` waits while `capacity` chunks are queued. The
/// taker gives spent chunks back (``recycle(_:)``) and the putter fills them again (``emptyChunk(reserving:)``), so
/// a steady hand-off allocates nothing.
final class ChunkPipe: Sendable {
    private struct State {
        var chunks: [[UInt8]] = []
        /// Chunks given back, kept for reuse (at most `capacity + 1`, the most that can be out at once).
        var spares: [[UInt8]] = []
        var finished = false
        var closed = false
        var taker: CheckedContinuation<[UInt8]?, Never>?
        var putter: CheckedContinuation<Bool, Never>?
    }

    private let state = Lock(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Queues a chunk, waiting for room; false once the taker closed the pipe.
    func put(_ chunk: [UInt8]) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            enum Step { case give(CheckedContinuation<[UInt8]?, Never>), queued, wait, closed }
            let step = state.withLock { state -> Step in
                if state.closed { return .closed }
                if let taker = state.taker {
                    state.taker = nil
                    return .give(taker)
                }
                state.chunks.append(chunk)
                if state.chunks.count < capacity { return .queued }
                state.putter = continuation
                return .wait
            }
            switch step {
            case .give(let taker):
                taker.resume(returning: chunk)
                continuation.resume(returning: true)
            case .queued: continuation.resume(returning: true)
            case .wait: break
            case .closed: continuation.resume(returning: false)
            }
        }
    }

    /// The next chunk, waiting for one; nil once finished and drained, or closed.
    func take() async -> [UInt8]? {
        await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8]?, Never>) in
            let (ready, putter) = state.withLock { state -> ([UInt8]??, CheckedContinuation<Bool, Never>?) in
                if state.closed { return (.some(nil), nil) }
                if !state.chunks.isEmpty {
                    let chunk = state.chunks.removeFirst()
                    defer { state.putter = nil }
                    return (.some(chunk), state.putter)
                }
                if state.finished { return (.some(nil), nil) }
                state.taker = continuation
                return (nil, nil)
            }
            putter?.resume(returning: true)
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Gives a spent chunk back for the putter to reuse its memory; `chunk` is left empty. The caller's reference
    /// goes under the lock, so the putter never finds a spare still shared (which would make it allocate anew).
    func recycle(_ chunk: inout [UInt8]) {
        state.withLock { state in
            if !state.closed, state.spares.count <= capacity { state.spares.append(chunk) }
            chunk = []
        }
    }

    /// How many given-back chunks are kept.
    var spareCount: Int { state.withLock { $0.spares.count } }

    /// An empty chunk to fill: a recycled one (its memory kept), or a new one with room for `count` bytes.
    func emptyChunk(reserving count: Int) -> [UInt8] {
        if var spare = state.withLock({ $0.spares.popLast() }) {
            spare.removeAll(keepingCapacity: true)
            return spare
        }
        var fresh: [UInt8] = []
        fresh.reserveCapacity(count)
        return fresh
    }

    /// No more chunks will come.
    func finish() {
        let taker = state.withLock { state -> CheckedContinuation<[UInt8]?, Never>? in
            state.finished = true
            defer { state.taker = nil }
            return state.chunks.isEmpty ? state.taker : nil
        }
        taker?.resume(returning: nil)
    }

    /// The taker gives up: waiting and later puts return false.
    func close() {
        let putter = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.closed = true
            state.chunks = []
            state.spares = []
            defer { state.putter = nil }
            return state.putter
        }
        putter?.resume(returning: false)
    }
}
