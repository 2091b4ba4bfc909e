/// One received UDP datagram with where it came from and where it arrived.
public struct UDPDatagram: Sendable {
    /// The payload (possibly cut short, see `truncated`).
    public var bytes: [UInt8]
    /// The sender's address and port.
    public var source: SocketAddress
    /// The datagram's destination address (from `IP_PKTINFO`/`IPV6_PKTINFO`), such as a multicast group.
    public var destination: IPAddress?
    /// The index of the interface the datagram arrived on; 0 if the kernel did not say.
    public var interfaceIndex: UInt32
    /// `true` if the datagram was larger than the receive buffer and its tail was discarded.
    public var truncated: Bool

    /// Creates a datagram value.
    /// - Parameters:
    ///   - bytes: The payload.
    ///   - source: The sender.
    ///   - destination: The destination address, if known.
    ///   - interfaceIndex: The arrival interface, 0 if unknown.
    ///   - truncated: Whether the payload was cut short.
    public init(
        bytes: [UInt8], source: SocketAddress, destination: IPAddress?, interfaceIndex: UInt32, truncated: Bool
    ) {
        self.bytes = bytes
        self.source = source
        self.destination = destination
        self.interfaceIndex = interfaceIndex
        self.truncated = truncated
    }
}
