public import MultipeerIO

/// One address a dial tried, and why that attempt did not become the connection.
public struct ConnectionAttempt: Hashable, Sendable, CustomStringConvertible {
    /// The address tried, with its zone for a link-local IPv6 address.
    public let address: SocketAddress
    /// Why the attempt failed.
    public let error: ConnectionError

    /// Creates the record of a failed attempt.
    /// - Parameters:
    ///   - address: The address tried.
    ///   - error: Why it failed.
    public init(address: SocketAddress, error: ConnectionError) {
        self.address = address
        self.error = error
    }

    /// `"ADDRESS: CODE: REASON"`.
    public var description: String { "\(address): \(error.code): \(error.reason)" }
}
