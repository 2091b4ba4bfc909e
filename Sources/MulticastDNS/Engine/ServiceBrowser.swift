internal import MultipeerIO

/// A running browse, returned by ``MulticastDNSStack/browse(_:)``.
public final class ServiceBrowser: Sendable {
    let engine: MulticastDNSEngine
    /// The service type browsed.
    public let serviceType: ServiceType
    /// Found, updated and lost events, in order.
    public let events: AsyncStream<ServiceBrowserEvent>
    private let id = Lock<Int?>(nil)
    private let stopped = Lock(false)

    init(engine: MulticastDNSEngine, type: ServiceType, events: AsyncStream<ServiceBrowserEvent>) {
        self.engine = engine
        serviceType = type
        self.events = events
    }

    func attach(_ browserID: Int) {
        let stopNow = stopped.withLock { $0 }
        id.withLock { $0 = browserID }
        if stopNow { engine.removeBrowser(browserID) }
    }

    /// The instances found and not lost so far.
    public func services() async -> [DiscoveredService] {
        let engine = engine
        return (try? await engine.loop.submit { self.id.withLock { $0 }.map(engine.services(of:)) ?? [] }) ?? []
    }

    /// Stops querying and ends ``events``. Idempotent.
    public func stop() {
        stopped.withLock { $0 = true }
        let engine = engine
        engine.loop.execute {
            if let browserID = self.id.withLock({ $0 }) { engine.removeBrowser(browserID) }
        }
    }
}

/// What a browser reports.
public enum ServiceBrowserEvent: Sendable, Hashable {
    /// A new instance: name, port, TXT record and at least one address are known.
    case found(DiscoveredService)
    /// An instance changed its TXT record, port, host or addresses.
    case updated(DiscoveredService)
    /// An instance said goodbye, expired, or stopped answering within the lost timeout.
    case lost(DiscoveredService)

    /// The service the event is about.
    public var service: DiscoveredService {
        switch self {
        case .found(let s), .updated(let s), .lost(let s): s
        }
    }
}

/// A service instance found by a browser.
public struct DiscoveredService: Sendable, Hashable {
    /// The instance name, such as `Alice`.
    public var name: String
    /// The service type.
    public var serviceType: ServiceType
    /// The TXT record.
    public var txt: TXTRecord
    /// The port.
    public var port: UInt16
    /// The host name from the SRV record, such as `alice-laptop-1a2b3c.local.`.
    public var hostName: String
    /// The host's addresses with the interface each was learnt on.
    public var addresses: [DiscoveredAddress]
    /// Names of the interfaces the instance was seen on.
    public var interfaces: [String]

    /// Creates a found service from its parts (wide-area DNS-SD, which finds services without a link).
    package init(
        name: String, serviceType: ServiceType, txt: TXTRecord, port: UInt16, hostName: String,
        addresses: [DiscoveredAddress], interfaces: [String]
    ) {
        self.name = name
        self.serviceType = serviceType
        self.txt = txt
        self.port = port
        self.hostName = hostName
        self.addresses = addresses
        self.interfaces = interfaces
    }

    init(_ instance: DiscoveredInstance, type: ServiceType) {
        name = instance.name
        serviceType = type
        txt = TXTRecord(decoding: instance.txt)
        port = instance.port
        hostName = instance.hostName.description
        addresses = instance.addresses
        var names: [String] = []
        for link in instance.links where !names.contains(link.interfaceName) { names.append(link.interfaceName) }
        interfaces = names
    }
}
