/// How a ``MulticastDNSStack`` runs: which interfaces, which address families, and the protocol timings.
public struct DiscoveryConfiguration: Sendable, Hashable {
    /// Which interfaces multicast DNS runs on.
    public enum Interfaces: Sendable, Hashable {
        /// Every interface that is up, not loopback, and supports multicast (the default).
        case all
        /// Only the interfaces with these names (loopback included if named).
        case named([String])
        /// Only the loopback interface, IPv4: for demos and tests on one machine; nothing leaves the host.
        case loopbackOnly
    }

    /// Which interfaces to use.
    public var interfaces: Interfaces = .all
    /// Run over IPv4 (224.0.0.251).
    public var useIPv4 = true
    /// Run over IPv6 (ff02::fb).
    public var useIPv6 = true
    /// The first label of our host name; `nil` picks `<hostname>-<6 random hex digits>`, so several
    /// processes on one machine never contend for one host name.
    public var hostLabel: String?
    /// Responder timings and limits.
    public var responder = ResponderConfiguration()
    /// Browser timings and limits.
    public var browser = BrowserConfiguration()
    /// How often interfaces are re-read even without a netlink notification.
    public var interfacePollInterval: Duration = .seconds(5)
    /// Events buffered per advertisement or browser for a consumer that does not keep up; beyond it the
    /// oldest unread events are kept and new ones dropped and counted.
    public var eventBufferLimit = 4096

    /// The defaults: all multicast interfaces, both families, RFC timings.
    public init() {}

    /// A configuration pinned to the named interfaces.
    public static func interfaces(_ names: [String]) -> DiscoveryConfiguration {
        var configuration = DiscoveryConfiguration()
        configuration.interfaces = names.isEmpty ? .all : .named(names)
        return configuration
    }
}
