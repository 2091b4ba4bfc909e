internal import Glibc

/// A non-blocking UDP socket owned by an `EventLoop`, with per-datagram arrival interface and destination.
///
/// Create and use it on the loop's thread. The loop keeps the socket alive until `close()` or loop shutdown.
public final class UDPSocket: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread; each public method
    // checks `loop.inEventLoop`. The type is Sendable only so it can be handed back from `EventLoop.submit`.

    /// Largest datagram the receive buffer holds: the UDP maximum over IPv4 and IPv6 without jumbograms. Longer
    /// datagrams (only IPv6 jumbograms) arrive with `truncated` set.
    static let maximumDatagramSize = 65_535

    /// Datagrams read per readiness event before yielding to other sockets and timers; the socket stays readable
    /// (level-triggered), so the rest is read on the next loop iteration. Keeps a flood on one socket from
    /// starving the rest of the loop.
    static let maximumDatagramsPerWakeup = 256

    /// Options applied when the socket is created.
    public struct Options: Sendable {
        /// `SO_REUSEADDR`: share the port with other sockets that set it (needed for mDNS on 5353).
        public var reuseAddress = false
        /// `SO_REUSEPORT`: share the port with other processes' sockets that set it.
        public var reusePort = false
        /// `IP_MULTICAST_LOOP`/`IPV6_MULTICAST_LOOP`: deliver our own multicast to local listeners.
        public var multicastLoopback = true
        /// `IP_MULTICAST_TTL`/`IPV6_MULTICAST_HOPS` (RFC 6762 requires 255 for mDNS).
        public var multicastHops = 255
        /// `SO_RCVBUF` in bytes, or `nil` for the system default.
        public var receiveBufferSize: Int? = nil

        /// Creates the default options.
        public init() {}
    }

    private let loop: EventLoop
    private let family: AddressFamily
    private var fd: Int32
    private var token: UInt64 = 0
    private var interest: UInt32?
    private var handler: ((UDPDatagram) -> Void)?
    private var controlBuffer: UnsafeMutableRawBufferPointer

    /// Creates a socket of `family` on `loop`. Loop thread only.
    ///
    /// Enables packet info (arrival interface and destination), `IPV6_V6ONLY` for IPv6, and turns
    /// `IP_MULTICAST_ALL` off so the socket only sees groups it joined itself.
    /// - Parameters:
    ///   - family: IPv4 or IPv6.
    ///   - loop: The owning loop.
    ///   - options: Socket options.
    /// - Throws: `SystemCallError` if the socket cannot be created or configured.
    public init(family: AddressFamily, loop: EventLoop, options: Options = .init()) throws(SystemCallError) {
        precondition(loop.inEventLoop, "UDPSocket must be created on its loop's thread")
        self.loop = loop
        self.family = family
        fd = try makeSocket(family: family, type: Int32(SOCK_DGRAM.rawValue))
        controlBuffer = .allocate(byteCount: ControlMessages.receiveCapacity, alignment: 8)
        do {
            if options.reuseAddress { try setSocketOption(fd, SOL_SOCKET, SO_REUSEADDR, 1) }
            if options.reusePort { try setSocketOption(fd, SOL_SOCKET, SO_REUSEPORT, 1) }
            if let size = options.receiveBufferSize {
                try setSocketOption(fd, SOL_SOCKET, SO_RCVBUF, Int32(clamping: size))
            }
            let loopback: Int32 = options.multicastLoopback ? 1 : 0
            let hops = Int32(clamping: options.multicastHops)
            switch family {
            case .ipv4:
                let level = Int32(IPPROTO_IP)
                try setSocketOption(fd, level, IP_PKTINFO, 1)
                try setSocketOption(fd, level, IP_MULTICAST_ALL, 0)
                try setSocketOption(fd, level, IP_MULTICAST_LOOP, loopback)
                try setSocketOption(fd, level, IP_MULTICAST_TTL, hops)
            case .ipv6:
                let level = Int32(IPPROTO_IPV6)
                try setSocketOption(fd, level, IPV6_V6ONLY, 1)
                try setSocketOption(fd, level, IPV6_RECVPKTINFO, 1)
                try setSocketOption(fd, level, IPV6_MULTICAST_LOOP, loopback)
                try setSocketOption(fd, level, IPV6_MULTICAST_HOPS, hops)
            }
        } catch {
            Glibc.close(fd)
            controlBuffer.deallocate()
            throw error
        }
        token = loop.register(self)
    }

    deinit {
        controlBuffer.deallocate()
    }

    /// Binds the socket to a local address and port (port 0 picks a free port).
    /// - Parameter address: The local address.
    /// - Throws: `SystemCallError` from `bind`.
    public func bind(to address: SocketAddress) throws(SystemCallError) {
        try checkOpen("bind")
        let fd = fd
        _ = try retryingSystemCall("bind") { address.withSockaddr { Glibc.bind(fd, $0, $1) } }
    }

    /// The address the socket is bound to.
    /// - Returns: The local address and port.
    /// - Throws: `SystemCallError` from `getsockname`.
    public func localAddress() throws(SystemCallError) -> SocketAddress {
        try checkOpen("getsockname")
        return try SocketAddress.query(fd, "getsockname", getsockname)
    }

    /// Joins a multicast group on one interface.
    /// - Parameters:
    ///   - group: The group address, of the socket's family.
    ///   - interfaceIndex: The interface to join on.
    /// - Throws: `SystemCallError` from `setsockopt`.
    public func joinMulticastGroup(_ group: IPAddress, interfaceIndex: UInt32) throws(SystemCallError) {
        try changeMembership(group, interfaceIndex: interfaceIndex, join: true)
    }

    /// Leaves a multicast group on one interface.
    /// - Parameters:
    ///   - group: The group address.
    ///   - interfaceIndex: The interface it was joined on.
    /// - Throws: `SystemCallError` from `setsockopt`.
    public func leaveMulticastGroup(_ group: IPAddress, interfaceIndex: UInt32) throws(SystemCallError) {
        try changeMembership(group, interfaceIndex: interfaceIndex, join: false)
    }

    /// Sends one datagram.
    ///
    /// `interfaceIndex` picks the outgoing interface (through packet info), which multicast and link-local
    /// destinations need. For an IPv6 destination without a zone it also becomes the zone.
    /// - Parameters:
    ///   - bytes: The payload.
    ///   - destination: Where to send it.
    ///   - interfaceIndex: The outgoing interface, or `nil` to let routing decide.
    /// - Returns: `false` if the kernel's buffer was full (`EAGAIN`, or `ENOBUFS` from a full device queue) and
    ///   the datagram was dropped; `true` when it was handed to the kernel.
    /// - Throws: `SystemCallError` from `sendmsg` for any other failure.
    @discardableResult
    public func send(
        _ bytes: [UInt8], to destination: SocketAddress, interfaceIndex: UInt32? = nil
    ) throws(SystemCallError) -> Bool {
        try checkOpen("sendmsg")
        var destination = destination
        var control: [UInt8] = []
        if let index = interfaceIndex {
            switch family {
            case .ipv4:
                // struct in_pktinfo { int ipi_ifindex; struct in_addr ipi_spec_dst, ipi_addr; }
                var payload = [UInt8](repeating: 0, count: 12)
                withUnsafeBytes(of: Int32(bitPattern: index)) { payload.replaceSubrange(0..<4, with: $0) }
                control = ControlMessages.encode(level: Int32(IPPROTO_IP), type: IP_PKTINFO, payload: payload)
            case .ipv6:
                // struct in6_pktinfo { struct in6_addr ipi6_addr; unsigned ipi6_ifindex; }
                var payload = [UInt8](repeating: 0, count: 20)
                withUnsafeBytes(of: index) { payload.replaceSubrange(16..<20, with: $0) }
                control = ControlMessages.encode(
                    level: Int32(IPPROTO_IPV6), type: LinuxConstants.ipv6PacketInfo, payload: payload)
                if destination.scopeID == 0, case .v6(let address) = destination.address,
                    address.isLinkLocal || address.isMulticast
                {
                    destination.scopeID = index
                }
            }
        }
        var (storage, storageLength) = destination.storage()
        let fd = fd
        let result = bytes.withUnsafeBytes { payloadBytes in
            control.withUnsafeMutableBytes { controlBytes in
                withUnsafeMutablePointer(to: &storage) { storagePointer in
                    // sendmsg only reads the payload; iovec's pointer is mutable for readv's sake.
                    var vector = iovec(
                        iov_base: UnsafeMutableRawPointer(mutating: payloadBytes.baseAddress),
                        iov_len: payloadBytes.count)
                    return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                        var message = msghdr()
                        message.msg_name = UnsafeMutableRawPointer(storagePointer)
                        message.msg_namelen = storageLength
                        message.msg_iov = vectorPointer
                        message.msg_iovlen = 1
                        message.msg_control = controlBytes.isEmpty ? nil : controlBytes.baseAddress
                        message.msg_controllen = controlBytes.count
                        while true {
                            let sent = sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
                            if sent >= 0 { return Int32(0) }
                            if Glibc.errno != EINTR { return Glibc.errno }
                        }
                    }
                }
            }
        }
        if result == 0 { return true }
        if isWouldBlock(result) || result == ENOBUFS { return false }
        throw SystemCallError(call: "sendmsg", errno: result)
    }

    /// Sets the closure called on the loop thread for every received datagram, and starts receiving.
    /// - Parameter handler: Called once per datagram.
    public func setReceiveHandler(_ handler: @escaping (UDPDatagram) -> Void) {
        precondition(loop.inEventLoop, "UDPSocket used off its loop's thread")
        guard fd >= 0 else { return }
        self.handler = handler
        updateInterest(LinuxConstants.epollIn)
    }

    /// Closes the socket; further calls throw `EBADF`. Idempotent.
    public func close() {
        precondition(loop.inEventLoop, "UDPSocket used off its loop's thread")
        guard fd >= 0 else { return }
        updateInterest(nil)
        loop.deregister(token)
        closeDescriptor()
    }

    // MARK: - Private

    private func closeDescriptor() {
        Glibc.close(fd)
        fd = -1
        handler = nil
    }

    private func checkOpen(_ call: String) throws(SystemCallError) {
        precondition(loop.inEventLoop, "UDPSocket used off its loop's thread")
        if fd < 0 { throw SystemCallError(call: call, errno: EBADF) }
    }

    private func updateInterest(_ new: UInt32?) {
        // EPOLL_CTL on a socket we own only fails for programming errors; keep the old state in that case.
        if (try? loop.updateInterest(fd: fd, token: token, from: interest, to: new)) != nil {
            interest = new
        }
    }

    private func changeMembership(_ group: IPAddress, interfaceIndex: UInt32, join: Bool) throws(SystemCallError) {
        try checkOpen("setsockopt")
        let fd = fd
        switch group {
        case .v4(let address):
            var request = ip_mreqn()
            request.imr_multiaddr = in_addr(s_addr: address.value.bigEndian)
            request.imr_ifindex = Int32(bitPattern: interfaceIndex)
            let option = join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP
            _ = try retryingSystemCall("setsockopt") {
                setsockopt(fd, Int32(IPPROTO_IP), option, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
            }
        case .v6(let address):
            var request = ipv6_mreq()
            withUnsafeMutableBytes(of: &request.ipv6mr_multiaddr) { $0.copyBytes(from: address.byteArray) }
            request.ipv6mr_interface = interfaceIndex
            let option = join ? IPV6_JOIN_GROUP : IPV6_LEAVE_GROUP
            _ = try retryingSystemCall("setsockopt") {
                setsockopt(fd, Int32(IPPROTO_IPV6), option, &request, socklen_t(MemoryLayout<ipv6_mreq>.size))
            }
        }
    }

    /// Reads one datagram; `nil` when the socket has nothing more (or failed, which is then cleared).
    private func receiveOne() -> UDPDatagram? {
        // The loop's shared read buffer (64 KiB, enough for any datagram): a socket holds no buffer of its own.
        loop.withReadBuffer { receiveBuffer in receiveOne(into: receiveBuffer) }
    }

    private func receiveOne(into receiveBuffer: UnsafeMutableRawBufferPointer) -> UDPDatagram? {
        var storage = sockaddr_storage()
        var flags: Int32 = 0
        var controlLength = 0
        let received: Int = withUnsafeMutablePointer(to: &storage) { storagePointer in
            var vector = iovec(iov_base: receiveBuffer.baseAddress, iov_len: receiveBuffer.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                var message = msghdr()
                message.msg_name = UnsafeMutableRawPointer(storagePointer)
                message.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = controlBuffer.baseAddress
                message.msg_controllen = controlBuffer.count
                while true {
                    let count = recvmsg(fd, &message, 0)
                    if count >= 0 {
                        flags = message.msg_flags
                        controlLength = message.msg_controllen
                        return count
                    }
                    if Glibc.errno != EINTR { return -1 }
                }
            }
        }
        guard received >= 0, let source = SocketAddress(storage: storage) else { return nil }
        var destination: IPAddress?
        var interfaceIndex: UInt32 = 0
        ControlMessages.forEach(in: UnsafeRawBufferPointer(controlBuffer), length: controlLength) {
            level, type, data in
            if level == Int32(IPPROTO_IP), type == IP_PKTINFO, data.count >= 12 {
                interfaceIndex = UInt32(bitPattern: data.loadUnaligned(fromByteOffset: 0, as: Int32.self))
                destination = IPv4Address(bytes: data[8..<12]).map(IPAddress.v4)
            } else if level == Int32(IPPROTO_IPV6), type == LinuxConstants.ipv6PacketInfo, data.count >= 20 {
                destination = IPv6Address(bytes: data[0..<16]).map(IPAddress.v6)
                interfaceIndex = data.loadUnaligned(fromByteOffset: 16, as: UInt32.self)
            }
        }
        return UDPDatagram(
            bytes: Array(receiveBuffer[0..<received]), source: source, destination: destination,
            interfaceIndex: interfaceIndex, truncated: flags & Int32(MSG_TRUNC) != 0)
    }
}

extension UDPSocket: EventLoopSelectable {
    func handleEvents(_ events: UInt32) {
        if events & LinuxConstants.epollErr != 0 {
            // Clear a pending ICMP error so level-triggered epoll does not report it forever.
            _ = pendingSocketError(fd)
        }
        guard events & LinuxConstants.epollIn != 0 else { return }
        for _ in 0..<Self.maximumDatagramsPerWakeup {
            guard fd >= 0, let handler, let datagram = receiveOne() else { return }
            handler(datagram)
        }
    }

    func closeForLoopShutdown() {
        guard fd >= 0 else { return }
        closeDescriptor()
    }
}
