public import MultipeerIO

/// A resolved service instance as a browser last saw it.
public struct DiscoveredInstance: Hashable, Sendable {
    /// The instance label, such as `Alice's Laptop`.
    public var name: String
    /// The full name, such as `Alice's Laptop._chat._tcp.local.`.
    public var fullName: DNSName
    /// The host name from the SRV record.
    public var hostName: DNSName
    /// The port from the SRV record.
    public var port: UInt16
    /// The TXT strings in wire form.
    public var txt: [[UInt8]]
    /// Addresses of the host and the link each was learnt on, sorted, without duplicates.
    public var addresses: [DiscoveredAddress]
    /// Every link the instance was seen on, sorted.
    public var links: [MulticastLink]

    /// Creates a snapshot.
    public init(
        name: String, fullName: DNSName, hostName: DNSName, port: UInt16, txt: [[UInt8]],
        addresses: [DiscoveredAddress], links: [MulticastLink]
    ) {
        self.name = name
        self.fullName = fullName
        self.hostName = hostName
        self.port = port
        self.txt = txt
        self.addresses = addresses
        self.links = links
    }
}

extension DiscoveredInstance {
    /// `true` if the two differ at most in which address families the instance was seen on.
    func looksTheSame(as other: DiscoveredInstance) -> Bool {
        name == other.name && fullName == other.fullName && hostName == other.hostName && port == other.port
            && txt == other.txt && addresses == other.addresses
            && Set(links.map(\.interfaceIndex)) == Set(other.links.map(\.interfaceIndex))
    }
}

/// An address of a discovered host and where it was learnt.
public struct DiscoveredAddress: Hashable, Sendable, Comparable {
    /// The address.
    public var address: IPAddress
    /// The interface index it was learnt on (the zone for link-local IPv6 addresses).
    public var interfaceIndex: UInt32
    /// The interface name it was learnt on.
    public var interfaceName: String

    /// Creates an address entry.
    public init(address: IPAddress, interfaceIndex: UInt32, interfaceName: String) {
        self.address = address
        self.interfaceIndex = interfaceIndex
        self.interfaceName = interfaceName
    }

    public static func < (a: DiscoveredAddress, b: DiscoveredAddress) -> Bool {
        (a.address, a.interfaceIndex) < (b.address, b.interfaceIndex)
    }
}

/// What a browser reports.
public enum BrowserEvent: Hashable, Sendable {
    /// A new instance was resolved: name, SRV, TXT and at least one address are known.
    case found(DiscoveredInstance)
    /// A resolved instance changed its TXT record, port, host or addresses.
    case updated(DiscoveredInstance)
    /// The instance said goodbye, its records expired, or it stopped answering within the lost timeout.
    case lost(DiscoveredInstance)
}
