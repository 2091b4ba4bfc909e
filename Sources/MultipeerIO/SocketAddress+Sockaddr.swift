internal import Glibc

extension SocketAddress {
    /// Builds the C `sockaddr_storage` for this address and its meaningful length.
    func storage() -> (sockaddr_storage, socklen_t) {
        var storage = sockaddr_storage()
        switch address {
        case .v4(let v4):
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            sin.sin_addr = in_addr(s_addr: v4.value.bigEndian)
            withUnsafeBytes(of: &sin) { source in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) }
            }
            return (storage, socklen_t(MemoryLayout<sockaddr_in>.size))
        case .v6(let v6):
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            sin6.sin6_scope_id = scopeID
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { $0.copyBytes(from: v6.byteArray) }
            withUnsafeBytes(of: &sin6) { source in
                withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) }
            }
            return (storage, socklen_t(MemoryLayout<sockaddr_in6>.size))
        }
    }

    /// Calls `body` with a `sockaddr` pointer and length for this address.
    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var (storage, length) = storage()
        return withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// Decodes an `AF_INET`/`AF_INET6` `sockaddr`; `nil` for other families.
    init?(storage: sockaddr_storage) {
        var storage = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            let sin = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in.self) }
            self.init(
                .v4(IPv4Address(value: UInt32(bigEndian: sin.sin_addr.s_addr))), port: UInt16(bigEndian: sin.sin_port))
        case AF_INET6:
            var sin6 = withUnsafeBytes(of: &storage) { $0.load(as: sockaddr_in6.self) }
            let bytes = withUnsafeBytes(of: &sin6.sin6_addr) { Array($0) }
            self.init(
                .v6(IPv6Address(bytes: bytes)!), port: UInt16(bigEndian: sin6.sin6_port), scopeID: sin6.sin6_scope_id)
        default:
            return nil
        }
    }

    /// Reads a socket's local (`getsockname`) or peer (`getpeername`) address.
    static func query(
        _ fd: Int32, _ name: String,
        _ call: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) throws(SystemCallError) -> SocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = try retryingSystemCall(name) {
            withUnsafeMutablePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, &length) }
            }
        }
        guard let address = SocketAddress(storage: storage) else {
            throw SystemCallError(call: name, errno: EAFNOSUPPORT)
        }
        return address
    }
}

extension AddressFamily {
    /// The C `AF_*` constant.
    var cValue: Int32 {
        switch self {
        case .ipv4: AF_INET
        case .ipv6: AF_INET6
        }
    }
}

/// Creates a non-blocking, close-on-exec socket.
func makeSocket(family: AddressFamily, type: Int32, protocol proto: Int32 = 0) throws(SystemCallError) -> Int32 {
    try retryingSystemCall("socket") {
        socket(family.cValue, type | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), proto)
    }
}
