internal import MulticastDNS
internal import MultipeerIO

/// The records one advertised service of this peer keeps in a wide-area domain (RFC 6763 over unicast DNS),
/// and the updates (RFC 2136) that put them there and take them away.
///
/// For the service type `chat`, the instance `Alice 4b2x-q7ka` and the domain `example.org.`:
///
/// ```
/// _services._dns-sd._udp.example.org.  PTR  _chat._tcp.example.org.
/// _chat._tcp.example.org.              PTR  Alice\ 4b2x-q7ka._chat._tcp.example.org.
/// Alice\ 4b2x-q7ka._chat._tcp.example.org.  SRV  0 0 PORT mp-4b2xq7ka....example.org.
/// Alice\ 4b2x-q7ka._chat._tcp.example.org.  TXT  mp.id=... mp.name=Alice mp.v=1.0 mp.until=... (and the app's)
/// mp-4b2xq7ka....example.org.          A / AAAA  the peer's addresses
/// ```
///
/// The instance and host labels carry the identity's fingerprint, so two peers never write the same names.
struct WideAreaRecords: Hashable, Sendable {
    /// The domain, such as `example.org.`.
    var domain: DNSName
    /// The service type.
    var serviceType: ServiceType
    /// The instance label.
    var instance: String
    /// The host label.
    var host: String
    /// The port from the SRV record.
    var port: UInt16
    /// The TXT strings.
    var txt: [[UInt8]]
    /// The peer's addresses.
    var addresses: [IPAddress]
    /// The time to live of every record, in seconds.
    var ttl: UInt32

    /// The opcode of an update (RFC 2136 section 1).
    static let updateFlags: UInt16 = 5 << 11
    /// The class that deletes an RRset or a name (RFC 2136 section 2.5.2).
    static let classANY: UInt16 = 255
    /// The class that deletes one record (RFC 2136 section 2.5.4).
    static let classNONE: UInt16 = 254

    /// The service type's name in the domain, such as `_chat._tcp.example.org.`.
    var typeName: DNSName {
        DNSName(uncheckedLabels: Array(serviceType.domainName.labels.dropLast()) + domain.labels)
    }

    /// The instance's name.
    var instanceName: DNSName { DNSName(uncheckedLabels: [instance] + typeName.labels) }

    /// The host's name.
    var hostName: DNSName { DNSName(uncheckedLabels: [host] + domain.labels) }

    /// `_services._dns-sd._udp` in the domain: the list of service types (RFC 6763 section 9).
    var enumerationName: DNSName {
        DNSName(uncheckedLabels: Array(ServiceType.enumerationName.labels.dropLast()) + domain.labels)
    }

    /// Checks that every name fits DNS's limits (the instance label is cut to fit when it is made).
    func validate() throws(WideAreaError) {
        for name in [typeName, instanceName, hostName, enumerationName] {
            do {
                _ = try DNSName(labels: name.labels)
            } catch {
                throw WideAreaError(.invalidConfiguration, "the name \(name) cannot be registered: \(error)")
            }
        }
    }

    /// The update that registers (or refreshes) the service: its SRV and TXT replaced, its PTR and the type's
    /// enumeration PTR added (adding a record that exists changes nothing), and the host's addresses replaced.
    func registration(zone: DNSName) -> DNSMessage {
        var updates = [
            delete(instanceName, type: .srv),
            delete(instanceName, type: .txt),
            add(instanceName, .srv(priority: 0, weight: 0, port: port, target: hostName)),
            add(instanceName, .txt(txt)),
            add(typeName, .ptr(instanceName)),
            add(enumerationName, .ptr(typeName)),
            delete(hostName, type: .a),
            delete(hostName, type: .aaaa),
        ]
        for address in addresses {
            switch address {
            case .v4(let v4): updates.append(add(hostName, .a(v4)))
            case .v6(let v6): updates.append(add(hostName, .aaaa(v6)))
            }
        }
        return Self.update(zone: zone, updates)
    }

    /// The update that removes the service: its PTR record and everything at its instance name, and the host's
    /// addresses unless another service of this peer still names the host.
    func removal(zone: DNSName, keepHost: Bool) -> DNSMessage {
        var updates = [
            DNSResourceRecord(name: typeName, ttl: 0, recordClass: Self.classNONE, data: .ptr(instanceName)),
            delete(instanceName, type: .any),
        ]
        if !keepHost { updates.append(delete(hostName, type: .any)) }
        return Self.update(zone: zone, updates)
    }

    /// The update that removes another peer's instance whose lease ran out, only if its TXT record is still the
    /// one that ran out (a prerequisite, RFC 2136 section 2.4.2: the whole RRset must match), so an instance
    /// refreshed meanwhile is left alone.
    static func removalOfExpired(
        instanceName: DNSName, typeName: DNSName, txt: [[UInt8]], zone: DNSName
    ) -> DNSMessage {
        var message = update(
            zone: zone,
            [
                DNSResourceRecord(name: typeName, ttl: 0, recordClass: classNONE, data: .ptr(instanceName)),
                DNSResourceRecord(
                    name: instanceName, ttl: 0, recordClass: classANY, data: .unknown(type: .any, bytes: [])),
            ])
        message.answers = [DNSResourceRecord(name: instanceName, ttl: 0, data: .txt(txt))]
        return message
    }

    private func add(_ name: DNSName, _ data: DNSRecordData) -> DNSResourceRecord {
        DNSResourceRecord(name: name, ttl: ttl, data: data)
    }

    private func delete(_ name: DNSName, type: DNSRecordType) -> DNSResourceRecord {
        DNSResourceRecord(name: name, ttl: 0, recordClass: Self.classANY, data: .unknown(type: type, bytes: []))
    }

    /// An update of `zone`: the zone section, no prerequisites, the updates in the authority section.
    static func update(zone: DNSName, _ updates: [DNSResourceRecord]) -> DNSMessage {
        DNSMessage(
            flags: updateFlags, questions: [DNSQuestion(name: zone, type: .soa)], authorities: updates)
    }

    /// An instance label for a display name and an identity: the name, a space and the fingerprint's first 16
    /// characters (80 bits, `4b2x-q7ka-...`), the name cut at a character boundary so the label fits 63 bytes.
    static func instanceLabel(displayName: String, fingerprint: PeerFingerprint) -> String {
        let suffix = " " + String(fingerprint.description.prefix(19))
        var name = ""
        for character in displayName {
            guard name.utf8.count + character.utf8.count + suffix.utf8.count <= DNSName.maximumLabelLength else {
                break
            }
            name.append(character)
        }
        return name + suffix
    }

    /// The host label for an identity: `mp-` and the fingerprint's first 32 base32 characters (160 bits), a
    /// valid host name (letters, digits, hyphens).
    static func hostLabel(fingerprint: PeerFingerprint) -> String {
        "mp-" + String(fingerprint.description.filter { $0 != "-" }.prefix(32))
    }
}
