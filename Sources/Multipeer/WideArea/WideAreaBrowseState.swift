internal import MulticastDNS
internal import MultipeerIO

/// What a wide-area browser knows of one service type in one domain, and the events each poll's results make:
/// found, updated and lost, exactly as multicast DNS reports them. Pure: the poll's I/O happens elsewhere.
///
/// Rules:
/// - An instance is present when the type's PTR lists it and its SRV, TXT and at least one address resolved.
/// - A poll whose PTR question failed (the server did not answer) changes nothing but leases: what was found
///   stays found until its lease runs out, so a server that is briefly away does not make every peer flap.
/// - An instance whose records could not be fetched this time (a timeout) keeps what was known of it.
/// - An instance whose TXT names a lease (`mp.until`, Unix seconds) that ran out more than ``leaseGrace`` ago is
///   absent even while the server still lists it: its peer stopped refreshing (crashed, or lost its network),
///   and DNS servers keep records until someone deletes them.
/// - The lease key is not part of the reported TXT record: a refresh is not an update.
struct WideAreaBrowseState: Sendable {
    /// One resolved instance.
    struct Instance: Hashable, Sendable {
        /// The instance label.
        var label: String
        /// The full instance name.
        var name: DNSName
        /// The SRV target.
        var host: DNSName
        /// The SRV port.
        var port: UInt16
        /// The TXT strings as the server holds them (the lease included).
        var txt: [[UInt8]]
        /// The host's addresses, sorted.
        var addresses: [IPAddress]

        /// The lease's end, in Unix seconds, when the TXT record names one.
        var leaseEnd: UInt64? {
            TXTRecord(decoding: txt).entry(forKey: WideAreaLease.key).flatMap { entry in
                entry.value.flatMap { UInt64(String(decoding: $0, as: UTF8.self)) }
            }
        }

        /// The TXT record without the lease key: what browsers report.
        var reportedTXT: TXTRecord {
            TXTRecord(decoding: txt.filter { !WideAreaLease.isLeaseEntry($0) })
        }

        /// Whether two resolutions differ in anything a browser reports.
        func differs(from other: Instance) -> Bool {
            host != other.host || port != other.port || addresses != other.addresses
                || reportedTXT != other.reportedTXT
        }
    }

    /// The outcome of one poll.
    struct Poll: Sendable {
        /// The instance names the PTR question listed; nil when the question got no answer.
        var listed: [DNSName]?
        /// Instances whose records all resolved.
        var resolved: [DNSName: Instance] = [:]
        /// Listed instances whose records could not be fetched this time (kept as they were).
        var unresolved: Set<DNSName> = []
    }

    /// How long after its lease's end an instance still counts, for clocks that differ between peers.
    static let leaseGrace: UInt64 = 30

    /// The service type.
    let serviceType: ServiceType
    /// The domain, such as `example.org.`, which names the interface addresses were found on.
    let domain: DNSName
    /// The instances reported found and not lost.
    private(set) var present: [DNSName: Instance] = [:]

    init(serviceType: ServiceType, domain: DNSName) {
        self.serviceType = serviceType
        self.domain = domain
    }

    /// Applies a poll's results.
    /// - Parameters:
    ///   - poll: What the poll found.
    ///   - now: Unix seconds, for leases.
    /// - Returns: The events, lost ones first, then found and updated in name order.
    mutating func apply(_ poll: Poll, now: UInt64) -> [ServiceBrowserEvent] {
        var next = present
        if let listed = poll.listed {
            let names = Set(listed)
            for name in present.keys where !names.contains(name) { next[name] = nil }
            for name in listed {
                if let instance = poll.resolved[name] {
                    next[name] = instance
                } else if !poll.unresolved.contains(name) {
                    next[name] = nil
                }
            }
        }
        for (name, instance) in next where Self.hasExpired(instance, now: now) { next[name] = nil }
        return transition(to: next)
    }

    /// Drops instances whose lease ran out (between polls, or while the server does not answer).
    mutating func expire(now: UInt64) -> [ServiceBrowserEvent] {
        transition(to: present.filter { !Self.hasExpired($0.value, now: now) })
    }

    /// Instances the server still lists whose lease ran out, with the TXT record they were found with: a
    /// registrar may remove them from the zone.
    static func expired(in poll: Poll, now: UInt64) -> [Instance] {
        poll.resolved.values.filter { hasExpired($0, now: now) }.sorted { $0.label < $1.label }
    }

    static func hasExpired(_ instance: Instance, now: UInt64) -> Bool {
        guard let end = instance.leaseEnd else { return false }
        return now > end &+ leaseGrace
    }

    private mutating func transition(to next: [DNSName: Instance]) -> [ServiceBrowserEvent] {
        var events: [ServiceBrowserEvent] = []
        for (name, old) in present.sorted(by: { $0.value.label < $1.value.label }) where next[name] == nil {
            events.append(.lost(service(old)))
        }
        for (name, instance) in next.sorted(by: { $0.value.label < $1.value.label }) {
            if let old = present[name] {
                if instance.differs(from: old) { events.append(.updated(service(instance))) }
            } else {
                events.append(.found(service(instance)))
            }
        }
        present = next
        return events
    }

    /// The instance as a browser reports it; addresses carry the domain in place of an interface.
    func service(_ instance: Instance) -> DiscoveredService {
        let source = domain.description
        return DiscoveredService(
            name: instance.label, serviceType: serviceType, txt: instance.reportedTXT, port: instance.port,
            hostName: instance.host.description,
            addresses: instance.addresses.map {
                DiscoveredAddress(address: $0, interfaceIndex: 0, interfaceName: source)
            }, interfaces: [source])
    }
}

/// The lease a registration states in its TXT record: `mp.until=UNIXSECONDS`.
enum WideAreaLease {
    /// The TXT key.
    static let key = "mp.until"

    /// Whether a TXT string is the lease entry (the key compared without case, RFC 6763 section 6.4).
    static func isLeaseEntry(_ string: [UInt8]) -> Bool {
        let prefix = Array(key.utf8) + [UInt8(ascii: "=")]
        guard string.count >= prefix.count else { return false }
        return zip(string, prefix).allSatisfy { a, b in
            (a >= 0x41 && a <= 0x5a ? a | 0x20 : a) == b
        }
    }

    /// The TXT strings with the lease entry set to `end`.
    static func stamp(_ strings: [[UInt8]], until end: UInt64) -> [[UInt8]] {
        strings.filter { !isLeaseEntry($0) } + [Array("\(key)=\(end)".utf8)]
    }
}
