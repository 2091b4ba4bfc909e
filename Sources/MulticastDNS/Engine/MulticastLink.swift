public import MultipeerIO

/// One interface and address family on which multicast DNS runs: packets arrive on a link and answers
/// leave on the same link.
public struct MulticastLink: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The kernel's interface index.
    public var interfaceIndex: UInt32
    /// The interface name, such as `eth0`.
    public var interfaceName: String
    /// `true` for the IPv6 group ff02::fb, `false` for 224.0.0.251.
    public var isIPv6: Bool

    /// Creates a link.
    public init(interfaceIndex: UInt32, interfaceName: String, isIPv6: Bool) {
        self.interfaceIndex = interfaceIndex
        self.interfaceName = interfaceName
        self.isIPv6 = isIPv6
    }

    public var description: String { "\(interfaceName)/\(isIPv6 ? "IPv6" : "IPv4")" }

    public static func < (a: MulticastLink, b: MulticastLink) -> Bool {
        (a.interfaceIndex, a.isIPv6 ? 1 : 0) < (b.interfaceIndex, b.isIPv6 ? 1 : 0)
    }
}

/// The far end of a unicast packet.
public struct MDNSEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// The peer's address.
    public var address: IPAddress
    /// The peer's UDP port; 5353 for a full mDNS querier, anything else for a legacy one.
    public var port: UInt16

    /// Creates an endpoint.
    public init(address: IPAddress, port: UInt16) {
        self.address = address
        self.port = port
    }

    public var description: String { "\(address):\(port)" }
}

/// Where an outgoing packet goes.
public enum MDNSDestination: Hashable, Sendable {
    /// To the mDNS group of the link.
    case multicast(MulticastLink)
    /// To one peer, out of the given link.
    case unicast(MDNSEndpoint, MulticastLink)

    /// The link the packet leaves on.
    public var link: MulticastLink {
        switch self {
        case .multicast(let link): link
        case .unicast(_, let link): link
        }
    }
}

/// The mDNS UDP port (RFC 6762 section 3).
public let mdnsPort: UInt16 = 5353

/// A small, fast, seedable generator so state machines are deterministic under test.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator from a seed.
    public init(seed: UInt64) { state = seed }

    /// Creates a generator seeded from the system's generator.
    public init() {
        var system = SystemRandomNumberGenerator()
        state = system.next()
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniformly random duration in `range`, to millisecond precision.
    mutating func milliseconds(in range: ClosedRange<Int>) -> Duration {
        .milliseconds(Int.random(in: range, using: &self))
    }
}
