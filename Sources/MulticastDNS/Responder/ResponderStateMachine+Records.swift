import MultipeerIO

// The records we publish, built from the registered services, the host name and the links' addresses
// whenever they are needed, so nothing stored can go stale.
extension ResponderStateMachine {
    /// A record's identity: the key under which schedules and the rate-limit history know it.
    func key(_ record: DNSResourceRecord) -> DNSResourceRecord { record.identity }

    /// Orders the answers of one packet, so packets do not depend on dictionary order.
    func sortKey(_ record: DNSResourceRecord) -> String {
        "\(record.type.rawValue) \(record.name) \(record.data)"
    }

    func addresses(on link: MulticastLink) -> [IPAddress] {
        (links[link] ?? []).sorted()
    }

    /// The host's A and AAAA records on `link`.
    func hostRecords(on link: MulticastLink) -> [DNSResourceRecord] {
        addresses(on: link).map { address in
            switch address {
            case .v4(let a): DNSResourceRecord(name: hostName, ttl: configuration.hostRecordTTL, data: .a(a))
            case .v6(let a): DNSResourceRecord(name: hostName, ttl: configuration.hostRecordTTL, data: .aaaa(a))
            }
        }
    }

    /// The keys of the host's address records on every link.
    func allHostRecords() -> Set<DNSResourceRecord> {
        var all = Set<DNSResourceRecord>()
        for link in links.keys { for record in hostRecords(on: link) { all.insert(key(record)) } }
        return all
    }

    /// The service's SRV and TXT records: the ones only we may publish under its name.
    func uniqueServiceRecords(_ entry: RegisteredService) -> [DNSResourceRecord] {
        [
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.hostRecordTTL,
                data: .srv(priority: 0, weight: 0, port: entry.service.port, target: hostName)),
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.otherRecordTTL, data: .txt(entry.service.txt)),
        ]
    }

    /// The service's shared PTR records: type to instance, then enumeration to type (RFC 6763 section 9).
    func sharedRecords(_ entry: RegisteredService) -> [DNSResourceRecord] {
        [
            DNSResourceRecord(
                name: entry.service.serviceType, ttl: configuration.otherRecordTTL, data: .ptr(entry.instanceName)),
            DNSResourceRecord(
                name: ServiceType.enumerationName, ttl: configuration.otherRecordTTL,
                data: .ptr(entry.service.serviceType)),
        ]
    }

    /// Everything an announcement of the service carries on `link`.
    func serviceRecords(_ entry: RegisteredService, on link: MulticastLink) -> [DNSResourceRecord] {
        sharedRecords(entry) + uniqueServiceRecords(entry) + hostRecords(on: link)
    }

    /// NSEC records (RFC 6762 section 6.1) saying which types exist under the service's and the host's names.
    func nsecRecords(_ entry: RegisteredService, on link: MulticastLink) -> [DNSResourceRecord] {
        var hostTypes: [DNSRecordType] = []
        let addresses = addresses(on: link)
        if addresses.contains(where: { if case .v4 = $0 { true } else { false } }) { hostTypes.append(.a) }
        if addresses.contains(where: { if case .v6 = $0 { true } else { false } }) { hostTypes.append(.aaaa) }
        return [
            DNSResourceRecord(
                name: entry.instanceName, ttl: configuration.otherRecordTTL, cacheFlush: true,
                data: .nsec(next: entry.instanceName, types: [.txt, .srv])),
            DNSResourceRecord(
                name: hostName, ttl: configuration.hostRecordTTL, cacheFlush: true,
                data: .nsec(next: hostName, types: hostTypes.sorted())),
        ]
    }

    /// The services whose records we answer with: those past probing and not saying goodbye.
    func claimedEntries() -> [RegisteredService] {
        entries.values.filter(\.isClaimed)
    }

    /// Whether the record is unique to its owner (RFC 6762 section 2): everything but PTR records.
    func isUnique(_ record: DNSResourceRecord) -> Bool {
        record.type != .ptr
    }

    /// Whether the record is the service's own, or a PTR record pointing at it.
    func belongs(_ record: DNSResourceRecord, to entry: RegisteredService) -> Bool {
        record.name == entry.instanceName
            || (record.type == .ptr && record.data == .ptr(entry.instanceName))
    }

    /// The record as we would publish it now, or nil if we no longer publish it.
    func currentRecord(matching record: DNSResourceRecord, on link: MulticastLink) -> DNSResourceRecord? {
        for entry in claimedEntries() {
            for candidate in serviceRecords(entry, on: link) where key(candidate) == record { return candidate }
            for candidate in nsecRecords(entry, on: link) where key(candidate) == record { return candidate }
        }
        return nil
    }

    /// A response message.
    func response(answers: [DNSResourceRecord], additionals: [DNSResourceRecord] = []) -> DNSMessage {
        DNSMessage(flags: DNSMessage.responseFlags, answers: answers, additionals: additionals)
    }

    /// Drops rate-limit history of records no longer published (an old TXT record, a withdrawn service), so
    /// the history stays as large as what is published, however often the TXT record changes.
    mutating func forgetUnpublishedRecords() {
        history = history.keeping { record, link in currentRecord(matching: record, on: link) != nil }
    }

    /// Entries in the rate-limit history, for tests.
    var rateLimitHistoryCount: Int { history.count }
}
