import Testing

@testable import MultipeerIO

struct LogTests {
    @Test func levelsParseByNameAndOrder() {
        #expect(LogLevel(name: "INFO") == .info && LogLevel(name: "warn") == .warning && LogLevel(name: "none") == .off)
        #expect(LogLevel(name: "verbose") == nil)
        #expect(LogLevel.error < .warning && LogLevel.debug < .trace)
        #expect(LogLevel.allCases.allSatisfy { LogLevel(name: $0.description) == $0 })
    }

    @Test func aMessageIsOnlyBuiltWhenItsLevelIsOn() {
        let saved = Log.level
        defer { Log.level = saved }
        Log.level = .warning
        #expect(Log.isEnabled(.error) && Log.isEnabled(.warning) && !Log.isEnabled(.info))
        var built = 0
        Log.write(
            .debug, "test",
            {
                built += 1; return "never"
            }())
        #expect(built == 0)
        Log.level = .off
        #expect(!Log.isEnabled(.error))
    }

    @Test func controlCharactersFromPeersAreEscaped() {
        let escaped = Log.escaped("Bob\n12:00:00.000 info session: forged\u{1b}[2J\u{9b}1m\u{2028}")
        #expect(!escaped.unicodeScalars.contains { Log.isControl($0) }, "\(escaped)")
        #expect(escaped.hasPrefix("Bob\\u{a}12:00:00.000"))
    }
}
