internal import Glibc

/// A listening TCP socket owned by an `EventLoop`; hands each accepted connection to a closure.
///
/// Create and use it on the loop's thread. The loop keeps the listener alive until `close()` or loop shutdown.
public final class TCPListener: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread; each public method
    // checks `loop.inEventLoop`. The type is Sendable only so it can be handed back from `EventLoop.submit`.

    /// Connections accepted per readiness event before yielding to the rest of the loop; the listener stays
    /// readable, so the rest of the kernel's backlog is accepted on the next iteration.
    static let maximumAcceptsPerWakeup = 64

    /// How long accepting pauses after running out of descriptors (`EMFILE`/`ENFILE`), instead of spinning on a
    /// listener that stays readable.
    static let descriptorExhaustionBackoff = Duration.milliseconds(100)

    private let loop: EventLoop
    private var fd: Int32
    private var token: UInt64 = 0
    private var interest: UInt32?
    private var handler: ((TCPConnection) -> Void)?
    private var backoffTimer: TimerID?

    /// Creates a listener: `SO_REUSEADDR` (and `IPV6_V6ONLY` for IPv6), bind, listen. Loop thread only.
    /// - Parameters:
    ///   - loop: The owning loop.
    ///   - address: The local address; port 0 picks a free port (see `localAddress()`).
    ///   - backlog: The kernel's queue of connections not yet accepted.
    /// - Throws: `SystemCallError` from `socket`, `setsockopt`, `bind` or `listen`.
    public init(loop: EventLoop, address: SocketAddress, backlog: Int32 = 128) throws(SystemCallError) {
        precondition(loop.inEventLoop, "TCPListener must be created on its loop's thread")
        self.loop = loop
        let fd = try makeSocket(family: address.family, type: Int32(SOCK_STREAM.rawValue))
        do {
            try setSocketOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
            if address.family == .ipv6 { try setSocketOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1) }
            _ = try retryingSystemCall("bind") { address.withSockaddr { Glibc.bind(fd, $0, $1) } }
            _ = try retryingSystemCall("listen") { Glibc.listen(fd, backlog) }
        } catch {
            Glibc.close(fd)
            throw error
        }
        self.fd = fd
        token = loop.register(self)
    }

    /// The address the listener is bound to.
    /// - Returns: The local address and port.
    /// - Throws: `SystemCallError` from `getsockname`.
    public func localAddress() throws(SystemCallError) -> SocketAddress {
        precondition(loop.inEventLoop, "TCPListener used off its loop's thread")
        if fd < 0 { throw SystemCallError(call: "getsockname", errno: EBADF) }
        return try SocketAddress.query(fd, "getsockname", getsockname)
    }

    /// Sets the closure that receives accepted connections, and starts accepting.
    /// - Parameter handler: Called on the loop thread with each new connection.
    public func setAcceptHandler(_ handler: @escaping (TCPConnection) -> Void) {
        precondition(loop.inEventLoop, "TCPListener used off its loop's thread")
        guard fd >= 0 else { return }
        self.handler = handler
        setInterest(LinuxConstants.epollIn)
    }

    /// Stops listening and closes the socket; accepted connections stay open. Idempotent.
    public func close() {
        precondition(loop.inEventLoop, "TCPListener used off its loop's thread")
        guard fd >= 0 else { return }
        setInterest(nil)
        loop.deregister(token)
        if let backoffTimer { loop.cancelTimer(backoffTimer) }
        closeForLoopShutdown()
    }

    private func setInterest(_ new: UInt32?) {
        if (try? loop.updateInterest(fd: fd, token: token, from: interest, to: new)) != nil { interest = new }
    }

    private func acceptAvailable() {
        for _ in 0..<Self.maximumAcceptsPerWakeup {
            guard fd >= 0, let handler else { return }
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let flags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            let accepted = withUnsafeMutablePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    LinuxCalls.shared.accept4(fd, $0, &length, flags)
                }
            }
            if accepted < 0 {
                let code = Glibc.errno
                switch code {
                case EINTR, ECONNABORTED, EPROTO, EPERM:
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    setInterest(nil)
                    backoffTimer = loop.scheduleTimer(after: Self.descriptorExhaustionBackoff) { [self] in
                        backoffTimer = nil
                        if fd >= 0 { setInterest(LinuxConstants.epollIn) }
                    }
                    return
                default:
                    return
                }
            }
            guard let remote = SocketAddress(storage: storage) else {
                Glibc.close(accepted)
                continue
            }
            handler(TCPConnection.accepted(fd: accepted, loop: loop, remote: remote))
        }
    }
}

extension TCPListener: EventLoopSelectable {
    func handleEvents(_ events: UInt32) {
        acceptAvailable()
    }

    func closeForLoopShutdown() {
        guard fd >= 0 else { return }
        Glibc.close(fd)
        fd = -1
        handler = nil
    }
}
