import Glibc
public import MultipeerIO

/// A plain TCP listening socket on a loopback address, for the addresses a dial meets that are not peers:
/// one that accepts and never speaks, one whose backlog is full so connects hang, a port nobody listens on.
public final class RawListener: @unchecked Sendable {
    // Safety of @unchecked Sendable: `fd` is set once in init and cleared by `close()`, which tests call only
    // after the work that used it ended.
    /// The listening (or only bound) socket; -1 once closed.
    public private(set) var fd: Int32
    /// Where it is bound.
    public let address: SocketAddress
    private var fillers: [Int32] = []

    /// Binds and listens on `host` with the given backlog; port 0 picks a free port. With `listening` false the
    /// socket is only bound: a connect to its port is refused, and nothing else can take the port meanwhile.
    public init(_ host: IPAddress, port: UInt16 = 0, backlog: Int32 = 16, listening: Bool = true) throws {
        let family: Int32
        if case .v4 = host { family = AF_INET } else { family = AF_INET6 }
        let fd = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        guard fd >= 0 else { throw SystemCallError(call: "socket", errno: errno) }
        var one: Int32 = 1
        // Not for a port held closed: two sockets that both allow reuse may share a port while neither listens.
        if listening { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) }
        if family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(4)) }
        let result = Self.withSockaddr(host, port: port) { Glibc.bind(fd, $0, $1) }
        guard result == 0, !listening || listen(fd, backlog) == 0 else {
            throw SystemCallError(call: "bind", errno: errno)
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let bound = withUnsafeBytes(of: &storage) { raw in
            UInt16(bigEndian: raw.loadUnaligned(fromByteOffset: 2, as: UInt16.self))
        }
        address = SocketAddress(host, port: bound)
    }

    /// A port on `host` where nobody listens, held by a bound socket until ``close()``: a connect there is refused.
    /// (A port bound once and released could be bound again by a test running beside, or be picked as a connect's
    /// own local port, which connects it to itself.)
    public static func closedPort(_ host: IPAddress) throws -> RawListener {
        try RawListener(host, listening: false)
    }

    /// A listener on 127.0.0.1 that never accepts and whose backlog is full: a connect to it stays in
    /// SYN-SENT (the kernel drops SYNs while the accept queue is full), like a connect to a silent host.
    public static func full() throws -> RawListener {
        let listener = try RawListener(.v4(.loopback), backlog: 0)
        let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let result = withSockaddr(.v4(.loopback), port: listener.address.port) { Glibc.connect(filler, $0, $1) }
        guard result == 0 else { throw SystemCallError(call: "connect", errno: errno) }
        listener.fillers.append(filler)
        return listener
    }

    /// Accepts one connection (waiting at most 10 s) and returns its descriptor.
    public func accept() throws -> Int32 {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 10_000) == 1 else { throw SystemCallError(call: "poll", errno: ETIMEDOUT) }
        let client = Glibc.accept(fd, nil, nil)
        guard client >= 0 else { throw SystemCallError(call: "accept", errno: errno) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return client
    }

    /// Reads from an accepted connection until the far side closes it; throws if that takes over 10 s.
    public static func readUntilClosed(_ client: Int32) throws {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if got == 0 || (got < 0 && errno == ECONNRESET) { return }
            if got < 0 { throw SystemCallError(call: "recv", errno: errno) }
        }
    }

    /// Closes the socket (and a full listener's filler connections).
    public func close() {
        for filler in fillers { Glibc.close(filler) }
        fillers = []
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }

    deinit { close() }

    private static func withSockaddr<T>(
        _ host: IPAddress, port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T
    ) -> T {
        switch host {
        case .v4(let v4):
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = v4.value.bigEndian
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    body($0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        case .v6(let v6):
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: v6.byteArray) }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    body($0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        }
    }
}
