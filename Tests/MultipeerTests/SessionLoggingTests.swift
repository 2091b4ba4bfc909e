import Logging
import MultipeerIO
import Testing

@testable import Multipeer

/// What an application's `LogHandler` receives: every event, with its level and metadata. A value, as swift-log
/// asks of handlers (each logger's metadata is its own); the events go to one shared store.
struct CapturingLogHandler: LogHandler {
    struct Event: Sendable {
        let level: Logger.Level
        let message: String
        let metadata: [String: String]
    }

    final class Store: Sendable {
        private let events = Lock<[Event]>([])
        var all: [Event] { events.withLock { $0 } }
        func append(_ event: Event) { events.withLock { $0.append(event) } }
    }

    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]
    let store: Store

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let more = event.metadata { all.merge(more) { $1 } }
        store.append(Event(level: event.level, message: "\(event.message)", metadata: all.mapValues { "\($0)" }))
    }
}

@Suite("The application's logger")
struct SessionLoggingTests {
    @Test func anApplicationsLoggerGetsEachAreaWithThePeerAsMetadata() async throws {
        let handler = CapturingLogHandler.Store()
        let logger = Logger(label: "the-app") { _ in CapturingLogHandler(store: handler) }
        let alice = try await SessionNode("Alice", logger: logger)
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        // The handler is the application's: the level and label are its own, the library adds its metadata.
        #expect(await waitUntil(.seconds(30)) { handler.all.contains { $0.message.contains("invitation to 'Bob'") } })
        let invitation = try #require(handler.all.first { $0.message.contains("invitation to 'Bob'") })
        #expect(invitation.level == .info)
        #expect(invitation.metadata["area"] == "session")
        #expect(invitation.metadata["peer"] == "Bob")
        #expect(invitation.metadata["fingerprint"] == "\(bob.identity.fingerprint)")
        let connected = try #require(handler.all.first { $0.message.contains("connected to 'Bob'") })
        #expect(connected.metadata["area"] == "connection" && connected.metadata["peer"] == "Bob")
        // Bob's node was given no logger: nothing of his reaches Alice's handler.
        #expect(!handler.all.contains { $0.message.contains("invitation to 'Alice'") })
        await alice.session.disconnect()
        await bob.session.disconnect()
    }

    @Test func onlyTheApplicationsLevelAndAboveReachItsHandler() async throws {
        let handler = CapturingLogHandler.Store()
        var logger = Logger(label: "the-app") { _ in CapturingLogHandler(store: handler) }
        logger.logLevel = .warning
        let alice = try await SessionNode("Alice", logger: logger)
        let bob = try await SessionNode("Bob")
        bob.acceptAll()
        #expect(await alice.invite(bob) == .accepted)
        await alice.session.disconnect()
        await bob.session.disconnect()
        #expect(!handler.all.contains { $0.level < .warning }, "\(handler.all.map(\.message))")
    }
}
