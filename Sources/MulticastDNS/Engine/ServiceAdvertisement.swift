internal import MultipeerIO

/// A running advertisement, returned by ``MulticastDNSStack/advertise(_:name:port:txt:)``.
public final class ServiceAdvertisement: Sendable {
    let engine: MulticastDNSEngine
    let id: ResponderStateMachine.ServiceID
    /// The service type advertised.
    public let serviceType: ServiceType
    /// The advertised port.
    public let port: UInt16
    /// Registration, rename and stop events, in order.
    public let events: AsyncStream<AdvertisementEvent>
    private let currentName: SharedName

    init(
        engine: MulticastDNSEngine, id: ResponderStateMachine.ServiceID, type: ServiceType, port: UInt16,
        events: AsyncStream<AdvertisementEvent>, name: SharedName
    ) {
        self.engine = engine
        self.id = id
        serviceType = type
        self.port = port
        self.events = events
        currentName = name
    }

    /// The instance name in use now; it changes if a conflict forced a rename.
    public var name: String { currentName.value }

    /// Waits until the name is claimed and first announced; returns the name (perhaps renamed).
    public func registered() async -> String {
        let engine = engine
        let id = id
        return await withCheckedContinuation { waiter in
            // A stopped loop never runs the closure: answer at once with the name as it stands.
            if !engine.loop.execute({ engine.waitUntilRegistered(id, waiter: waiter) }) {
                waiter.resume(returning: self.name)
            }
        }
    }

    /// Replaces the TXT record; the new one is announced at once (RFC 6762 section 8.4).
    public func updateTXT(_ txt: TXTRecord) {
        let engine = engine
        let id = id
        let strings = txt.strings
        engine.loop.execute { engine.updateTXT(strings, for: id) }
    }

    /// Sends goodbye packets (TTL 0) and waits until they went out. Idempotent.
    public func stop() async {
        let engine = engine
        let id = id
        await withCheckedContinuation { waiter in
            // After shutdown the sockets are closed and no goodbye can go out: nothing to wait for.
            if !engine.loop.execute({ engine.unregister(id, waiter: waiter) }) { waiter.resume() }
        }
    }
}

/// What happens to an advertisement.
public enum AdvertisementEvent: Sendable, Hashable {
    /// The name was claimed and announced.
    case registered(name: String)
    /// Another host owns the name; the service now uses `to`.
    case renamed(from: String, to: String)
    /// Another host owns our host name; address records now use `to`.
    case hostRenamed(from: String, to: String)
    /// Goodbyes were sent; the advertisement is over.
    case stopped
}

/// The current instance name, written on the loop thread and read by any thread.
final class SharedName: Sendable {
    private let storage: Lock<String>
    init(_ name: String) { storage = Lock(name) }
    var value: String {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}
