internal import Foundation
internal import Glibc
public import Logging

/// A level as the tool and `MULTIPEER_LOG` name it: swift-log's levels that the library uses, and `off`.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Nothing (the default).
    case off
    /// Failures the application is told about anyway, such as a connection refused for security.
    case error
    /// Things that went wrong and were handled: a name conflict, a link dropped, messages reported lost.
    case warning
    /// What a person following along wants: services found and lost, connections made and closed with their
    /// reasons, invitations and their answers, members joining and leaving, files sent and received.
    case info
    /// How the library decided: dial attempts, duplicate links, reconnection attempts, resumptions.
    case debug
    /// Everything, including per-packet discovery traffic.
    case trace

    /// The level named `off`, `error`, `warning` (or `warn`), `info`, `debug` or `trace`; nil for another name.
    public init?(name: String) {
        switch name.lowercased() {
        case "off", "none": self = .off
        case "error": self = .error
        case "warning", "warn": self = .warning
        case "info": self = .info
        case "debug": self = .debug
        case "trace": self = .trace
        default: return nil
        }
    }

    /// The level's name.
    public var description: String {
        switch self {
        case .off: "off"
        case .error: "error"
        case .warning: "warning"
        case .info: "info"
        case .debug: "debug"
        case .trace: "trace"
        }
    }

    /// swift-log's level, or nil for `off`.
    public var loggerLevel: Logger.Level? {
        switch self {
        case .off: nil
        case .error: .error
        case .warning: .warning
        case .info: .info
        case .debug: .debug
        case .trace: .trace
        }
    }

    /// Orders levels from `off` to `trace`.
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// The parts of the library that log. Each logs through a `Logger` of its own: the application's logger (or the
/// fallback) with the metadata `area` set to the area's name.
public enum LogArea: String, Sendable, CaseIterable {
    /// Multicast DNS: links, services found, updated and lost, names probed, conflicts.
    case discovery
    /// Connections: dials, handshakes, the identity proven, closes with their reasons.
    case connection
    /// Sessions: invitations, members joining, leaving and resuming, messages reported undelivered.
    case session
    /// Files and other resources sent and received.
    case resources
    /// The compatibility modules (MultipeerConnectivity and PeerConnectivity).
    case facade
}

extension Logger {
    /// This logger for one area of the library: the same handler and level, with the metadata `area`.
    public func area(_ area: LogArea) -> Logger {
        var logger = self
        logger[metadataKey: "area"] = .string(area.rawValue)
        return logger
    }
}

extension Logger.Metadata {
    /// What the library's log says of a peer beside a message: its name (`peer`) and its fingerprint.
    public static func peer(_ name: String, fingerprint: some CustomStringConvertible) -> Logger.Metadata {
        ["peer": "\(name)", "fingerprint": "\(fingerprint)"]
    }
}

/// Where the library's log goes when the application does not say.
///
/// The library never bootstraps swift-log's `LoggingSystem` (that is the application's choice) and never writes on
/// its own: every part logs through the logger of its configuration (`PeerNetwork.Configuration.logger`,
/// `ConnectionConfiguration.logger`, the `logger:` of `MulticastDNSStack`), which by default is ``fallback``: a
/// logger that writes nothing, unless the environment's `MULTIPEER_LOG` names a level, for programs that cannot
/// change code (then ``LineLogHandler`` lines at that level on standard error).
public enum MultipeerLogging {
    /// The label of the library's loggers.
    public static let label = "swift-multipeer"

    /// A logger that writes nothing.
    public static let disabled = Logger(label: label, factory: { _ in SwiftLogNoOpLogHandler() })

    /// The level `MULTIPEER_LOG` names, or `off`.
    public static var environmentLevel: LogLevel {
        guard let value = ProcessInfo.processInfo.environment["MULTIPEER_LOG"] else { return .off }
        return LogLevel(name: value) ?? .off
    }

    /// The logger for parts the application gave none: ``lines(_:)`` at the level of `MULTIPEER_LOG` when it names
    /// one, else ``disabled``. Read once, when first used.
    public static let fallback: Logger = lines(environmentLevel)

    /// A logger writing ``LineLogHandler`` lines on standard error at `level` (``disabled`` for `off`).
    public static func lines(_ level: LogLevel) -> Logger {
        guard let level = level.loggerLevel else { return disabled }
        var logger = Logger(label: label, factory: { LineLogHandler(label: $0) })
        logger.logLevel = level
        return logger
    }
}

/// A `LogHandler` writing one line per message on standard error, in one `write` so that lines from several
/// threads never mix: `HH:MM:SS.mmm LEVEL AREA: MESSAGE key=value ...` (UTC; AREA is the `area` metadata, or the
/// logger's label; the other metadata follows, sorted by key). Control characters in the message and the metadata
/// (peers choose their names) are escaped as `\u{..}`, so a peer cannot forge a line or drive a terminal.
public struct LineLogHandler: LogHandler {
    /// The most detailed level written.
    public var logLevel: Logger.Level = .info
    /// Metadata written with every line.
    public var metadata: Logger.Metadata = [:]
    private let label: String
    private let write: @Sendable (String) -> Void

    /// A handler for a logger labelled `label`, writing to standard error.
    /// - Parameter label: The logger's label, written as the area of lines without `area` metadata.
    public init(label: String) {
        self.init(label: label, write: Self.writeToStandardError)
    }

    /// A handler that gives each line (with its newline) to `write` instead (for tests).
    init(label: String, write: @escaping @Sendable (String) -> Void) {
        self.label = label
        self.write = write
    }

    /// One metadata value.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes the event's line.
    public func log(event: LogEvent) {
        var all = metadata
        if let more = event.metadata { all.merge(more) { $1 } }
        let area = all.removeValue(forKey: "area").map { "\($0)" } ?? label
        var line = "\(Self.timestamp()) \(event.level) \(ControlCharacters.escaped(area)): "
        line += ControlCharacters.escaped(event.message.description)
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            line += " \(ControlCharacters.escaped(key))=\(ControlCharacters.escaped("\(value)"))"
        }
        write(line + "\n")
    }

    /// `HH:MM:SS.mmm`, UTC.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seconds = Int(now.tv_sec) % 86_400
        return pad(seconds / 3600, 2) + ":" + pad(seconds / 60 % 60, 2) + ":" + pad(seconds % 60, 2) + "."
            + pad(Int(now.tv_nsec) / 1_000_000, 3)
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }

    @Sendable private static func writeToStandardError(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0, errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}

/// The characters a terminal may act on, and how the log and the tool write them.
public enum ControlCharacters {
    /// Whether a terminal may act on the character: C0 and C1 controls and DEL (category Cc), and the Unicode
    /// line and paragraph separators. What the log escapes, and what text from peers must not carry to a terminal.
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    /// `text` with control characters written as `\u{..}` escapes.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if isControl(scalar) {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
