/// The transport protocol label of a DNS-SD service type (RFC 6763 section 7).
public enum ServiceTransport: String, Sendable, Hashable {
    /// `_tcp`: the service runs over TCP.
    case tcp
    /// `_udp`: anything else (RFC 6763 section 7 uses `_udp` for every non-TCP protocol).
    case udp

    /// The label as it appears in names: `_tcp` or `_udp`.
    public var label: String { "_" + rawValue }
}
