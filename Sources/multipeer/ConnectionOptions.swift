internal import Foundation
import Multipeer
import MultipeerIO

/// Options shared by `multipeer listen` and `multipeer connect`.
struct ConnectionOptions {

    var configuration: ConnectionConfiguration

    init(_ parsed: ConnectionArguments, defaultName: String) throws(UsageError) {
        let chosenName = parsed.name
        let path = parsed.identity ?? Self.defaultIdentityPath
        var identity: PeerIdentity
        do {
            // Made on first use (mode 0600), so a peer keeps its identity from run to run: the user's own file
            // by default, or the one --identity names.
            if FileManager.default.fileExists(atPath: path) {
                identity = try PeerIdentity.load(from: path)
            } else {
                identity = try PeerIdentity.generate(displayName: chosenName ?? defaultName)
                try FileManager.default.createDirectory(
                    atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
                try identity.save(to: path)
            }
            if let chosenName, chosenName != identity.displayName { identity = try identity.renamed(chosenName) }
        } catch let error as UsageError {
            throw error
        } catch let error as IdentityError {
            throw UsageError(error.reason)
        } catch {
            throw UsageError("\(error)")
        }
        configuration = ConnectionConfiguration(identity: identity)
        configuration.logger = ToolLog.logger
        if let text = parsed.encryption {
            guard let preference = EncryptionPreference.allCases.first(where: { $0.description == text }) else {
                throw UsageError("--encryption wants required, optional or none, not '\(text)'")
            }
            configuration.encryption = preference
        }
        if let path = parsed.secretFile {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw UsageError("cannot read --secret-file \(path)")
            }
            do {
                configuration.groupSecret = try GroupSecret(Array(data))
            } catch {
                throw UsageError("\(error.reason)")
            }
        }
        if let text = parsed.silenceTimeout {
            guard let seconds = Double(text), seconds >= 0.3 else {
                throw UsageError("--silence-timeout wants seconds (at least 0.3), not '\(text)'")
            }
            configuration.silenceTimeout = .milliseconds(Int(seconds * 1000))
            configuration.keepaliveInterval = .milliseconds(Int(seconds * 1000 / 3))
        }
        if let text = parsed.connectTimeout {
            // A slow device, or many peers connecting at once on a small one, may need longer than the defaults
            // (a 10 s handshake within a 15 s dial); the ratio of the two stays.
            guard let seconds = Double(text), seconds >= 1, seconds <= 3600 else {
                throw UsageError("--connect-timeout wants seconds (1 to 3600), not '\(text)'")
            }
            configuration.dialTimeout = .milliseconds(Int(seconds * 1000))
            configuration.handshakeTimeout = .milliseconds(Int(seconds * 1000 * 2 / 3))
        }
    }

    /// The user's identity file: `$XDG_DATA_HOME/swift-multipeer/identity` (or under `~/.local/share`).
    static var defaultIdentityPath: String {
        PeerIdentityStore.dataDirectory.appendingPathComponent("identity").path
    }

    /// Parses `HOST:PORT` or `[IPV6]:PORT`.
    static func address(_ text: String) throws(UsageError) -> SocketAddress {
        let host: Substring
        let port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            port = text[close...].dropFirst(2)
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        } else {
            throw UsageError("wanted HOST:PORT, not '\(text)'")
        }
        guard let ip = IPAddress(String(host)), let number = UInt16(port) else {
            throw UsageError("wanted an IP address and a port, not '\(text)'")
        }
        return SocketAddress(ip, port: number)
    }

    /// `NAME FINGERPRINT authenticated PROTECTION code NNNNNN`; on plaintext the fingerprint is shown as
    /// `unproven:FINGERPRINT` (only a claim), the word is `unauthenticated` and the code `none`.
    static func describe(_ peer: ConnectedPeer) -> String {
        let identity = peer.fingerprint.map { "\($0)" } ?? "unproven:\(peer.claimedFingerprint)"
        let code = peer.verificationCode.map { "\($0)" } ?? "none"
        return "\(peer.displayName) \(identity) \(peer.isAuthenticated ? "authenticated" : "unauthenticated") "
            + "\(peer.protection) code \(code)"
    }

    /// The peer's identity for a `closed` line: its proven fingerprint, or `unproven:CLAIM`.
    static func identity(_ peer: ConnectedPeer) -> String {
        peer.fingerprint.map { "\($0)" } ?? "unproven:\(peer.claimedFingerprint)"
    }

    /// `closed after SECONDS s: CODE ...` for a connection that started at `started`.
    static func closedLine(since started: ContinuousClock.Instant, _ reason: ConnectionError) -> String {
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return "closed after \(String(format: "%.3f", seconds)) s: \(describe(reason))"
    }

    /// `CODE CODE(VALUES): reason`, with the code's case name first so scripts can match it.
    static func describe(_ error: ConnectionError) -> String {
        "\(error.name) \(error.code): \(error.reason)"
    }
}

/// `multipeer listen [--address IP] [--port PORT] [options]`: accepts peers, prints them, echoes their
/// messages back, until SIGINT/SIGTERM.
struct ListenCommand {
    static let summary = "accept peer connections and echo their messages (diagnostics)"

    var address: SocketAddress
    var options: ConnectionOptions

    init(_ parsed: MultipeerTool.Listen) throws(UsageError) {
        options = try ConnectionOptions(parsed.connection, defaultName: "listener")
        let ip = parsed.address ?? "::"
        let portText = parsed.port ?? "0"
        guard let port = UInt16(portText) else { throw UsageError("--port wants 0-65535, not '\(portText)'") }
        address = try ConnectionOptions.address(ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)")
    }

    func run() async throws -> Int32 {
        let signals = TerminationSignals()
        let loop = try EventLoop(name: "multipeer-listen")
        let listener = try await PeerListener(configuration: options.configuration, address: address, loop: loop)
        Output.line("listening \(listener.localAddress) \(options.configuration.identity.fingerprint)")
        let failures = Task {
            for await failure in listener.handshakeFailures {
                Output.line("refused \(ConnectionOptions.describe(failure))")
            }
        }
        // A discarding task group: each connection's task is freed (with the connection) when it ends, so a
        // listener serving connections for days holds only the open ones.
        let acceptor = Task {
            await withDiscardingTaskGroup { group in
                for await connection in listener.connections {
                    Output.line("connected \(ConnectionOptions.describe(connection.peer))")
                    group.addTask {
                        for await message in connection.messages {
                            try? await connection.send(message)
                        }
                        let reason = await connection.closed()
                        Output.line(
                            "closed \(ConnectionOptions.identity(connection.peer)) \(ConnectionOptions.describe(reason))"
                        )
                    }
                }
            }
        }
        _ = await signals.wait()
        listener.close()
        failures.cancel()
        acceptor.cancel()
        loop.shutdown()
        return 0
    }
}

/// `multipeer connect HOST:PORT [--expect FINGERPRINT] [--send TEXT]... [options]`: connects, prints the
/// peer and every message it sends, and exits when the connection ends, saying why and after how long.
struct ConnectCommand {
    static let summary = "connect to a peer, send messages, print replies and why the connection ended"

    var address: SocketAddress
    var expected: PeerFingerprint?
    var messages: [String]
    /// With `--repeat N`: connect N times one after another, each time sending the messages and closing at once
    /// (a load test of the listener).
    var repetitions: Int?
    var options: ConnectionOptions

    init(_ parsed: MultipeerTool.Connect) throws(UsageError) {
        options = try ConnectionOptions(parsed.connection, defaultName: "dialer")
        if let text = parsed.expect {
            guard let fingerprint = PeerFingerprint(text) else {
                throw UsageError("--expect wants a fingerprint like abcd-efgh-..., not '\(text)'")
            }
            expected = fingerprint
        }
        messages = parsed.send
        if let text = parsed.repetitions {
            guard let count = Int(text), count >= 1 else {
                throw UsageError("--repeat wants a count of at least 1, not '\(text)'")
            }
            repetitions = count
        }
        address = try ConnectionOptions.address(parsed.address)
    }

    func run() async throws -> Int32 {
        if let repetitions { return try await runRepeatedly(repetitions) }
        let signals = TerminationSignals()
        let loop = try EventLoop(name: "multipeer-connect")
        defer { loop.shutdown() }
        guard let connection = await connectAndAnnounce(loop: loop) else { return 1 }
        let printer = Task {
            for await message in connection.messages {
                Output.line("message \(String(decoding: message, as: UTF8.self))")
            }
        }
        for message in messages { try? await connection.send(Array(message.utf8)) }
        let interrupted = Task {
            _ = await signals.wait()
            await connection.close(reason: "interrupted")
        }
        let started = ContinuousClock.now
        let reason = await connection.closed()
        Output.line(ConnectionOptions.closedLine(since: started, reason))
        interrupted.cancel()
        await printer.value
        return 0
    }
}

extension ConnectCommand {
    /// Connects and prints `connected ...`, or prints `failed CODE ...` and returns nil.
    func connectAndAnnounce(loop: EventLoop) async -> PeerConnection? {
        do {
            let connection = try await PeerConnection.connect(
                to: address, expecting: expected, configuration: options.configuration, loop: loop)
            Output.line("connected \(ConnectionOptions.describe(connection.peer))")
            return connection
        } catch {
            Output.line("failed \(ConnectionOptions.describe(error))")
            return nil
        }
    }

    /// `--repeat N`: N connections one after another; each prints its `connected` line, sends the messages and
    /// closes gracefully (`closed after ...`). Stops at the first failure, with status 1.
    func runRepeatedly(_ count: Int) async throws -> Int32 {
        let loop = try EventLoop(name: "multipeer-connect")
        defer { loop.shutdown() }
        for _ in 0..<count {
            let started = ContinuousClock.now
            guard let connection = await connectAndAnnounce(loop: loop) else { return 1 }
            for message in messages { try? await connection.send(Array(message.utf8)) }
            let reason = await connection.close(reason: "done")
            Output.line(ConnectionOptions.closedLine(since: started, reason))
        }
        return 0
    }
}
