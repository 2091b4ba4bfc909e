extension NetLab {
    /// One simulated machine: a network namespace with one interface on the lab's bridge.
    public struct Host: Sendable, Hashable, CustomStringConvertible {
        /// The host's position in ``NetLab/hosts`` (also the name suffix of its namespace and bridge port).
        public let index: Int
        /// The network namespace, for `ip netns exec` and `ip -n`.
        public let namespace: String
        /// The host's interface on the bridge (always `lab0`).
        public let interfaceName: String
        /// The host's IPv4 address, in 198.18.0.0/15 (without prefix length; the prefix is /24).
        public let ipv4: String
        /// The host's unique local IPv6 address (without prefix length; the prefix is /64), nil if the lab has
        /// no IPv6.
        public let ipv6: String?
        /// The subnet (bridge) the host is on: 0 in a flat lab.
        public let subnet: Int
        /// The router's address on the host's subnet, its default route, in a routed lab.
        public let gateway: String?

        /// A textual representation of this host.
        public var description: String {
            "host \(index) (\(namespace), \(interfaceName) \(ipv4)\(ipv6.map { " " + $0 } ?? ""))"
        }
    }
}
