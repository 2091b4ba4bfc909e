internal import Glibc
internal import Synchronization

/// How much the library says about what it does (on standard error).
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

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// The library's log: one line per event on standard error, `HH:MM:SS.mmm LEVEL AREA: MESSAGE` (UTC), written
/// in one `write` so lines from several threads never mix. Off unless the `MULTIPEER_LOG` environment
/// variable names a level or the application sets ``level``; a message is only built when its level is on.
/// Control characters in a message (peers choose their names) are escaped, so a peer cannot forge log lines.
public enum Log {
    private static let current = Atomic<Int>(environmentLevel.rawValue)

    /// The level from `MULTIPEER_LOG`, or `off`.
    public static var environmentLevel: LogLevel {
        guard let value = getenv("MULTIPEER_LOG") else { return .off }
        return LogLevel(name: String(cString: value)) ?? .off
    }

    /// The most detailed level written; set it at any time.
    public static var level: LogLevel {
        get { LogLevel(rawValue: current.load(ordering: .relaxed)) ?? .off }
        set { current.store(newValue.rawValue, ordering: .relaxed) }
    }

    /// Whether messages of `level` are written.
    public static func isEnabled(_ level: LogLevel) -> Bool {
        level != .off && level.rawValue <= current.load(ordering: .relaxed)
    }

    /// Writes `message` when `level` is on; `area` says which part speaks (`mdns`, `connection`, `session`...).
    public static func write(_ level: LogLevel, _ area: StaticString, _ message: @autoclosure () -> String) {
        guard isEnabled(level) else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seconds = Int(now.tv_sec) % 86_400
        let stamp =
            pad(seconds / 3600, 2) + ":" + pad(seconds / 60 % 60, 2) + ":" + pad(seconds % 60, 2) + "."
            + pad(Int(now.tv_nsec) / 1_000_000, 3)
        let line = "\(stamp) \(level) \(area): \(escaped(message()))\n"
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

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }

    /// Whether a terminal may act on the character: C0 and C1 controls and DEL (category Cc), and the Unicode
    /// line and paragraph separators. What the log escapes, and what text from peers must not carry to a terminal.
    public static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.properties.generalCategory == .control || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    /// `text` with control characters written as `\u{..}` escapes.
    static func escaped(_ text: String) -> String {
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
