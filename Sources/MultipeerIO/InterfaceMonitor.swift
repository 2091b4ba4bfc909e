internal import Glibc

/// Watches the network interfaces of the loop thread's network namespace and reports changes.
///
/// An rtnetlink socket (link and IPv4/IPv6 address groups) in the loop triggers a re-enumeration shortly after
/// any change; a periodic poll is the fallback when notifications are lost. Create and use it on the loop thread.
public final class InterfaceMonitor: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread; each public method
    // checks `loop.inEventLoop`. The type is Sendable only so it can be handed back from `EventLoop.submit`.

    /// Wait after a netlink message before re-enumerating, so a burst (an interface coming up sends link and
    /// several address messages) costs one `getifaddrs` and produces one report.
    static let debounceDelay = Duration.milliseconds(20)

    /// Netlink receive buffer: the kernel's messages for one event fit easily; content is not parsed, only
    /// drained, because every message just means "look again".
    static let receiveBufferSize = 16_384

    private let loop: EventLoop
    private let pollInterval: Duration
    private var fd: Int32
    private var token: UInt64 = 0
    private var interest: UInt32?
    private var handler: ((InterfaceChanges) -> Void)?
    private var debounceTimer: TimerID?
    private var pollTimer: TimerID?
    private var receiveBuffer = [UInt8](repeating: 0, count: InterfaceMonitor.receiveBufferSize)

    /// The interfaces as of the last enumeration (empty before `start`).
    public private(set) var interfaces: [NetworkInterface] = []

    /// Opens the rtnetlink socket. Loop thread only.
    /// - Parameters:
    ///   - loop: The owning loop; its thread's network namespace is the one watched.
    ///   - pollInterval: How often to re-enumerate even without notifications.
    /// - Throws: `SystemCallError` from `socket` or `bind`.
    public init(loop: EventLoop, pollInterval: Duration = .seconds(5)) throws(SystemCallError) {
        precondition(loop.inEventLoop, "InterfaceMonitor must be created on its loop's thread")
        self.loop = loop
        self.pollInterval = pollInterval
        let fd = try retryingSystemCall("socket") {
            socket(
                AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                LinuxConstants.netlinkRoute)
        }
        // struct sockaddr_nl { sa_family_t nl_family; unsigned short nl_pad; __u32 nl_pid; __u32 nl_groups; }
        var address = [UInt8](repeating: 0, count: 12)
        let groups =
            LinuxConstants.routeGroupLink | LinuxConstants.routeGroupIPv4Address
            | LinuxConstants.routeGroupIPv6Address
        address.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt16(AF_NETLINK), toByteOffset: 0, as: UInt16.self)
            raw.storeBytes(of: groups, toByteOffset: 8, as: UInt32.self)
        }
        do {
            _ = try retryingSystemCall("bind") {
                address.withUnsafeBytes { raw in
                    Glibc.bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
                }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
        self.fd = fd
        token = loop.register(self)
    }

    /// Starts watching: reports every current interface as added, then each later difference.
    /// - Parameter handler: Called on the loop thread with each non-empty change set.
    public func start(_ handler: @escaping (InterfaceChanges) -> Void) {
        precondition(loop.inEventLoop, "InterfaceMonitor used off its loop's thread")
        guard fd >= 0 else { return }
        self.handler = handler
        if (try? loop.updateInterest(fd: fd, token: token, from: interest, to: LinuxConstants.epollIn)) != nil {
            interest = LinuxConstants.epollIn
        }
        let current = (try? NetworkInterfaces.current()) ?? []
        interfaces = current
        schedulePoll()
        handler(InterfaceChanges(added: current, removed: [], changed: [], current: current))
    }

    /// Stops watching and closes the netlink socket; the monitor cannot be restarted. Idempotent.
    public func stop() {
        precondition(loop.inEventLoop, "InterfaceMonitor used off its loop's thread")
        guard fd >= 0 else { return }
        try? loop.updateInterest(fd: fd, token: token, from: interest, to: nil)
        interest = nil
        loop.deregister(token)
        if let debounceTimer { loop.cancelTimer(debounceTimer) }
        if let pollTimer { loop.cancelTimer(pollTimer) }
        closeForLoopShutdown()
    }

    private func schedulePoll() {
        if let pollTimer { loop.cancelTimer(pollTimer) }
        pollTimer = loop.scheduleTimer(after: pollInterval) { [self] in
            pollTimer = nil
            rescan()
        }
    }

    private func rescan() {
        guard fd >= 0, let handler else { return }
        schedulePoll()
        guard let current = try? NetworkInterfaces.current() else { return }
        let changes = InterfaceChanges.between(interfaces, current)
        interfaces = current
        if !changes.isEmpty { handler(changes) }
    }
}

extension InterfaceMonitor: EventLoopSelectable {
    func handleEvents(_ events: UInt32) {
        // Drain everything; ENOBUFS (we fell behind and messages were lost) is just another reason to look again.
        while fd >= 0 {
            let count = receiveBuffer.withUnsafeMutableBytes { Glibc.recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 { continue }
            if count < 0 && (Glibc.errno == EINTR || Glibc.errno == ENOBUFS) { continue }
            break
        }
        guard debounceTimer == nil, fd >= 0 else { return }
        debounceTimer = loop.scheduleTimer(after: Self.debounceDelay) { [self] in
            debounceTimer = nil
            rescan()
        }
    }

    func closeForLoopShutdown() {
        guard fd >= 0 else { return }
        Glibc.close(fd)
        fd = -1
        handler = nil
    }
}
