#if canImport(Glibc)
    import Glibc
#endif

/// A TCP socket listening on 127.0.0.1 that never accepts: the kernel completes connections into its backlog
/// (and leaves those past it pending), and none of them ever hears a byte. For tests of connects and handshakes
/// that must not finish.
public final class SilentListener {
    /// The listening port.
    public let port: UInt16
    private let descriptor: Int32

    /// Listens on an ephemeral port of 127.0.0.1.
    /// - Parameter backlog: `listen`'s backlog: 0 keeps one completed connection, the next ones stay pending.
    /// - Throws: ``KnotServerError`` when the socket cannot listen.
    public init(backlog: Int32) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && listen(descriptor, backlog) == 0
                    && getsockname(descriptor, raw, &length) == 0
            }
        }
        guard descriptor >= 0, listening else {
            let error = errno
            if descriptor >= 0 { close(descriptor) }
            throw KnotServerError("cannot listen on 127.0.0.1: errno \(error)")
        }
        self.descriptor = descriptor
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(descriptor) }
}
