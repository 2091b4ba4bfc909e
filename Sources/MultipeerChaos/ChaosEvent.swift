import Foundation

/// One line a chaos peer prints (JSON), and what the driver and the ledger read. Fields are optional so one type
/// carries every kind; `kind` says which are set.
struct ChaosEvent: Codable, Sendable, Equatable {
    /// What happened: see ``Kind``.
    var kind: String
    /// Wall-clock time in seconds since 1970 (all processes share the machine's clock).
    var time: Double = Date().timeIntervalSince1970
    /// The other peer's display name.
    var peer: String?
    /// The sender's incarnation (on `received`), or the peer's own (on `ready`).
    var incarnation: Int?
    /// Application sequence numbers (per sender incarnation and receiver, from 1).
    var sequences: [Int]?
    /// The session's numbers `send` returned, pairwise with `sequences` (on `sent`).
    var numbers: [UInt64]?
    /// A state (`connected`, `reconnecting`, `notConnected`) or a file's outcome.
    var state: String?
    /// The session's reason code (`left`, `connectionLost`...) and sentence.
    var code: String?
    var reason: String?
    /// A file's name, SHA-256 (hex), size and where it landed.
    var name: String?
    var sha256: String?
    var size: Int64?
    var path: String?

    enum Kind {
        /// The peer runs (its incarnation, its resource folder in `path`).
        static let ready = "ready"
        /// Messages queued for `peer`: `sequences[i]` got the session's number `numbers[i]`.
        static let sent = "sent"
        /// Messages `send` refused for `peer` (not connected...), never numbered.
        static let sendFailed = "sendFailed"
        /// Messages from `peer`'s incarnation `incarnation`, in the order the application got them.
        static let received = "received"
        /// Messages to `peer` the session reported lost (`sequences`, mapped back from its numbers).
        static let undelivered = "undelivered"
        /// `peer`'s state changed (`state`, `code`, `reason`).
        static let state = "state"
        /// A file to `peer` arrived verified (`sha256`) or failed (`reason`): `state` is `sent` or `failed`.
        static let fileSent = "fileSent"
        /// A file from `peer` started arriving.
        static let fileStarted = "fileStarted"
        /// A file from `peer` arrived (`path`, `sha256`) or failed (`reason`): `state` is `received` or `failed`.
        static let fileReceived = "fileReceived"
        /// The reader stopped (`state` `stalled`) or went on (`reading`).
        static let reader = "reader"
        /// The peer's heap in use (`size`, bytes), every 10 s.
        static let heap = "heap"
        /// A command was not understood.
        static let error = "error"
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()

    /// The event as one line of JSON.
    var line: String { String(decoding: (try? Self.encoder.encode(self)) ?? Data(), as: UTF8.self) }

    /// The event a line holds, or nil for a line that is not one (log output, say).
    init?(line: String) {
        guard line.hasPrefix("{"), let decoded = try? JSONDecoder().decode(ChaosEvent.self, from: Data(line.utf8))
        else { return nil }
        self = decoded
    }

    init(kind: String, peer: String? = nil) {
        self.kind = kind
        self.peer = peer
    }
}
