/// An IP address, port and (for IPv6) zone: the endpoint of a UDP or TCP socket.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    /// The IP address.
    public var address: IPAddress
    /// The port, in host order.
    public var port: UInt16
    /// The IPv6 zone as an interface index; 0 means none. Ignored for IPv4.
    public var scopeID: UInt32

    /// Creates a socket address.
    /// - Parameters:
    ///   - address: The IP address.
    ///   - port: The port in host order.
    ///   - scopeID: The IPv6 zone (interface index), 0 for none.
    public init(_ address: IPAddress, port: UInt16, scopeID: UInt32 = 0) {
        self.address = address
        self.port = port
        self.scopeID = scopeID
    }

    /// The address family of `address`.
    public var family: AddressFamily {
        switch address {
        case .v4: .ipv4
        case .v6: .ipv6
        }
    }

    /// `"192.0.2.1:5353"`, `"[fe80::1%2]:5353"`.
    public var description: String {
        switch address {
        case .v4(let v4):
            return "\(v4):\(port)"
        case .v6(let v6):
            let zone = scopeID == 0 ? "" : "%\(scopeID)"
            return "[\(v6)\(zone)]:\(port)"
        }
    }
}
