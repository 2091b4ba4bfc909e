/// One address assigned to a network interface, with its prefix length.
public struct InterfaceAddress: Hashable, Sendable {
    /// The address.
    public var address: IPAddress
    /// The network prefix length in bits (the netmask's leading ones).
    public var prefixLength: Int

    /// Creates an interface address.
    /// - Parameters:
    ///   - address: The address.
    ///   - prefixLength: The prefix length in bits.
    public init(address: IPAddress, prefixLength: Int) {
        self.address = address
        self.prefixLength = prefixLength
    }
}
