internal import Dispatch
internal import Glibc

/// Turns SIGINT and SIGTERM into an awaitable event instead of killing the process, so commands can
/// send goodbyes before exiting.
final class TerminationSignals: Sendable {
    private let stream: AsyncStream<Int32>
    // Dispatch sources are thread-safe; they are kept only so they stay alive.
    nonisolated(unsafe) private var sources: [any DispatchSourceSignal] = []

    init() {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        self.stream = stream
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
    }

    /// Returns when a signal arrives.
    func wait() async -> Int32 {
        for await number in stream { return number }
        return 0
    }
}

/// A stream of deliveries of one signal, which no longer has its default action.
final class SignalStream: Sendable {
    /// One element per delivery.
    let signals: AsyncStream<Void>
    // Kept only so the dispatch source stays alive; dispatch sources are thread-safe.
    nonisolated(unsafe) private var source: (any DispatchSourceSignal)?

    init(_ number: Int32) {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        signals = stream
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { continuation.yield() }
        source.resume()
        self.source = source
    }
}
