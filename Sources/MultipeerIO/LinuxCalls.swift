internal import Glibc

/// Linux calls that Swift's `Glibc` module does not declare (it omits `sys/epoll.h`, `sys/eventfd.h` and the
/// `_GNU_SOURCE` functions), resolved once with `dlsym` and called through C function pointers.
///
/// This keeps the package free of a C target while still calling each function with the C calling convention.
struct LinuxCalls: @unchecked Sendable {
    // @unchecked Sendable: immutable C function pointers, resolved once before first use.
    let epollCreate1: @convention(c) (Int32) -> Int32
    let epollCtl: @convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    let epollWait: @convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32
    let eventfd: @convention(c) (UInt32, Int32) -> Int32
    let accept4:
        @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32
    let setns: @convention(c) (Int32, Int32) -> Int32
    let setThreadName: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32)?

    static let shared = LinuxCalls()

    private init() {
        func resolve<F>(_ name: String, as type: F.Type) -> F? {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else { return nil }
            return unsafeBitCast(symbol, to: F.self)
        }
        func require<F>(_ name: String, as type: F.Type) -> F {
            guard let function = resolve(name, as: type) else { fatalError("libc lacks \(name)") }
            return function
        }
        epollCreate1 = require("epoll_create1", as: (@convention(c) (Int32) -> Int32).self)
        epollCtl = require(
            "epoll_ctl", as: (@convention(c) (Int32, Int32, Int32, UnsafeMutableRawPointer?) -> Int32).self)
        epollWait = require(
            "epoll_wait", as: (@convention(c) (Int32, UnsafeMutableRawPointer?, Int32, Int32) -> Int32).self)
        eventfd = require("eventfd", as: (@convention(c) (UInt32, Int32) -> Int32).self)
        accept4 = require(
            "accept4",
            as: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32)
                -> Int32).self)
        setns = require("setns", as: (@convention(c) (Int32, Int32) -> Int32).self)
        setThreadName = resolve(
            "pthread_setname_np", as: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32).self)
    }
}

/// Constants from `sys/epoll.h`, `sys/eventfd.h` and Linux uapi headers that `Glibc` does not import.
enum LinuxConstants {
    static let epollIn: UInt32 = 0x001
    static let epollOut: UInt32 = 0x004
    static let epollErr: UInt32 = 0x008
    static let epollHup: UInt32 = 0x010
    static let epollCtlAdd: Int32 = 1
    static let epollCtlDel: Int32 = 2
    static let epollCtlMod: Int32 = 3
    static let closeOnExec: Int32 = 0o2_000_000
    static let nonBlocking: Int32 = 0o4000
    static let cloneNewNet: Int32 = 0x4000_0000

    #if arch(x86_64)
        /// `struct epoll_event` is packed on x86-64: 4-byte events, 8-byte data at offset 4.
        static let epollEventSize = 12
        static let epollDataOffset = 4
    #else
        static let epollEventSize = 16
        static let epollDataOffset = 8
    #endif

    static let ipv6PacketInfo: Int32 = 50  // IPV6_PKTINFO
    static let netlinkRoute: Int32 = 0  // NETLINK_ROUTE
    static let routeGroupLink: UInt32 = 0x1  // RTMGRP_LINK
    static let routeGroupIPv4Address: UInt32 = 0x10  // RTMGRP_IPV4_IFADDR
    static let routeGroupIPv6Address: UInt32 = 0x100  // RTMGRP_IPV6_IFADDR
}
