import Foundation
import MultipeerIO
import NetLab

@testable import Multipeer

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
