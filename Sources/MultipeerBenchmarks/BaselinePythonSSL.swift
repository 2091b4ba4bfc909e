import Foundation

extension Baseline {
    /// A bulk transfer between two processes of `scripts/bench/ssl_bulk.py` on 127.0.0.1: Python's `ssl` module
    /// (OpenSSL's `SSL_write`/`SSL_read`, TLS 1.3, the suite OpenSSL picks) or plain sockets; the receiver's rate
    /// from its first byte to the last, in bytes per second.
    static func pythonBulkThroughput(tls: Bool, bytes: Int, repository: URL, scratch: URL) throws -> Double {
        let script = repository.appendingPathComponent("scripts/bench/ssl_bulk.py").path
        let python = "/usr/bin/python3"
        var serverArguments = [script, "server", "", String(bytes), tls ? "tls" : "plain"]
        if tls {
            let key = scratch.appendingPathComponent("key.pem").path
            let cert = scratch.appendingPathComponent("cert.pem").path
            if !FileManager.default.fileExists(atPath: cert) {
                let made = Process()
                made.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
                made.arguments = [
                    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "1", "-subj", "/CN=bench",
                ]
                made.standardOutput = FileHandle.nullDevice
                made.standardError = FileHandle.nullDevice
                try made.run()
                made.waitUntilExit()
                guard made.terminationStatus == 0 else {
                    throw BenchmarkError("openssl req could not make a certificate")
                }
            }
            serverArguments += [cert, key]
        }
        let port = try BaselineSocket.freePort()
        serverArguments[2] = String(port)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: python)
        server.arguments = serverArguments
        let output = Pipe()
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { if server.isRunning { server.terminate() } }
        // Wait for "listening".
        let handle = output.fileHandleForReading
        var text = ""
        while !text.contains("listening\n") {
            let data = handle.availableData
            guard !data.isEmpty else { throw BenchmarkError("the Python baseline server did not start") }
            text += String(decoding: data, as: UTF8.self)
        }
        let client = Process()
        client.executableURL = URL(fileURLWithPath: python)
        client.arguments = [script, "client", String(port), String(bytes), tls ? "tls" : "plain"]
        client.standardOutput = FileHandle.nullDevice
        client.standardError = FileHandle.nullDevice
        try client.run()
        client.waitUntilExit()
        server.waitUntilExit()
        text += String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("rate ") }),
            let rate = Double(line.split(separator: " ")[1])
        else { throw BenchmarkError("the Python baseline printed no rate: \(text)") }
        return rate
    }
}
