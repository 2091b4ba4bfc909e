import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension Baseline {
    /// How long to wait for the iperf3 server to listen.
    static let iperf3StartTimeout = Duration.seconds(5)

    /// TCP throughput on 127.0.0.1 as iperf3 measures it: a one-off server (`iperf3 -s -1 -B 127.0.0.1 -p PORT`)
    /// and a client (`iperf3 -c 127.0.0.1 -p PORT -t SECONDS -J`) with iperf3's defaults (one stream, 128 KiB
    /// writes, no `TCP_NODELAY`), both child processes of this one.
    ///
    /// The server's port is picked free just before it starts; the client starts once `/proc/net/tcp` shows the
    /// port listening (probing it with a connection would use up the one-off server). Both processes are stopped
    /// and reaped before this returns, whatever happens.
    /// - Parameter seconds: The client's test length (`-t`).
    /// - Returns: `end.sum_received.bits_per_second` of the client's JSON report, in bytes per second.
    /// - Throws: ``BenchmarkError`` if iperf3 is missing, does not start, reports an error or its output has no
    ///   received rate.
    static func iperf3Throughput(seconds: Int) throws -> Double {
        precondition(seconds > 0, "iperf3Throughput needs a positive duration")
        guard let executable = executablePath("iperf3") else {
            throw BenchmarkError("iperf3 not found on PATH (Debian: apt-get install iperf3)")
        }
        let port = try BaselineSocket.freePort()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: executable)
        server.arguments = ["-s", "-1", "-B", "127.0.0.1", "-p", String(port)]
        server.standardInput = FileHandle.nullDevice
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        do {
            try server.run()
        } catch {
            throw BenchmarkError("cannot start \(executable): \(error)")
        }
        defer { stop(server) }
        try waitUntilListening(port: port, server: server)

        let client = Process()
        client.executableURL = URL(fileURLWithPath: executable)
        client.arguments = ["-c", "127.0.0.1", "-p", String(port), "-t", String(seconds), "-J"]
        let pipe = Pipe()
        client.standardInput = FileHandle.nullDevice
        client.standardOutput = pipe
        client.standardError = FileHandle.nullDevice
        do {
            try client.run()
        } catch {
            throw BenchmarkError("cannot start \(executable): \(error)")
        }
        defer { stop(client) }
        try? pipe.fileHandleForWriting.close()
        let output = try readAll(pipe.fileHandleForReading, deadline: .now + .seconds(seconds + 15))
        client.waitUntilExit()

        guard let report = try? JSONSerialization.jsonObject(with: output) as? [String: Any] else {
            throw BenchmarkError(
                "iperf3 client (status \(client.terminationStatus)) printed no JSON report: "
                    + String(decoding: output.prefix(300), as: UTF8.self))
        }
        if let error = report["error"] as? String { throw BenchmarkError("iperf3: \(error)") }
        guard let end = report["end"] as? [String: Any], let received = end["sum_received"] as? [String: Any],
            let bitsPerSecond = (received["bits_per_second"] as? NSNumber)?.doubleValue, bitsPerSecond > 0
        else {
            throw BenchmarkError("iperf3's JSON report has no end.sum_received.bits_per_second")
        }
        return bitsPerSecond / 8
    }

    /// The first executable file called `name` in `PATH`'s directories (then `/usr/bin`).
    static func executablePath(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin"]
        for directory in directories where !directory.isEmpty {
            let candidate = directory + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    /// Waits until a socket listens on `port` (any local address) according to `/proc/net/tcp` and
    /// `/proc/net/tcp6`, or fails once `server` exits or ``iperf3StartTimeout`` passes.
    private static func waitUntilListening(port: UInt16, server: Process) throws {
        let deadline = ContinuousClock.now + iperf3StartTimeout
        let suffix = String(format: ":%04X", port)
        while true {
            for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
                guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
                for line in text.split(separator: "\n").dropFirst() {
                    let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                    // sl, local_address, rem_address, st (0A = LISTEN), ...
                    if fields.count > 3, fields[1].hasSuffix(suffix), fields[3] == "0A" { return }
                }
            }
            if !server.isRunning {
                throw BenchmarkError(
                    "iperf3 server exited with status \(server.terminationStatus) before listening on port \(port)")
            }
            if ContinuousClock.now >= deadline {
                throw BenchmarkError("iperf3 server did not listen on port \(port) within \(iperf3StartTimeout)")
            }
            usleep(10_000)
        }
    }

    /// Reads `handle` to its end, giving up at `deadline` (the caller then stops the writer).
    private static func readAll(_ handle: FileHandle, deadline: ContinuousClock.Instant) throws -> Data {
        let fd = handle.fileDescriptor
        var output = Data()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            if ContinuousClock.now >= deadline { throw BenchmarkError("iperf3 client did not finish in time") }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 200)
            if ready < 0 && errno != EINTR { throw BenchmarkError("poll on iperf3's output failed (errno \(errno))") }
            if ready <= 0 { continue }
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return output }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw BenchmarkError("reading iperf3's output failed (errno \(errno))")
            }
            output.append(contentsOf: chunk[0..<count])
        }
    }

    /// Stops `process` if it still runs (SIGTERM, then SIGKILL after two seconds) and reaps it.
    private static func stop(_ process: Process) {
        if process.isRunning {
            process.terminate()
            let deadline = ContinuousClock.now + .seconds(2)
            while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        process.waitUntilExit()
    }
}
