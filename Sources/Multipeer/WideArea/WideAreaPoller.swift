internal import MulticastDNS
internal import MultipeerIO

/// One poll of a service type in a domain: the PTR question, then each listed instance's SRV and TXT, then the
/// addresses of each SRV target the answers' additional section did not give. Questions run concurrently, at
/// most ``concurrency`` at a time.
///
/// Only answers for the very name and type asked are used (a server cannot slip other names in), at most
/// ``maximumAddresses`` addresses per host and `maximumInstances` instances per type.
struct WideAreaPoller: Sendable {
    /// Questions in flight at once.
    static let concurrency = 16
    /// The most addresses kept for one host.
    static let maximumAddresses = 16

    let client: UnicastDNSClient
    let maximumInstances: Int

    /// What one poll found, and how many listed instances were left out by the limit.
    struct Result: Sendable {
        var poll: WideAreaBrowseState.Poll
        var ignored = 0
        /// Why the PTR question failed, when it did.
        var failure: WideAreaError?
    }

    func poll(typeName: DNSName) async -> Result {
        let listing: DNSMessage
        do {
            listing = try await client.query(typeName, .ptr)
        } catch {
            return Result(poll: WideAreaBrowseState.Poll(listed: nil), failure: error)
        }
        guard listing.responseCode == 0 || listing.responseCode == 3 else {
            return Result(
                poll: WideAreaBrowseState.Poll(listed: nil),
                failure: WideAreaError(
                    .refused(responseCode: listing.responseCode, signatureError: nil),
                    "the DNS server \(client.server) answered \(typeName) PTR with "
                        + WideAreaError.responseCodeName(listing.responseCode)))
        }
        var names: [DNSName] = []
        var ignored = 0
        for record in listing.answers where record.name == typeName {
            guard case .ptr(let instance) = record.data, instance.parent == typeName,
                !names.contains(instance)
            else { continue }
            if names.count < maximumInstances { names.append(instance) } else { ignored += 1 }
        }
        var poll = WideAreaBrowseState.Poll(listed: names)
        // SRV and TXT of every instance.
        let details = await Self.concurrently(names) { name in await self.instanceRecords(name) }
        var hosts: [DNSName: [IPAddress]] = [:]
        for detail in details.values {
            if case .found(_, _, let host, let addresses) = detail, !addresses.isEmpty, hosts[host] == nil {
                hosts[host] = addresses
            }
        }
        let missingHosts = Set(
            details.values.compactMap { detail -> DNSName? in
                guard case .found(_, _, let host, _) = detail, hosts[host] == nil else { return nil }
                return host
            })
        let resolvedHosts = await Self.concurrently(Array(missingHosts)) { host in await self.addresses(of: host) }
        for (host, addresses) in resolvedHosts { hosts[host] = addresses }
        for name in names {
            guard let detail = details[name] else { continue }
            switch detail {
            case .failed:
                poll.unresolved.insert(name)
            case .absent:
                break
            case .found(let port, let txt, let host, _):
                guard let addresses = hosts[host] else {
                    poll.unresolved.insert(name)
                    continue
                }
                guard !addresses.isEmpty else { continue }
                poll.resolved[name] = WideAreaBrowseState.Instance(
                    label: name.labels[0], name: name, host: host, port: port, txt: txt, addresses: addresses)
            }
        }
        return Result(poll: poll, ignored: ignored)
    }

    /// An instance's SRV and TXT.
    enum Detail: Sendable {
        case found(port: UInt16, txt: [[UInt8]], host: DNSName, addresses: [IPAddress])
        /// The server has no SRV or no TXT for it.
        case absent
        /// A question got no answer.
        case failed
    }

    private func instanceRecords(_ name: DNSName) async -> Detail {
        async let srvAnswer = try? client.query(name, .srv)
        async let txtAnswer = try? client.query(name, .txt)
        guard let srv = await srvAnswer, let txt = await txtAnswer else { return .failed }
        guard
            let (port, host) = srv.answers.lazy.compactMap({ record -> (UInt16, DNSName)? in
                guard record.name == name, case .srv(_, _, let port, let target) = record.data else { return nil }
                return (port, target)
            }).first,
            let strings = txt.answers.lazy.compactMap({ record -> [[UInt8]]? in
                guard record.name == name, case .txt(let strings) = record.data else { return nil }
                return strings
            }).first
        else { return .absent }
        // A server that adds the target's addresses to the SRV answer (RFC 2782) saves two questions.
        let glued = Self.addresses(of: host, in: srv.additionals)
        return .found(port: port, txt: strings, host: host, addresses: glued)
    }

    /// A host's A and AAAA records; nil when a question got no answer, empty when the host has none.
    private func addresses(of host: DNSName) async -> [IPAddress]? {
        async let v4 = try? client.query(host, .a)
        async let v6 = try? client.query(host, .aaaa)
        guard let a = await v4, let aaaa = await v6 else { return nil }
        return Self.addresses(of: host, in: a.answers + aaaa.answers)
    }

    /// The addresses `records` give for `host`, sorted, at most ``maximumAddresses``.
    static func addresses(of host: DNSName, in records: [DNSResourceRecord]) -> [IPAddress] {
        var addresses: [IPAddress] = []
        for record in records where record.name == host {
            let address: IPAddress
            switch record.data {
            case .a(let v4): address = .v4(v4)
            case .aaaa(let v6): address = .v6(v6)
            default: continue
            }
            if !addresses.contains(address) && addresses.count < maximumAddresses { addresses.append(address) }
        }
        return addresses.sorted()
    }

    /// Runs `work` for every item, at most ``concurrency`` at once; results by item.
    static func concurrently<Item: Hashable & Sendable, Value: Sendable>(
        _ items: [Item], _ work: @escaping @Sendable (Item) async -> Value?
    ) async -> [Item: Value] {
        await withTaskGroup(of: (Item, Value?).self) { group in
            var results: [Item: Value] = [:]
            var next = 0
            while next < items.count && next < concurrency {
                let item = items[next]
                group.addTask { (item, await work(item)) }
                next += 1
            }
            while let (item, value) = await group.next() {
                if let value { results[item] = value }
                if next < items.count {
                    let item = items[next]
                    group.addTask { (item, await work(item)) }
                    next += 1
                }
            }
            return results
        }
    }
}
