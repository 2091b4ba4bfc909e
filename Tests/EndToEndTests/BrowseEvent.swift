import Foundation

/// One JSON line printed by `multipeer browse --json` or `scripts/interop/zc_browse.py`.
struct BrowseEvent: Decodable, Sendable, Equatable {
    /// `found`, `updated` or `lost`.
    let event: String
    /// The service instance name (without the service type).
    let name: String
    /// TXT record entries.
    let info: [String: String]?
    /// The service port.
    let port: Int?
    /// The addresses the service resolved to.
    let addresses: [String]?
    /// The interface the event was seen on (our CLI only).
    let interface: String?

    /// Parses one output line; nil for lines that are not a browse event.
    init?(line: String) {
        guard line.hasPrefix("{"), let event = try? JSONDecoder().decode(Self.self, from: Data(line.utf8)) else {
            return nil
        }
        self = event
    }

    /// Parses every event in a process's output.
    static func parse(_ lines: [String]) -> [BrowseEvent] { lines.compactMap { BrowseEvent(line: $0) } }
}
