/// How a dial to a peer with several addresses paces its attempts and how long it may take in all
/// (RFC 8305, Happy Eyeballs version 2).
public struct DialConfiguration: Hashable, Sendable {
    /// How long an attempt may stay pending before the next address is tried alongside it.
    ///
    /// 250 ms: RFC 8305 section 8's recommended value. A LAN peer answers (or refuses) within a few
    /// milliseconds, so a quarter second only passes when an address is dead; waiting longer delays the
    /// connection, waiting less starts attempts that a working address would have made unnecessary.
    public var connectionAttemptDelay: Duration
    /// The most time the whole dial may take, from the first attempt to the established connection.
    ///
    /// 15 s: room for the peer's 10 s handshake timeout after a few addresses were tried in turn, and the bound
    /// on how long a caller waits for a peer whose every address is dead (a TCP connect to a silent address
    /// would otherwise last the kernel's two minutes of retries).
    public var timeout: Duration

    /// The smallest ``connectionAttemptDelay`` accepted: RFC 8305 section 5 says the delay MUST NOT be less
    /// than 10 ms, so a dial never floods a network with simultaneous attempts.
    public static let minimumConnectionAttemptDelay = Duration.milliseconds(10)

    /// Creates a configuration.
    /// - Parameters:
    ///   - connectionAttemptDelay: The pause before the next address is tried; 250 ms by default.
    ///   - timeout: The bound on the whole dial; 15 s by default.
    public init(connectionAttemptDelay: Duration = .milliseconds(250), timeout: Duration = .seconds(15)) {
        self.connectionAttemptDelay = connectionAttemptDelay
        self.timeout = timeout
    }

    /// Checks the rules on each value.
    /// - Throws: ``ConnectionError`` with code ``ConnectionError/Code/invalidConfiguration`` naming the rule.
    func validate() throws(ConnectionError) {
        guard connectionAttemptDelay >= Self.minimumConnectionAttemptDelay else {
            throw ConnectionError.invalidConfiguration(
                "a connection attempt delay of \(connectionAttemptDelay) is below RFC 8305's minimum of "
                    + "\(Self.minimumConnectionAttemptDelay)")
        }
        guard timeout > .zero else {
            throw ConnectionError.invalidConfiguration("a dial timeout must be positive, not \(timeout)")
        }
    }
}
