public import Logging
public import MultipeerIO

/// Multicast DNS service discovery on this host: advertise services and browse for them.
///
/// A stack binds UDP port 5353 on IPv4 and IPv6 (shared with avahi-daemon or any other stack through
/// `SO_REUSEADDR`/`SO_REUSEPORT`), joins the mDNS groups on the configured interfaces, follows interfaces
/// as they come and go, and runs one responder and any number of browsers on a single event-loop thread.
///
/// ```swift
/// let stack = try await MulticastDNSStack()
/// let ad = try await stack.advertise(ServiceType("chat"), name: "Alice", port: 7000, txt: ["v": "1"])
/// for await event in stack.browse(ServiceType("chat")).events { print(event) }
/// ```
public final class MulticastDNSStack: Sendable {
    let engine: MulticastDNSEngine
    private let ownsLoop: Bool
    private let isShutDown = Lock(false)

    /// Opens the sockets and starts following interfaces.
    /// - Parameters:
    ///   - configuration: interfaces, families and timings.
    ///   - loop: an event loop to run on; `nil` starts a private one that ``shutdown()`` stops.
    ///   - logger: where discovery logs (metadata `area` = `discovery`); `MultipeerLogging.fallback` by default,
    ///     which writes nothing unless `MULTIPEER_LOG` names a level.
    /// - Throws: ``DiscoveryError`` with code `.socket` if the sockets cannot be opened, or `.invalidHostLabel`.
    public init(
        configuration: DiscoveryConfiguration = .init(), loop: EventLoop? = nil,
        logger: Logger = MultipeerLogging.fallback
    ) async throws(DiscoveryError) {
        let theLoop: EventLoop
        if let loop {
            theLoop = loop
            ownsLoop = false
        } else {
            do {
                theLoop = try EventLoop(name: "multipeer-mdns")
            } catch {
                throw .socket(error, while: "starting the discovery event loop")
            }
            ownsLoop = true
        }
        let engine = try MulticastDNSEngine(loop: theLoop, configuration: configuration, logger: logger)
        self.engine = engine
        let result: Result<Void, DiscoveryError>
        do {
            result = try await theLoop.submit {
                do throws(DiscoveryError) {
                    try engine.open()
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
        } catch {
            result = .failure(.shutDown())
        }
        if case .failure(let error) = result {
            if ownsLoop { theLoop.shutdown() }
            throw error
        }
    }

    /// The configuration in use.
    public var configuration: DiscoveryConfiguration { engine.configuration }

    /// Advertises a service instance until ``ServiceAdvertisement/stop()``.
    ///
    /// The name is probed first (RFC 6762 section 8); if another host owns it the advertisement is renamed
    /// (`"Alice (2)"`) and ``AdvertisementEvent/renamed(from:to:)`` reports it.
    /// - Parameters:
    ///   - type: the service type.
    ///   - name: the instance name: 1-63 bytes of UTF-8 without control characters.
    ///   - port: the port the service listens on.
    ///   - txt: key/value pairs published with the service.
    /// - Returns: a handle that reports events, updates the TXT record and stops the advertisement.
    /// - Throws: ``DiscoveryError`` with code `.invalidService` naming the rule the name breaks,
    ///   `.invalidServiceName`, `.tooManyServices`, or `.shutDown`.
    public func advertise(_ type: ServiceType, name: String, port: UInt16, txt: TXTRecord = TXTRecord())
        async throws(DiscoveryError) -> ServiceAdvertisement
    {
        do {
            try InstanceName.validate(name)
        } catch {
            throw .invalidService(error)
        }
        let service = ResponderStateMachine.Service(
            instanceName: name, serviceType: type.domainName, port: port, txt: txt.strings)
        let (stream, continuation) = AsyncStream<AdvertisementEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(engine.configuration.eventBufferLimit))
        let currentName = SharedName(name)
        let engine = engine
        let result: Result<ResponderStateMachine.ServiceID, DiscoveryError>
        do {
            result = try await engine.loop.submit {
                guard !engine.isClosed else { return .failure(.shutDown()) }
                do throws(ResponderError) {
                    return .success(try engine.register(service, name: currentName, continuation: continuation))
                } catch {
                    return .failure(.refused(error))
                }
            }
        } catch {
            throw .shutDown()
        }
        switch result {
        case .success(let id):
            return ServiceAdvertisement(
                engine: engine, id: id, type: type, port: port, events: stream, name: currentName)
        case .failure(let error):
            continuation.finish()
            throw error
        }
    }

    /// Starts browsing for instances of `type`; stop with ``ServiceBrowser/stop()``.
    public func browse(_ type: ServiceType) -> ServiceBrowser {
        let (stream, continuation) = AsyncStream<ServiceBrowserEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(engine.configuration.eventBufferLimit))
        let browser = ServiceBrowser(engine: engine, type: type, events: stream)
        if isShutDown.withLock({ $0 }) {
            continuation.finish()
            return browser
        }
        let engine = engine
        let accepted = engine.loop.execute {
            browser.attach(engine.addBrowser(type, continuation: continuation))
        }
        if !accepted { continuation.finish() }
        return browser
    }

    /// Counters of what the stack did: packets, malformed input, rate limiting, links in use.
    public func statistics() async -> DiscoveryStatistics {
        let engine = engine
        return (try? await engine.loop.submit { engine.snapshotStatistics() }) ?? engine.counters.withLock { $0 }
    }

    /// Closes the sockets and ends every stream; advertisements not stopped first send no goodbye.
    /// Stops the event loop if the stack started it. Idempotent.
    public func shutdown() async {
        let first = isShutDown.withLock { done in
            defer { done = true }
            return !done
        }
        guard first else { return }
        let engine = engine
        _ = try? await engine.loop.submit { engine.close() }
        if ownsLoop { engine.loop.shutdown() }
    }
}

/// Counters of a ``MulticastDNSStack``.
public struct DiscoveryStatistics: Sendable, Hashable {
    /// Well-formed packets received on our links.
    public var packetsReceived = 0
    /// Packets dropped because they did not decode; see `lastMalformed`.
    public var packetsMalformed = 0
    /// Packets that arrived on an interface we do not use.
    public var packetsIgnored = 0
    /// Packets sent.
    public var packetsSent = 0
    /// Bytes sent.
    public var bytesSent = 0
    /// Packets the kernel refused because its buffer was full.
    public var sendsDropped = 0
    /// Sends that failed with an error; see `lastError`.
    public var sendErrors = 0
    /// Events dropped because a consumer did not keep up.
    public var eventsDropped = 0
    /// Records cached by all browsers.
    public var cachedRecords = 0
    /// The links in use.
    public var links: [MulticastLink] = []
    /// The last malformed packet's source and error.
    public var lastMalformed: String?
    /// The last socket error.
    public var lastError: String?
    /// The responder's counters.
    public var responder = ResponderStateMachine.Statistics()
}
