import Logging
import Testing

@testable import MultipeerIO

/// Lines a handler wrote, kept for a test.
private final class Lines: Sendable {
    private let lines = Lock<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    func append(_ line: String) { lines.withLock { $0.append(line) } }
}

struct LogTests {
    private func logger(_ lines: Lines, level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: "swift-multipeer") { LineLogHandler(label: $0, write: lines.append) }
        logger.logLevel = level
        return logger
    }

    @Test func levelsParseByNameAndOrder() {
        #expect(LogLevel(name: "INFO") == .info && LogLevel(name: "warn") == .warning && LogLevel(name: "none") == .off)
        #expect(LogLevel(name: "verbose") == nil)
        #expect(LogLevel.error < .warning && LogLevel.debug < .trace)
        #expect(LogLevel.allCases.allSatisfy { LogLevel(name: $0.description) == $0 })
        #expect(LogLevel.off.loggerLevel == nil && LogLevel.trace.loggerLevel == .trace)
    }

    @Test func linesKeepTheFormatWithTheAreaAndTheMetadataAfterTheMessage() throws {
        let lines = Lines()
        let log = logger(lines).area(.session)
        log.info("invitation to 'Beta': accepted", metadata: ["peer": "Beta", "fingerprint": "SHA256:ab"])
        let line = try #require(lines.all.first)
        // HH:MM:SS.mmm, then the level and the area as before, then the metadata sorted by key.
        let stamp = line.prefix(12)
        #expect(stamp.count == 12 && stamp.filter { $0 == ":" }.count == 2 && stamp.dropFirst(8).first == ".")
        #expect(
            line.dropFirst(12) == " info session: invitation to 'Beta': accepted fingerprint=SHA256:ab peer=Beta\n",
            "\(line)")
    }

    @Test func aMessageIsOnlyBuiltWhenItsLevelIsOn() {
        let lines = Lines()
        let log = logger(lines, level: .warning)
        var built = 0
        func expensive() -> String {
            built += 1
            return "never"
        }
        log.debug("\(expensive())")
        log.warning("kept")
        #expect(built == 0)
        #expect(lines.all.count == 1)
    }

    @Test func withoutABackendOrMULTIPEER_LOGNothingIsWritten() {
        // Without MULTIPEER_LOG the fallback is the logger that writes nothing.
        if MultipeerLogging.environmentLevel == .off {
            #expect(MultipeerLogging.fallback.handler is SwiftLogNoOpLogHandler)
        }
        #expect(MultipeerLogging.lines(.off).handler is SwiftLogNoOpLogHandler)
        #expect(MultipeerLogging.lines(.debug).handler is LineLogHandler)
        #expect(MultipeerLogging.lines(.debug).logLevel == .debug)
    }

    @Test func controlCharactersFromPeersAreEscapedInMessagesAndMetadata() throws {
        let forged = "Bob\n12:00:00.000 info session: forged\u{1b}[2J\u{9b}1m\u{2028}"
        let escaped = ControlCharacters.escaped(forged)
        #expect(!escaped.unicodeScalars.contains { ControlCharacters.isControl($0) }, "\(escaped)")
        #expect(escaped.hasPrefix("Bob\\u{a}12:00:00.000"))
        let lines = Lines()
        logger(lines).area(.discovery).info("found '\(forged)'", metadata: ["peer": "\(forged)"])
        let line = try #require(lines.all.first)
        #expect(line.filter { $0 == "\n" }.count == 1 && line.hasSuffix("\n"))
        #expect(!line.dropLast().unicodeScalars.contains { ControlCharacters.isControl($0) }, "\(line)")
    }
}
