internal import Foundation
internal import Glibc
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

extension RelayConfiguration {
    /// The most bytes of a password file read.
    static let maximumPasswordFileSize = 4096

    /// A configuration from the words a user writes (the tool's `--relay`, `--relay-user`,
    /// `--relay-password-file`, or the environment's `MULTIPEER_RELAY`, `MULTIPEER_RELAY_USER`,
    /// `MULTIPEER_RELAY_PASSWORD_FILE`).
    /// - Parameters:
    ///   - relay: `HOST:PORT` (`[IPv6]:PORT`; a host name is resolved now; port 3478 when none is given).
    ///   - username: The user name.
    ///   - passwordFile: A file whose first line is the password, readable by its owner only.
    /// - Throws: ``RelayError`` with `invalidConfiguration` saying which word is wrong.
    public init(relay: String, username: String?, passwordFile: String?) throws(RelayError) {
        guard let username, !username.isEmpty else {
            throw RelayError(.invalidConfiguration, "a relay needs a user name (--relay-user, MULTIPEER_RELAY_USER)")
        }
        guard let passwordFile else {
            throw RelayError(
                .invalidConfiguration,
                "a relay needs a password file (--relay-password-file, MULTIPEER_RELAY_PASSWORD_FILE)")
        }
        let server = try Self.serverAddress(relay)
        let password = try Self.readPassword(passwordFile)
        self.init(server: server, username: username, password: password)
        try validate()
    }

    /// Parses `HOST:PORT`, resolving a host name (the first address it has).
    static func serverAddress(_ text: String) throws(RelayError) -> SocketAddress {
        if let address = try? WideAreaConfiguration.serverAddress(text, defaultPort: 3478) { return address }
        var host = Substring(text)
        var port: UInt16 = 3478
        if let colon = text.lastIndex(of: ":") {
            guard let value = UInt16(text[text.index(after: colon)...]), value != 0 else {
                throw RelayError(.invalidConfiguration, "'\(text)' has no valid port after the host")
            }
            port = value
            host = text[..<colon]
        }
        guard !host.isEmpty, host.utf8.count <= 253 else {
            throw RelayError(.invalidConfiguration, "'\(text)' is not HOST:PORT")
        }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(String(host), nil, &hints, &result)
        defer { if let result { freeaddrinfo(result) } }
        guard status == 0, let first = result else {
            throw RelayError(
                .invalidConfiguration,
                "cannot resolve the relay's host '\(host)': \(String(cString: gai_strerror(status)))")
        }
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let current = entry {
            if let address = current.pointee.ai_addr, let ip = Self.ipAddress(address) {
                return SocketAddress(ip, port: port)
            }
            entry = current.pointee.ai_next
        }
        throw RelayError(.invalidConfiguration, "the relay's host '\(host)' has no address")
    }

    /// The IP address of a `sockaddr` that getaddrinfo gave.
    private static func ipAddress(_ address: UnsafeMutablePointer<sockaddr>) -> IPAddress? {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin_addr) { IPv4Address(bytes: $0).map(IPAddress.v4) }
            }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { pointer in
                withUnsafeBytes(of: pointer.pointee.sin6_addr) { IPv6Address(bytes: $0).map(IPAddress.v6) }
            }
        default:
            return nil
        }
    }

    /// The first line of a password file that only its owner can read.
    static func readPassword(_ path: String) throws(RelayError) -> String {
        switch SecretFile.read(path, what: "relay password file", maximumSize: maximumPasswordFileSize) {
        case .failure(let refusal):
            throw RelayError(.invalidConfiguration, refusal.reason)
        case .success(let text):
            guard let line = text.split(whereSeparator: { $0.isNewline }).first.map({ String($0) }), !line.isEmpty
            else {
                throw RelayError(.invalidConfiguration, "the relay password file \(path) holds no password line")
            }
            return line
        }
    }
}
