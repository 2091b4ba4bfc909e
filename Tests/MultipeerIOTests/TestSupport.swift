import Dispatch
import Foundation
import Glibc
import MultipeerIO
import NetLab
import TestIsolation
import Testing

/// A thread-safe list that loop-thread callbacks append to and tests read.
final class Collector<Element: Sendable>: Sendable {
    private let storage = Lock<[Element]>([])

    func append(_ element: Element) { storage.withLock { $0.append(element) } }
    func append(contentsOf elements: [Element]) { storage.withLock { $0.append(contentsOf: elements) } }
    var values: [Element] { storage.withLock { $0 } }
    var count: Int { storage.withLock { $0.count } }
    /// Empties the list and returns what it held.
    func removeAll() -> [Element] {
        storage.withLock { elements in
            let all = elements
            elements = []
            return all
        }
    }
}

/// Polls `condition` until it holds or `timeout` passes; the timeout is generous, the poll is fast.
func eventually(timeout: Duration = .seconds(10), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + TestTime.scaled(timeout)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return condition()
}

/// 127.0.0.1:`port` for the socket calls a test makes by hand.
func loopbackSockaddr(port: UInt16 = 0) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    return address
}

/// Runs `body` with a fresh loop and always shuts the loop down.
func withLoop(
    clock: any IOClock = MonotonicClock(), _ body: (EventLoop) async throws -> Void
) async throws {
    let loop = try EventLoop(name: "test-loop", clock: clock)
    defer { loop.shutdown() }
    try await body(loop)
}

/// The loopback interface's index in the current network namespace.
func loopbackIndex() throws -> UInt32 {
    struct NoLoopback: Error {}
    guard let lo = try NetworkInterfaces.current().first(where: { $0.isLoopback }) else { throw NoLoopback() }
    return lo.index
}

/// A network namespace created for one test and deleted afterwards.
struct NetworkNamespace {
    let name: String

    /// `true` when namespaces can be created here (root with iproute2).
    static let isAvailable: Bool = getuid() == 0 && FileManager.default.isExecutableFile(atPath: ipPath)

    static let ipPath = "/usr/sbin/ip"

    struct CommandFailed: Error, CustomStringConvertible {
        let arguments: [String]
        let status: Int32
        var description: String { "ip \(arguments.joined(separator: " ")) exited with \(status)" }
    }

    /// Creates a namespace with loopback up, multicast-capable, and an IPv4 multicast route through it.
    static func create() throws -> NetworkNamespace {
        let name = "mpio-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try ip(["netns", "add", name])
        let namespace = NetworkNamespace(name: name)
        do {
            try namespace.ip(["link", "set", "lo", "up"])
            try namespace.ip(["link", "set", "lo", "multicast", "on"])
            try namespace.ip(["route", "add", "224.0.0.0/4", "dev", "lo"])
        } catch {
            namespace.delete()
            throw error
        }
        return namespace
    }

    static func ip(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ipPath)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.runToExit()
        guard process.terminationStatus == 0 else {
            throw CommandFailed(arguments: arguments, status: process.terminationStatus)
        }
    }

    /// Runs `ip -n NAME arguments…`.
    func ip(_ arguments: [String]) throws {
        try Self.ip(["-n", name] + arguments)
    }

    func delete() {
        try? Self.ip(["netns", "delete", name])
    }

    /// Creates an event loop whose thread lives in this namespace: a helper thread enters the namespace with
    /// `setns`, and the loop thread it creates inherits it.
    func makeLoop() throws -> EventLoop {
        let result = Lock<Result<EventLoop, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let path = "/run/netns/\(name)"
        let thread = Thread {
            defer { done.signal() }
            let outcome: Result<EventLoop, any Error> = Result {
                let fd = open(path, O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else { throw SystemCallError(call: "open", errno: errno) }
                defer { close(fd) }
                guard setNetworkNamespace(fd) == 0 else { throw SystemCallError(call: "setns", errno: errno) }
                return try EventLoop(name: "netns-loop")
            }
            result.withLock { $0 = outcome }
        }
        thread.start()
        done.wait()
        return try result.withLock { $0! }.get()
    }
}

/// `setns(fd, CLONE_NEWNET)`; Swift's Glibc module does not declare `setns`, so it is looked up with `dlsym`.
private func setNetworkNamespace(_ fd: Int32) -> Int32 {
    typealias SetNS = @convention(c) (Int32, Int32) -> Int32
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "setns") else { return -1 }
    let cloneNewNet: Int32 = 0x4000_0000
    return unsafeBitCast(symbol, to: SetNS.self)(fd, cloneNewNet)
}

/// Runs `body` with a fresh namespace and a loop inside it; always shuts the loop down and deletes the namespace.
/// On a thread of its own: making and deleting a namespace waits for `ip`, which on the shared pool's two threads
/// would stall every other test in the process meanwhile.
func withNamespace(_ body: (NetworkNamespace, EventLoop) async throws -> Void) async throws {
    try await onOwnThread {
        let namespace = try NetworkNamespace.create()
        defer { namespace.delete() }
        let loop = try namespace.makeLoop()
        defer { loop.shutdown() }
        try await body(namespace, loop)
    }
}

/// Bytes allocated by malloc and not freed, over every arena (`ProcessMemory.heapInUse()`), or nil where it
/// cannot be read.
func heapInUse() -> Int? { ProcessMemory.heapInUse() }
