import DequeModule
internal import Glibc

/// A non-blocking TCP connection owned by an `EventLoop`, with a send buffer and read backpressure.
///
/// Create it with `connect(to:loop:completion:)` or receive it from a `TCPListener`; use it on the loop's thread.
/// The loop keeps the connection alive until it closes.
///
/// The send buffer has no fixed limit: `write(_:)` always accepts bytes, and callers bound it themselves by
/// watching `bufferedByteCount` and waiting for the writability handler before writing more. This keeps a fixed
/// limit from silently dropping application data; upper layers (TLS, flow-controlled channels) own the bound.
public final class TCPConnection: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread; each public method
    // checks `loop.inEventLoop`. The type is Sendable only so it can be handed back from `EventLoop.submit`.

    /// Bytes requested per `read`: the size of the loop's shared read buffer. A connection owns no read buffer;
    /// it borrows the loop's for each `read` and hands `onData` a copy of exactly the bytes read, so an idle
    /// connection costs no buffer memory.
    static let readChunkSize = EventLoop.readBufferSize

    /// Send-queue capacity (in queued chunks) kept after the queue drains; a larger queue's storage is released,
    /// so a burst of many small writes does not leave an idle connection holding a large empty deque.
    static let retainedSendQueueCapacity = 16

    /// Reads per readiness event before yielding to other sockets and timers (the socket stays readable, so
    /// the rest is read on the next iteration): at most 1 MiB per connection per iteration.
    static let maximumReadsPerWakeup = 16

    private enum State {
        case connecting((Result<TCPConnection, SystemCallError>) -> Void)
        case open
        case closed
    }

    private let loop: EventLoop
    private var fd: Int32
    private var token: UInt64 = 0
    private var interest: UInt32?
    private var state: State
    private var onData: ((UnsafeRawBufferPointer) -> Void)?
    /// Where the owner wants the next bytes, if somewhere of its own (see ``setDirectReads(target:filled:)``).
    private var directTarget: (() -> UnsafeMutableRawBufferPointer?)?
    private var directFilled: ((Int) -> Void)?
    /// Bytes read after a direct target into the loop's buffer, in the same system call: enough for the
    /// next frame's header and a little of what follows, small so that most bulk bytes go direct.
    static let directSpill = 4096
    private var onClose: ((SystemCallError?) -> Void)?
    private var readingPaused = false
    private var peerClosed = false
    private var shutdownWritePending = false
    private var writeShutDown = false
    /// Chunks accepted and not yet handed to the kernel, oldest first; `sendOffset` bytes of the first are sent.
    private var sendQueue: Deque<[UInt8]> = []
    /// Whether `sendQueue` held more than ``retainedSendQueueCapacity`` chunks since it last drained: then its
    /// storage is released when it drains (a `Deque` cannot say how large its storage is).
    private var sendQueueGrewLarge = false
    private var sendOffset = 0
    private var lowWatermark = 0
    private var writabilityHandler: (() -> Void)?
    private var waitingForWritability = false

    private var _remoteAddress: SocketAddress
    private var _localAddress: SocketAddress

    /// The peer's address.
    public var remoteAddress: SocketAddress { _remoteAddress }
    /// The local address of the connection.
    public var localAddress: SocketAddress { _localAddress }

    /// Bytes accepted by `write(_:)` and not yet handed to the kernel.
    public private(set) var bufferedByteCount = 0

    private init(fd: Int32, loop: EventLoop, state: State, remote: SocketAddress, local: SocketAddress) {
        self.fd = fd
        self.loop = loop
        self.state = state
        _remoteAddress = remote
        _localAddress = local
        token = loop.register(self)
    }

    /// Wraps a descriptor returned by `accept`.
    static func accepted(fd: Int32, loop: EventLoop, remote: SocketAddress) -> TCPConnection {
        try? setSocketOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        let local = (try? SocketAddress.query(fd, "getsockname", getsockname)) ?? remote
        return TCPConnection(fd: fd, loop: loop, state: .open, remote: remote, local: local)
    }

    /// Opens a connection without blocking the loop; sets `TCP_NODELAY`. Loop thread only.
    ///
    /// `completion` runs later on the loop thread, never inside this call.
    /// - Parameters:
    ///   - destination: The peer to connect to.
    ///   - loop: The owning loop.
    ///   - completion: Receives the open connection, or a `SystemCallError` (`call == "connect"` with, for example,
    ///     `ECONNREFUSED`).
    public static func connect(
        to destination: SocketAddress, loop: EventLoop,
        completion: @escaping (Result<TCPConnection, SystemCallError>) -> Void
    ) {
        _ = beginConnect(to: destination, loop: loop, completion: completion)
    }

    /// Opens a connection as `connect(to:loop:completion:)` does, and returns it while it connects, so a
    /// caller that gives up can `close()` it at once (the completion is then never called). Loop thread only.
    /// - Parameters:
    ///   - destination: The peer to connect to.
    ///   - loop: The owning loop.
    ///   - completion: Receives the open connection or the error, later, on the loop thread.
    /// - Returns: The connecting connection, or nil when the attempt failed at once (the completion still
    ///   reports why).
    package static func beginConnect(
        to destination: SocketAddress, loop: EventLoop,
        completion: @escaping (Result<TCPConnection, SystemCallError>) -> Void
    ) -> TCPConnection? {
        precondition(loop.inEventLoop, "TCPConnection.connect called off the loop thread")
        let fd: Int32
        do {
            fd = try makeSocket(family: destination.family, type: Int32(SOCK_STREAM.rawValue))
        } catch {
            loop.scheduleTimer(after: .zero) { completion(.failure(error)) }
            return nil
        }
        try? setSocketOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        var result: Int32 = 0
        while true {
            result = destination.withSockaddr { Glibc.connect(fd, $0, $1) } < 0 ? Glibc.errno : 0
            if result != EINTR { break }
        }
        if result != 0 && result != EINPROGRESS {
            Glibc.close(fd)
            let error = SystemCallError(call: "connect", errno: result)
            loop.scheduleTimer(after: .zero) { completion(.failure(error)) }
            return nil
        }
        let connection = TCPConnection(
            fd: fd, loop: loop, state: .connecting(completion), remote: destination, local: destination)
        // Writability signals completion, success or failure, even when connect already succeeded.
        connection.updateInterest()
        return connection
    }

    /// Sets the closures for received data and for the end of the connection, and starts reading.
    /// - Parameters:
    ///   - onData: Called with each chunk of received bytes (at most `readChunkSize`), as a fresh array the
    ///     closure owns.
    ///   - onClose: Called once when the connection ends: `nil` for an orderly end (the peer closed its side and
    ///     our buffered bytes were sent), or the error that broke it (`ECANCELED` with call `shutdown` when the
    ///     loop shuts down). Not called for `close()`.
    public func setHandlers(onData: @escaping ([UInt8]) -> Void, onClose: @escaping (SystemCallError?) -> Void) {
        setHandlers(onBytes: { onData(Array($0)) }, onClose: onClose)
    }

    /// Sets the closures for received data and for the end of the connection, and starts reading, without
    /// copying what was read: `onBytes` sees the loop's shared read buffer.
    /// - Parameters:
    ///   - onBytes: Called with each chunk of received bytes (at most `readChunkSize`). The pointer is valid only
    ///     during the call: copy what must be kept. The closure may write, close, and resume tasks, but must not
    ///     read from another socket of this loop (the buffer is lent to this read).
    ///   - onClose: As for ``setHandlers(onData:onClose:)``.
    public func setHandlers(
        onBytes: @escaping (UnsafeRawBufferPointer) -> Void, onClose: @escaping (SystemCallError?) -> Void
    ) {
        checkLoop()
        guard isOpen else { return }
        self.onData = onBytes
        self.onClose = onClose
        updateInterest()
    }

    /// Lets the owner receive bytes straight into memory of its own: before each read, `target` may return a
    /// buffer for the next bytes of the stream; the read then fills it first (one `readv`, the kernel copying
    /// straight into it), `filled` is called with how many bytes it got (always, 0 included), and anything
    /// read beyond it goes to the `onBytes` handler as usual, after `filled`. Nil from `target`: a normal read.
    /// - Parameters:
    ///   - target: Called on the loop before each read.
    ///   - filled: Called after each read that had a target, before the bytes after it are handed over.
    public func setDirectReads(
        target: @escaping () -> UnsafeMutableRawBufferPointer?, filled: @escaping (Int) -> Void
    ) {
        checkLoop()
        directTarget = target
        directFilled = filled
    }

    /// Queues `bytes` for sending and sends as much as the kernel takes right away.
    ///
    /// Bytes written after `close()`, `shutdownWrite()` or a failure are discarded.
    /// - Parameter bytes: The bytes to send.
    public func write(_ bytes: [UInt8]) {
        checkLoop()
        guard isOpen, !writeShutDown, !shutdownWritePending, !bytes.isEmpty else { return }
        enqueue(bytes)
        if interest.map({ $0 & LinuxConstants.epollOut == 0 }) ?? true {
            // Not waiting for writability: try now, report failures asynchronously so callers never re-enter.
            if let error = flush() {
                writeShutDown = true  // discard further writes until the failure is reported
                loop.scheduleTimer(after: .zero) { [self] in fail(error) }
                return
            }
        }
        if bufferedByteCount >= lowWatermark && writabilityHandler != nil { waitingForWritability = true }
        updateInterest()
    }

    /// Sends as much of `bytes` as the kernel takes right away, straight from the caller's memory, and queues a
    /// copy of the rest; the caller may reuse its buffer when this returns.
    ///
    /// Bytes written after `close()`, `shutdownWrite()` or a failure are discarded.
    /// - Parameter bytes: The bytes to send.
    public func write(_ bytes: UnsafeRawBufferPointer) {
        withUnsafePointer(to: bytes) { write(gathering: UnsafeBufferPointer(start: $0, count: 1)) }
    }

    /// Like ``write(_:)-(UnsafeRawBufferPointer)``, for several buffers sent in order with one system call
    /// (`sendmsg` with an I/O vector): the kernel copies straight from each buffer, and only what it refuses is
    /// copied into the queue. At most 64 buffers.
    /// - Parameter segments: The buffers, in order; empty ones are skipped.
    public func write(gathering segments: UnsafeBufferPointer<UnsafeRawBufferPointer>) {
        checkLoop()
        precondition(segments.count <= 64, "at most 64 segments per gathering write")
        var total = 0
        for segment in segments { total += segment.count }
        guard isOpen, !writeShutDown, !shutdownWritePending, total > 0 else { return }
        var sent = 0
        let tried = bufferedByteCount == 0 && interest.map({ $0 & LinuxConstants.epollOut == 0 }) ?? true
        if tried {
            let failure: Int32? =
                segments.count == 1
                ? sendAll(segments[0], sent: &sent) : sendAll(gathering: segments, total: total, sent: &sent)
            if let code = failure {
                writeShutDown = true  // discard further writes until the failure is reported
                let error = SystemCallError(call: segments.count == 1 ? "send" : "sendmsg", errno: code)
                loop.scheduleTimer(after: .zero) { [self] in fail(error) }
                return
            }
            if sent == total { return }
        }
        // The kernel is full (or bytes already wait): queue a copy of the rest, in one array.
        var rest: [UInt8] = []
        rest.reserveCapacity(total - sent)
        var skip = sent
        for segment in segments {
            if skip >= segment.count {
                skip -= segment.count
                continue
            }
            rest.append(contentsOf: UnsafeRawBufferPointer(rebasing: segment[skip...]))
            skip = 0
        }
        if tried {
            // The kernel just refused more (EAGAIN): wait for writability rather than trying again now.
            enqueue(rest)
            if bufferedByteCount >= lowWatermark && writabilityHandler != nil { waitingForWritability = true }
            updateInterest()
        } else {
            write(rest)
        }
    }

    /// Sends `bytes` until done or the kernel refuses more; `sent` counts what it took.
    /// - Returns: The errno of a failure other than EAGAIN, or nil.
    private func sendAll(_ bytes: UnsafeRawBufferPointer, sent: inout Int) -> Int32? {
        guard let base = bytes.baseAddress else { return nil }
        while sent < bytes.count {
            let result = Glibc.send(fd, base + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            if result >= 0 {
                sent += result
                continue
            }
            let code = Glibc.errno
            if code == EINTR { continue }
            return isWouldBlock(code) ? nil : code
        }
        return nil
    }

    /// Sends `segments` with `sendmsg` until done or the kernel refuses more; `sent` counts what it took.
    /// - Returns: The errno of a failure other than EAGAIN, or nil.
    private func sendAll(gathering segments: UnsafeBufferPointer<UnsafeRawBufferPointer>, total: Int, sent: inout Int)
        -> Int32?
    {
        withUnsafeTemporaryAllocation(of: iovec.self, capacity: segments.count) { vectors -> Int32? in
            var count = 0
            for segment in segments where !segment.isEmpty {
                // sendmsg only reads; iovec's pointer is mutable for readv's sake.
                vectors[count] = iovec(
                    iov_base: UnsafeMutableRawPointer(mutating: segment.baseAddress), iov_len: segment.count)
                count += 1
            }
            var first = 0
            while sent < total {
                var message = msghdr()
                message.msg_iov = vectors.baseAddress! + first
                message.msg_iovlen = count - first
                let result = Glibc.sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                if result >= 0 {
                    sent += result
                    // Drops the vectors sent in full and trims the one sent in part.
                    var left = result
                    while left > 0 && first < count {
                        if left >= vectors[first].iov_len {
                            left -= vectors[first].iov_len
                            first += 1
                        } else {
                            vectors[first].iov_base += left
                            vectors[first].iov_len -= left
                            left = 0
                        }
                    }
                    continue
                }
                let code = Glibc.errno
                if code == EINTR { continue }
                return isWouldBlock(code) ? nil : code
            }
            return nil
        }
    }

    /// Sets the closure called (on the loop thread) when buffered bytes drop below `lowWatermark` after having
    /// been at or above it.
    /// - Parameters:
    ///   - lowWatermark: The threshold in bytes.
    ///   - handler: Called when the send buffer has drained below the threshold.
    public func setWritabilityHandler(lowWatermark: Int, _ handler: @escaping () -> Void) {
        checkLoop()
        self.lowWatermark = lowWatermark
        writabilityHandler = handler
        waitingForWritability = bufferedByteCount >= lowWatermark
    }

    /// Limits how many written bytes the kernel holds unsent (`TCP_NOTSENT_LOWAT`): beyond `bytes`, the socket
    /// stops taking more and the rest waits in this connection's queue, where the owner can still reorder what
    /// it has not written yet. Keeps urgent data from queueing behind megabytes in the kernel.
    /// - Parameter bytes: The most unsent bytes the kernel keeps.
    public func setUnsentLimit(_ bytes: Int) {
        checkLoop()
        guard fd >= 0 else { return }
        try? setSocketOption(fd, Int32(IPPROTO_TCP), Self.tcpNotSentLowWatermark, Int32(clamping: bytes))
    }

    /// `TCP_NOTSENT_LOWAT` from `<netinet/tcp.h>` (Linux 3.12 and later), which Glibc's module does not export.
    static let tcpNotSentLowWatermark: Int32 = 25

    /// Stops reading from the socket, so the kernel's receive window fills and the peer is slowed down.
    public func pauseReading() {
        checkLoop()
        readingPaused = true
        updateInterest()
    }

    /// Resumes reading after `pauseReading()`.
    public func resumeReading() {
        checkLoop()
        readingPaused = false
        updateInterest()
    }

    /// Sends FIN once buffered bytes are sent; reading continues.
    public func shutdownWrite() {
        checkLoop()
        guard isOpen, !writeShutDown else { return }
        if bufferedByteCount == 0 {
            _ = Glibc.shutdown(fd, Int32(SHUT_WR))
            writeShutDown = true
        } else {
            shutdownWritePending = true
        }
    }

    /// Closes the connection at once, discarding buffered bytes. Idempotent; `onClose` is not called.
    public func close() {
        checkLoop()
        guard fd >= 0 else { return }
        let interest = interest
        try? loop.updateInterest(fd: fd, token: token, from: interest, to: nil)
        self.interest = nil
        loop.deregister(token)
        closeDescriptor()
    }

    // MARK: - Private

    private var isOpen: Bool {
        if case .open = state { return true }
        return false
    }

    private func checkLoop() {
        precondition(loop.inEventLoop, "TCPConnection used off its loop's thread")
    }

    private func closeDescriptor() {
        Glibc.close(fd)
        fd = -1
        state = .closed
        onData = nil
        directTarget = nil
        directFilled = nil
        onClose = nil
        writabilityHandler = nil
        sendQueue = []
        sendQueueGrewLarge = false
        sendOffset = 0
        bufferedByteCount = 0
    }

    private func fail(_ error: SystemCallError?) {
        guard fd >= 0 else { return }
        let onClose = onClose
        close()
        onClose?(error)
    }

    private func updateInterest() {
        guard fd >= 0 else { return }
        var wanted: UInt32 = 0
        switch state {
        case .connecting:
            wanted = LinuxConstants.epollOut
        case .open:
            if onData != nil && !readingPaused && !peerClosed { wanted |= LinuxConstants.epollIn }
            if bufferedByteCount > 0 { wanted |= LinuxConstants.epollOut }
        case .closed:
            return
        }
        // Out of the epoll set while idle, so a hang-up cannot spin the loop while reading is paused.
        let new: UInt32? = wanted == 0 ? nil : wanted
        do {
            try loop.updateInterest(fd: fd, token: token, from: interest, to: new)
            interest = new
        } catch {
            loop.scheduleTimer(after: .zero) { [self] in fail(error) }
        }
    }

    /// Adds `bytes` to the send queue (nothing is sent).
    private func enqueue(_ bytes: [UInt8]) {
        sendQueue.append(bytes)
        if sendQueue.count > Self.retainedSendQueueCapacity { sendQueueGrewLarge = true }
        bufferedByteCount += bytes.count
    }

    /// Writes queued bytes until the queue is empty or the kernel pushes back; returns a fatal error if any.
    private func flush() -> SystemCallError? {
        while let chunk = sendQueue.first {
            let sent = chunk.withUnsafeBytes { bytes in
                Glibc.send(fd, bytes.baseAddress! + sendOffset, bytes.count - sendOffset, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 {
                let code = Glibc.errno
                if code == EINTR { continue }
                if isWouldBlock(code) { break }
                return SystemCallError(call: "send", errno: code)
            }
            bufferedByteCount -= sent
            sendOffset += sent
            if sendOffset == chunk.count {
                sendQueue.removeFirst()
                sendOffset = 0
            }
        }
        if sendQueue.isEmpty && sendQueueGrewLarge {
            sendQueue = []
            sendQueueGrewLarge = false
        }
        if bufferedByteCount == 0 && shutdownWritePending {
            shutdownWritePending = false
            writeShutDown = true
            _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        }
        return nil
    }

    private func finishConnect(_ completion: (Result<TCPConnection, SystemCallError>) -> Void) {
        let code = pendingSocketError(fd)
        if code != 0 {
            close()
            completion(.failure(SystemCallError(call: "connect", errno: code)))
            return
        }
        state = .open
        if let local = try? SocketAddress.query(fd, "getsockname", getsockname) { _localAddress = local }
        if let remote = try? SocketAddress.query(fd, "getpeername", getpeername) { _remoteAddress = remote }
        updateInterest()
        completion(.success(self))
    }

    private func readAvailable() {
        for _ in 0..<Self.maximumReadsPerWakeup {
            guard fd >= 0, !readingPaused, !peerClosed, let onData else { return }
            // The handler sees the bytes in the loop's shared buffer, during the loan.
            var usedTarget = false
            let (count, code, full) = loop.withReadBuffer { buffer -> (Int, Int32, Int) in
                if let target = directTarget?(), let directFilled {
                    usedTarget = true
                    return readDirect(into: target, spill: buffer, directFilled, onData)
                }
                let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
                guard count > 0 else { return (count, count < 0 ? Glibc.errno : 0, buffer.count) }
                onData(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                return (count, 0, buffer.count)
            }
            // A read that did not fill the buffer took everything the kernel had (very likely): skip the read
            // that would only say EAGAIN. If more arrived meanwhile, level-triggered epoll reports it again.
            if count > 0 {
                if count < full { return }
                continue
            }
            if count == 0 {
                peerClosed = true
                if bufferedByteCount == 0 {
                    fail(nil)
                } else {
                    updateInterest()
                }
                return
            }
            if code == EINTR { continue }
            if !isWouldBlock(code) { fail(SystemCallError(call: usedTarget ? "readv" : "read", errno: code)) }
            return
        }
    }

    /// One `readv` into `target`, then at most ``directSpill`` bytes of `spill`.
    /// - Returns: What `read` would: the count (or -1 and the errno), and how many bytes were asked for.
    private func readDirect(
        into target: UnsafeMutableRawBufferPointer, spill: UnsafeMutableRawBufferPointer, _ filled: (Int) -> Void,
        _ onData: (UnsafeRawBufferPointer) -> Void
    ) -> (Int, Int32, Int) {
        let spillCount = min(spill.count, Self.directSpill)
        var vectors = (
            iovec(iov_base: target.baseAddress, iov_len: target.count),
            iovec(iov_base: spill.baseAddress, iov_len: spillCount)
        )
        let count = withUnsafeMutableBytes(of: &vectors) { raw in
            Glibc.readv(fd, raw.baseAddress!.assumingMemoryBound(to: iovec.self), 2)
        }
        let code = count < 0 ? Glibc.errno : 0
        filled(max(0, min(count, target.count)))
        if count > target.count { onData(UnsafeRawBufferPointer(rebasing: spill[0..<count - target.count])) }
        return (count, code, target.count + spillCount)
    }
}

extension TCPConnection: EventLoopSelectable {
    func handleEvents(_ events: UInt32) {
        if case .connecting(let completion) = state {
            finishConnect(completion)
            return
        }
        guard isOpen else { return }
        let broken = events & (LinuxConstants.epollErr | LinuxConstants.epollHup) != 0
        if events & LinuxConstants.epollIn != 0 || broken, interest.map({ $0 & LinuxConstants.epollIn != 0 }) == true {
            readAvailable()
        }
        if fd >= 0, events & LinuxConstants.epollOut != 0 || broken, bufferedByteCount > 0 {
            if let error = flush() {
                fail(error)
                return
            }
            if waitingForWritability, bufferedByteCount < lowWatermark, let handler = writabilityHandler {
                waitingForWritability = false
                handler()
            }
            if fd >= 0, peerClosed, bufferedByteCount == 0 {
                fail(nil)
                return
            }
        }
        if fd >= 0, events & LinuxConstants.epollErr != 0 {
            let code = pendingSocketError(fd)
            if code != 0 { fail(SystemCallError(call: "socket", errno: code)) }
        }
        if fd >= 0 { updateInterest() }
    }

    func closeForLoopShutdown() {
        guard fd >= 0 else { return }
        let onClose = onClose
        var pendingConnect: ((Result<TCPConnection, SystemCallError>) -> Void)?
        if case .connecting(let completion) = state { pendingConnect = completion }
        closeDescriptor()
        // Owners waiting for this connection (or for it to connect) must learn that it is gone.
        let error = SystemCallError(call: "shutdown", errno: ECANCELED)
        onClose?(error)
        pendingConnect?(.failure(error))
    }
}
