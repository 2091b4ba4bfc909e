import Foundation
import MultipeerIO
import NetLab

@testable import Multipeer

/// A plain TCP listening socket on a loopback address, for the addresses a dial meets that are not peers:
/// one that accepts and never speaks, one whose backlog is full so connects hang, a port nobody listens on.
final class RawListener: @unchecked Sendable {
    // Safety of @unchecked Sendable: `fd` is set once in init and cleared by `close()`, which tests call only
    // after the work that used it ended.
    private(set) var fd: Int32
    let address: SocketAddress
    private var fillers: [Int32] = []

    /// Binds and listens on `host` with the given backlog; port 0 picks a free port. With `listening` false the
    /// socket is only bound: a connect to its port is refused, and nothing else can take the port meanwhile.
    init(_ host: IPAddress, port: UInt16 = 0, backlog: Int32 = 16, listening: Bool = true) throws {
        let family = host.isIPv4 ? AF_INET : AF_INET6
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
    static func closedPort(_ host: IPAddress) throws -> RawListener {
        try RawListener(host, listening: false)
    }

    /// A listener on 127.0.0.1 that never accepts and whose backlog is full: a connect to it stays in
    /// SYN-SENT (the kernel drops SYNs while the accept queue is full), like a connect to a silent host.
    static func full() throws -> RawListener {
        let listener = try RawListener(.v4(.loopback), backlog: 0)
        let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let result = withSockaddr(.v4(.loopback), port: listener.address.port) { Glibc.connect(filler, $0, $1) }
        guard result == 0 else { throw SystemCallError(call: "connect", errno: errno) }
        listener.fillers.append(filler)
        return listener
    }

    /// Accepts one connection (waiting at most 10 s) and returns its descriptor.
    func accept() throws -> Int32 {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 10_000) == 1 else { throw SystemCallError(call: "poll", errno: ETIMEDOUT) }
        let client = Glibc.accept(fd, nil, nil)
        guard client >= 0 else { throw SystemCallError(call: "accept", errno: errno) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return client
    }

    /// Reads from an accepted connection until the far side closes it; throws if that takes over 10 s.
    static func readUntilClosed(_ client: Int32) throws {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if got == 0 || (got < 0 && errno == ECONNRESET) { return }
            if got < 0 { throw SystemCallError(call: "recv", errno: errno) }
        }
    }

    func close() {
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

/// The kernel's TCP sockets of this network namespace in SYN-SENT towards `port` on 127.0.0.1: connects
/// still waiting for an answer.
func synSentSockets(to port: UInt16) -> Int {
    guard let table = procNetTCP() else { return -1 }
    let remote = String(format: "0100007F:%04X", port)
    return table.split(separator: "\n").dropFirst().filter { line in
        let fields = line.split(separator: " ")
        return fields.count > 3 && fields[2] == remote && fields[3] == "02"
    }.count
}

/// The whole of `/proc/net/tcp`, read until its end: the kernel hands it out a page per `read`, so reading
/// once (as `String(contentsOfFile:)` does) misses every socket past the first hundred or so.
func procNetTCP() -> String? {
    let fd = open("/proc/net/tcp", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let got = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if got < 0 && errno == EINTR { continue }
        guard got >= 0 else { return nil }
        if got == 0 { return String(decoding: bytes, as: UTF8.self) }
        bytes += chunk[..<got]
    }
}

/// Waits until `condition` holds, checking every 10 ms for at most `limit`; returns whether it held.
func eventually(within limit: Duration = .seconds(3), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + TestTime.scaled(limit)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return condition()
}

extension IPAddress {
    var isIPv4: Bool {
        if case .v4 = self { true } else { false }
    }
}

/// The result of a connect running in a task, readable without awaiting it, so a test can bound how long
/// it waits for a connect that ignores cancellation instead of hanging with it.
final class ConnectOutcome: Sendable {
    let result = Lock<Result<PeerConnection, ConnectionError>?>(nil)
    var isDone: Bool { result.withLock { $0 != nil } }
    var error: ConnectionError? {
        result.withLock { if case .failure(let error) = $0 { error } else { nil } }
    }

    /// Starts `connect` in a task that records its result.
    static func start(
        _ connect: @escaping @Sendable () async throws(ConnectionError) -> PeerConnection
    ) -> (ConnectOutcome, Task<Void, Never>) {
        let outcome = ConnectOutcome()
        let task = Task {
            let result: Result<PeerConnection, ConnectionError>
            do throws(ConnectionError) { result = .success(try await connect()) } catch { result = .failure(error) }
            outcome.result.withLock { $0 = result }
        }
        return (outcome, task)
    }
}
