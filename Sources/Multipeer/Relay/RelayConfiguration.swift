public import MultipeerIO

/// A TURN relay (RFC 8656 with RFC 6062 TCP relaying, such as coturn) for peers that cannot reach each other:
/// a network that listens holds a TCP allocation there and advertises the relayed address beside its direct ones;
/// a network that dials tries a peer's direct addresses first and its relayed one after, through an allocation
/// of its own on the same relay. The peers' TLS runs end to end through it: the relay carries ciphertext and
/// can neither read nor forge what passes.
public struct RelayConfiguration: Sendable, Hashable {
    /// The relay's address and port (3478 by default for TURN over TCP).
    public var server: SocketAddress
    /// The user name the relay's administrator gave.
    public var username: String
    /// The password (long-term credentials, RFC 8489 section 9.2).
    public var password: String

    /// Configures a relay.
    /// - Parameters:
    ///   - server: The relay's address.
    ///   - username: The user name.
    ///   - password: The password.
    public init(server: SocketAddress, username: String, password: String) {
        self.server = server
        self.username = username
        self.password = password
    }

    /// Checks the settings.
    /// - Throws: ``RelayError`` with `invalidConfiguration` for an empty user name or password, or either longer
    ///   than 512 bytes (RFC 8489's limit for USERNAME is 513).
    public func validate() throws(RelayError) {
        guard !username.isEmpty, username.utf8.count <= 512 else {
            throw RelayError(.invalidConfiguration, "the relay user name must be 1 to 512 bytes")
        }
        guard !password.isEmpty, password.utf8.count <= 512 else {
            throw RelayError(.invalidConfiguration, "the relay password must be 1 to 512 bytes")
        }
        guard server.port != 0 else { throw RelayError(.invalidConfiguration, "the relay needs a port") }
    }

    var clientConfiguration: RelayClient.Configuration {
        RelayClient.Configuration(
            server: server, credentials: TURNClientStateMachine.Credentials(username: username, password: password))
    }
}
