/// A network interface as the kernel reports it: name, index, state flags and addresses.
public struct NetworkInterface: Hashable, Sendable {
    /// The interface name, such as `"eth0"`.
    public var name: String
    /// The kernel's interface index (what multicast membership and IPv6 zones use).
    public var index: UInt32
    /// `IFF_UP`: administratively up.
    public var isUp: Bool
    /// `IFF_RUNNING`: operationally up (carrier present).
    public var isRunning: Bool
    /// `IFF_LOOPBACK`.
    public var isLoopback: Bool
    /// `IFF_MULTICAST`.
    public var supportsMulticast: Bool
    /// IPv4 and IPv6 addresses, sorted.
    public var addresses: [InterfaceAddress]

    /// Creates an interface value.
    /// - Parameters:
    ///   - name: The interface name.
    ///   - index: The interface index.
    ///   - isUp: Administratively up.
    ///   - isRunning: Operationally up.
    ///   - isLoopback: A loopback interface.
    ///   - supportsMulticast: Multicast capable.
    ///   - addresses: Assigned addresses.
    public init(
        name: String, index: UInt32, isUp: Bool, isRunning: Bool, isLoopback: Bool, supportsMulticast: Bool,
        addresses: [InterfaceAddress]
    ) {
        self.name = name
        self.index = index
        self.isUp = isUp
        self.isRunning = isRunning
        self.isLoopback = isLoopback
        self.supportsMulticast = supportsMulticast
        self.addresses = addresses
    }
}
