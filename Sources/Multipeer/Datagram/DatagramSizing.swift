internal import MultipeerIO

/// How much payload one datagram carries without IP fragmentation.
///
/// Packets are never fragmented by the datagram layer; a message larger than ``maximumPayload(pathMTU:family:)``
/// goes over the connection's reliable TLS stream instead (see ``DatagramFormat``).
enum DatagramSizing {
    /// The path MTU assumed when nothing better is known: the IPv6 minimum MTU, which every IPv6 link carries and
    /// practically every IPv4 path does too. Loopback's MTU of 65,536 is not used unless a caller passes it.
    static let defaultPathMTU = 1_280
    /// Bytes of a UDP header.
    static let udpHeaderLength = 8

    /// Bytes of an IP header without options or extension headers: 20 for IPv4, 40 for IPv6.
    static func ipHeaderLength(_ family: AddressFamily) -> Int {
        switch family {
        case .ipv4: 20
        case .ipv6: 40
        }
    }

    /// The largest payload whose packet fits in one IP packet of `pathMTU` bytes.
    ///
    /// `pathMTU − IP header − 8 (UDP) − 36 (datagram overhead)`, at most
    /// ``DatagramFormat/maximumPayloadLength`` and at least 0: 1,216 over IPv4 and 1,196 over IPv6 by default.
    /// - Parameters:
    ///   - pathMTU: The path MTU in bytes (IP header included).
    ///   - family: The IP version the datagrams travel over.
    static func maximumPayload(pathMTU: Int = defaultPathMTU, family: AddressFamily) -> Int {
        let available = pathMTU - ipHeaderLength(family) - udpHeaderLength - DatagramFormat.overhead
        return min(max(0, available), DatagramFormat.maximumPayloadLength)
    }
}
