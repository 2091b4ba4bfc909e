import Dispatch
import Foundation
import MultipeerIO

#if canImport(Glibc)
    import Glibc
#endif

/// Plain blocking POSIX TCP sockets on 127.0.0.1 for the baselines, independent of `MultipeerIO`'s event loop.
///
/// Every call either completes or throws ``BenchmarkError`` naming the system call and `errno`; short reads and
/// writes and `EINTR` are handled here so the measurements stay simple loops.
enum BaselineSocket {
    /// Creates a listening socket bound to 127.0.0.1 on a free port.
    /// - Parameter backlog: The kernel's queue of connections not yet accepted.
    /// - Returns: The descriptor and the port the kernel picked.
    /// - Throws: ``BenchmarkError`` from `socket`, `bind`, `listen` or `getsockname`.
    static func listen(backlog: Int32 = 4) throws -> (fd: Int32, port: UInt16) {
        let fd = try makeSocket()
        do {
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = loopback(port: 0)
            try check("bind", withSockaddr(&address) { bind(fd, $0, $1) })
            try check("listen", Glibc.listen(fd, backlog))
            return (fd, try localPort(fd))
        } catch {
            close(fd)
            throw error
        }
    }

    /// Connects to 127.0.0.1 on `port`, blocking until the handshake completes.
    /// - Parameters:
    ///   - port: The listening port.
    ///   - noDelay: Whether to set `TCP_NODELAY`.
    /// - Returns: The connected descriptor.
    /// - Throws: ``BenchmarkError`` from `socket` or `connect`.
    static func connect(port: UInt16, noDelay: Bool = false) throws -> Int32 {
        let fd = try makeSocket()
        var address = loopback(port: port)
        while true {
            if withSockaddr(&address, { Glibc.connect(fd, $0, $1) }) == 0 { break }
            let code = errno
            if code == EINTR { continue }
            close(fd)
            throw failure("connect", code)
        }
        if noDelay { setNoDelay(fd) }
        return fd
    }

    /// Accepts one connection, blocking until it arrives.
    /// - Parameters:
    ///   - listener: The listening descriptor.
    ///   - noDelay: Whether to set `TCP_NODELAY` on the accepted socket.
    /// - Returns: The accepted descriptor.
    /// - Throws: ``BenchmarkError`` from `accept`.
    static func accept(_ listener: Int32, noDelay: Bool = false) throws -> Int32 {
        while true {
            let fd = Glibc.accept(listener, nil, nil)
            if fd >= 0 {
                if noDelay { setNoDelay(fd) }
                return fd
            }
            let code = errno
            if code != EINTR && code != ECONNABORTED { throw failure("accept", code) }
        }
    }

    /// A port that was free on 127.0.0.1 a moment ago (bound to port 0, read back, closed), for a child process
    /// that needs its port on the command line.
    /// - Returns: The port.
    /// - Throws: ``BenchmarkError`` if no socket could be bound.
    static func freePort() throws -> UInt16 {
        let (fd, port) = try listen(backlog: 1)
        close(fd)
        return port
    }

    /// Sets `TCP_NODELAY`, so small writes leave at once instead of waiting for Nagle's algorithm.
    /// - Parameter fd: A TCP socket.
    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Writes all `count` bytes at `bytes`, looping over short writes.
    /// - Parameters:
    ///   - fd: A connected socket.
    ///   - bytes: The first byte.
    ///   - count: How many bytes to write.
    /// - Throws: ``BenchmarkError`` from `send` (for example `EPIPE` once the peer closed).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int) throws {
        var offset = 0
        while offset < count {
            let sent = send(fd, bytes + offset, count - offset, Int32(MSG_NOSIGNAL))
            if sent > 0 {
                offset += sent
                continue
            }
            let code = errno
            if sent < 0 && code == EINTR { continue }
            throw failure("send", sent == 0 ? EIO : code)
        }
    }

    /// Reads exactly `count` bytes into `buffer`, looping over short reads.
    /// - Parameters:
    ///   - fd: A connected socket.
    ///   - buffer: Where the bytes go.
    ///   - count: How many bytes to read.
    /// - Returns: `false` if the peer closed before the first byte (an orderly end between messages).
    /// - Throws: ``BenchmarkError`` from `read`, or if the peer closed in the middle of the `count` bytes.
    static func readExactly(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) throws -> Bool {
        var offset = 0
        while offset < count {
            let received = read(fd, buffer + offset, count - offset)
            if received > 0 {
                offset += received
                continue
            }
            if received == 0 {
                if offset == 0 { return false }
                throw BenchmarkError("read: peer closed after \(offset) of \(count) bytes")
            }
            let code = errno
            if code != EINTR { throw failure("read", code) }
        }
        return true
    }

    /// Reads what is available, up to `capacity` bytes, blocking until at least one byte or end of stream.
    /// - Parameters:
    ///   - fd: A connected socket.
    ///   - buffer: Where the bytes go.
    ///   - capacity: The most bytes to read.
    /// - Returns: The number of bytes read; 0 at end of stream.
    /// - Throws: ``BenchmarkError`` from `read`.
    static func readSome(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ capacity: Int) throws -> Int {
        while true {
            let received = read(fd, buffer, capacity)
            if received >= 0 { return received }
            let code = errno
            if code != EINTR { throw failure("read", code) }
        }
    }

    /// Nanoseconds on `CLOCK_MONOTONIC`.
    static func nanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    // MARK: - Private

    private static func makeSocket() throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw failure("socket", errno) }
        return fd
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        return address
    }

    private static func withSockaddr<T>(
        _ address: inout sockaddr_in, _ body: (UnsafePointer<sockaddr>, socklen_t) -> T
    ) -> T {
        withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                body($0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    private static func localPort(_ fd: Int32) throws -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        try check("getsockname", result)
        return UInt16(bigEndian: address.sin_port)
    }

    private static func check(_ call: String, _ result: Int32) throws {
        if result < 0 { throw failure(call, errno) }
    }

    private static func failure(_ call: String, _ code: Int32) -> BenchmarkError {
        BenchmarkError("\(call): \(String(cString: strerror(code))) (errno \(code))")
    }
}

/// A thread running one side of a baseline, whose result (or error) `join()` hands back.
///
/// `Thread` from Foundation with a semaphore instead of `pthread_join`: the body runs on its own kernel thread,
/// so a blocking socket call in it never holds up the measuring thread.
final class BaselineThread<Result: Sendable>: Sendable {
    private let outcome = Lock<Swift.Result<Result, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    /// Starts `body` on a new thread.
    /// - Parameters:
    ///   - name: The thread's name, for debuggers and `top -H`.
    ///   - body: The work; what it returns or throws is kept for `join()`.
    init(name: String, _ body: @escaping @Sendable () throws -> Result) {
        let thread = Thread { [self] in
            let result = Swift.Result { try body() }
            outcome.withLock { $0 = result }
            done.signal()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Waits for the thread to finish.
    /// - Returns: What the body returned.
    /// - Throws: What the body threw.
    func join() throws -> Result {
        done.wait()
        done.signal()  // a second join returns at once
        return try outcome.withLock { $0! }.get()
    }
}
