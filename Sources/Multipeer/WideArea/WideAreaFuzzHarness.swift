internal import MulticastDNS
internal import MultipeerIO

/// The libFuzzer oracle for what a DNS server (or someone spoofing it) sends a wide-area peer: the answer as a
/// unicast DNS message, checked against a signed request's MAC, and read the way a browse reads it.
///
/// The properties: nothing crashes; verification accepts nothing that was not signed with the key (the fuzzer
/// does not hold it, so every input carrying a MAC must be refused, unless it is an unsigned error report); what a
/// poll would take from an answer stays within its bounds. Package access, for `mdns-fuzz`.
package enum WideAreaFuzzHarness {
    static let key = try! TSIGKey(name: try! DNSName("mp-key."), secret: Array("swift-multipeer fuzz key 0123456".utf8))
    static let requestMAC = [UInt8](repeating: 0x42, count: 32)
    static let host = try! DNSName("h.lab.test.")
    static let instance = try! DNSName("a._x._tcp.lab.test.")

    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        if let verified = try? TransactionSignature.verify(bytes, requestMAC: requestMAC, key: key, now: 1_800_000_000)
        {
            precondition(verified.error != 0, "an input signed without the key verified: \(bytes)")
        }
        if bytes.count >= 2 {
            _ = try? TransactionSignature.parse(Array(bytes.dropFirst(2)))
        }
        guard let message = try? DNSMessageDecoder(limits: .unicast).decode(bytes) else { return }
        let records = message.answers + message.authorities + message.additionals
        let addresses = WideAreaPoller.addresses(of: host, in: records)
        precondition(addresses.count <= WideAreaPoller.maximumAddresses, "more addresses than the bound")
        // What a poll makes of the answer as an instance's SRV and TXT, and the browse state after it.
        var state = WideAreaBrowseState(serviceType: try! ServiceType("x"), domain: try! DNSName("lab.test."))
        for record in records {
            guard case .txt(let strings) = record.data else { continue }
            let found = WideAreaBrowseState.Instance(
                label: "a", name: instance, host: host, port: 1, txt: strings, addresses: addresses)
            let events = state.apply(.init(listed: [instance], resolved: [instance: found]), now: 1_800_000_000)
            precondition(events.count <= 2, "one instance made \(events.count) events")
            _ = found.reportedTXT.dictionary
        }
    }

    /// Seeds: a response signed with the key (as a server would), an unsigned BADKEY report, answers of each
    /// record type a poll reads.
    package static func seeds() -> [[UInt8]] {
        var encoder = DNSMessageEncoder(limits: .unicast)
        encoder.usesNameCompression = false
        let typeName = try! DNSName("_x._tcp.lab.test.")
        let answers: [DNSMessage] = [
            DNSMessage(
                id: 1, flags: 0x8400, answers: [DNSResourceRecord(name: typeName, ttl: 60, data: .ptr(instance))]),
            DNSMessage(
                id: 2, flags: 0x8400,
                answers: [
                    DNSResourceRecord(
                        name: instance, ttl: 60, data: .srv(priority: 0, weight: 0, port: 7000, target: host))
                ],
                additionals: [DNSResourceRecord(name: host, ttl: 60, data: .a(IPv4Address(192, 0, 2, 1)))]),
            DNSMessage(
                id: 3, flags: 0x8400,
                answers: [DNSResourceRecord(name: instance, ttl: 60, data: .txt([Array("mp.until=1800000100".utf8)]))]),
            DNSMessage(
                id: 4, flags: 0x8409,
                additionals: [
                    DNSResourceRecord(
                        name: key.name, ttl: 0, recordClass: 255,
                        data: .unknown(
                            type: .tsig,
                            bytes: TransactionSignature.algorithmName.wire + [
                                0, 0, 0x6b, 0x49, 0xd2, 0, 1, 44, 0, 0, 0, 4, 0, 17, 0, 0,
                            ]))
                ]),
        ]
        return answers.compactMap { try? encoder.encode($0) }
    }
}
