internal import Glibc

/// A failed system call: the call's name and the `errno` it set.
///
/// The description adds the `strerror` text, for example `"bind: Address already in use (errno 98)"`.
public struct SystemCallError: Error, Sendable, CustomStringConvertible {
    /// The name of the system call that failed, such as `"bind"`.
    public let call: String
    /// The `errno` value the call reported.
    public let errno: Int32

    /// Creates an error for `call` failing with `errno`.
    /// - Parameters:
    ///   - call: The name of the failed system call.
    ///   - errno: The error number it reported.
    public init(call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    /// `"call: strerror text (errno N)"`.
    public var description: String {
        // glibc's strerror returns static strings for known codes (thread-safe since 2.32).
        let text = String(cString: Glibc.strerror(self.errno))
        return "\(call): \(text) (errno \(self.errno))"
    }
}

/// Runs a system call, retrying on `EINTR`, and throws `SystemCallError` when it returns a negative value.
@inline(__always)
func retryingSystemCall<T: FixedWidthInteger>(
    _ name: String, _ body: () -> T
) throws(SystemCallError) -> T {
    while true {
        let result = body()
        if result >= 0 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        throw SystemCallError(call: name, errno: code)
    }
}

/// Sets an integer socket option.
func setSocketOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) throws(SystemCallError) {
    var value = value
    _ = try retryingSystemCall("setsockopt") {
        setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }
}

/// Reads and clears a socket's pending error (`SO_ERROR`).
func pendingSocketError(_ fd: Int32) -> Int32 {
    var value: Int32 = 0
    var length = socklen_t(MemoryLayout<Int32>.size)
    if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) < 0 { return Glibc.errno }
    return value
}

/// `true` for the errno values that mean "try again later" on a non-blocking descriptor.
func isWouldBlock(_ code: Int32) -> Bool {
    code == EAGAIN || code == EWOULDBLOCK
}
