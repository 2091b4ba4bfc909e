/// An IP address family.
public enum AddressFamily: Sendable {
    /// IPv4 (`AF_INET`).
    case ipv4
    /// IPv6 (`AF_INET6`).
    case ipv6
}
