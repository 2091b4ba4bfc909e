import MulticastDNS
import MultipeerIO

/// Hand-assembled messages following the RFC 1035 section 4.1 layout, with the mDNS meanings of RFC 6762 and
/// RFC 6763, plus one captured from python-zeroconf's encoder. Each comment gives the offset of its first byte.
enum GoldenVectors {
    static func name(_ text: String) -> DNSName { try! DNSName(text) }

    /// A multicast query for `_chat._tcp.local.` PTR with the QU bit (RFC 6762 section 5.4).
    static let quPTRQuery: [UInt8] = [
        0x00, 0x00,  // 0: ID 0 (multicast)
        0x00, 0x00,  // 2: flags: standard query
        0x00, 0x01,  // 4: QDCOUNT 1
        0x00, 0x00,  // 6: ANCOUNT 0
        0x00, 0x00,  // 8: NSCOUNT 0
        0x00, 0x00,  // 10: ARCOUNT 0
        0x05, 0x5f, 0x63, 0x68, 0x61, 0x74,  // 12: "_chat"
        0x04, 0x5f, 0x74, 0x63, 0x70,  // 18: "_tcp"
        0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c,  // 23: "local"
        0x00,  // 29: root
        0x00, 0x0c,  // 30: QTYPE PTR
        0x80, 0x01,  // 32: QU bit + class IN
    ]

    static let quPTRQueryMessage = DNSMessage(questions: [
        DNSQuestion(name: name("_chat._tcp.local."), type: .ptr, unicastResponse: true)
    ])

    /// A response announcing `Alpha._chat._tcp.local.`: PTR answer; SRV, TXT, A, AAAA and NSEC additionals,
    /// all compressed, unique records with the cache-flush bit (RFC 6762 section 10.2).
    static let fullResponse: [UInt8] = [
        0x00, 0x00,  // 0: ID 0
        0x84, 0x00,  // 2: flags: QR + AA
        0x00, 0x00,  // 4: QDCOUNT 0
        0x00, 0x01,  // 6: ANCOUNT 1
        0x00, 0x00,  // 8: NSCOUNT 0
        0x00, 0x05,  // 10: ARCOUNT 5
        // PTR _chat._tcp.local. -> Alpha._chat._tcp.local.
        0x05, 0x5f, 0x63, 0x68, 0x61, 0x74,  // 12: "_chat"
        0x04, 0x5f, 0x74, 0x63, 0x70,  // 18: "_tcp"
        0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c,  // 23: "local"
        0x00,  // 29: root
        0x00, 0x0c,  // 30: TYPE PTR
        0x00, 0x01,  // 32: class IN (shared record, no cache-flush)
        0x00, 0x00, 0x11, 0x94,  // 34: TTL 4500
        0x00, 0x08,  // 38: RDLENGTH 8
        0x05, 0x41, 0x6c, 0x70, 0x68, 0x61,  // 40: "Alpha"
        0xc0, 0x0c,  // 46: pointer to 12 (_chat._tcp.local.)
        // SRV Alpha._chat._tcp.local. 0 0 7000 host.local.
        0xc0, 0x28,  // 48: pointer to 40 (Alpha._chat._tcp.local.)
        0x00, 0x21,  // 50: TYPE SRV
        0x80, 0x01,  // 52: cache-flush + IN
        0x00, 0x00, 0x00, 0x78,  // 54: TTL 120
        0x00, 0x0d,  // 58: RDLENGTH 13
        0x00, 0x00,  // 60: priority 0
        0x00, 0x00,  // 62: weight 0
        0x1b, 0x58,  // 64: port 7000
        0x04, 0x68, 0x6f, 0x73, 0x74,  // 66: "host"
        0xc0, 0x17,  // 71: pointer to 23 (local.)
        // TXT Alpha._chat._tcp.local. "txtvers=1" "x"
        0xc0, 0x28,  // 73: pointer to 40
        0x00, 0x10,  // 75: TYPE TXT
        0x80, 0x01,  // 77: cache-flush + IN
        0x00, 0x00, 0x11, 0x94,  // 79: TTL 4500
        0x00, 0x0c,  // 83: RDLENGTH 12
        0x09, 0x74, 0x78, 0x74, 0x76, 0x65, 0x72, 0x73, 0x3d, 0x31,  // 85: "txtvers=1"
        0x01, 0x78,  // 95: "x" (boolean attribute)
        // A host.local. 192.168.1.20
        0xc0, 0x42,  // 97: pointer to 66 (host.local.)
        0x00, 0x01,  // 99: TYPE A
        0x80, 0x01,  // 101: cache-flush + IN
        0x00, 0x00, 0x00, 0x78,  // 103: TTL 120
        0x00, 0x04,  // 107: RDLENGTH 4
        0xc0, 0xa8, 0x01, 0x14,  // 109: 192.168.1.20
        // AAAA host.local. fe80::1
        0xc0, 0x42,  // 113: pointer to 66
        0x00, 0x1c,  // 115: TYPE AAAA
        0x80, 0x01,  // 117: cache-flush + IN
        0x00, 0x00, 0x00, 0x78,  // 119: TTL 120
        0x00, 0x10,  // 123: RDLENGTH 16
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // 125: fe80::
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,  // 133: ::1
        // NSEC host.local. next host.local. types A AAAA (RFC 6762 section 6.1)
        0xc0, 0x42,  // 141: pointer to 66
        0x00, 0x2f,  // 143: TYPE NSEC
        0x80, 0x01,  // 145: cache-flush + IN
        0x00, 0x00, 0x00, 0x78,  // 147: TTL 120
        0x00, 0x08,  // 151: RDLENGTH 8
        0xc0, 0x42,  // 153: next domain name: pointer to 66 (allowed in mDNS, RFC 6762 section 18.14)
        0x00, 0x04,  // 155: window 0, bitmap length 4
        0x40, 0x00, 0x00, 0x08,  // 157: bit 1 (A), bit 28 (AAAA)
    ]

    static let instance = name("Alpha._chat._tcp.local.")
    static let host = name("host.local.")

    static let fullResponseMessage = DNSMessage(
        flags: DNSMessage.responseFlags,
        answers: [DNSResourceRecord(name: name("_chat._tcp.local."), ttl: 4500, data: .ptr(instance))],
        additionals: [
            DNSResourceRecord(
                name: instance, ttl: 120, cacheFlush: true, data: .srv(priority: 0, weight: 0, port: 7000, target: host)
            ),
            DNSResourceRecord(
                name: instance, ttl: 4500, cacheFlush: true, data: .txt([Array("txtvers=1".utf8), Array("x".utf8)])),
            DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .a(IPv4Address(192, 168, 1, 20))),
            DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .aaaa(IPv6Address("fe80::1")!)),
            DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .nsec(next: host, types: [.a, .aaaa])),
        ])

    /// A goodbye: the PTR record again with TTL 0 (RFC 6762 section 10.1).
    static let goodbye: [UInt8] = [
        0x00, 0x00,  // 0: ID 0
        0x84, 0x00,  // 2: flags: QR + AA
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,  // 4: counts 0, 1, 0, 0
        0x05, 0x5f, 0x63, 0x68, 0x61, 0x74,  // 12: "_chat"
        0x04, 0x5f, 0x74, 0x63, 0x70,  // 18: "_tcp"
        0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x00,  // 23: "local", root
        0x00, 0x0c, 0x00, 0x01,  // 30: PTR, IN
        0x00, 0x00, 0x00, 0x00,  // 34: TTL 0: goodbye
        0x00, 0x08,  // 38: RDLENGTH 8
        0x05, 0x41, 0x6c, 0x70, 0x68, 0x61, 0xc0, 0x0c,  // 40: "Alpha" + pointer to 12
    ]

    static let goodbyeMessage = DNSMessage(
        flags: DNSMessage.responseFlags,
        answers: [DNSResourceRecord(name: name("_chat._tcp.local."), ttl: 0, data: .ptr(instance))])

    /// A legacy unicast query (RFC 6762 section 6.7): non-zero ID, RD set, as a plain resolver sends it.
    static let legacyUnicastQuery: [UInt8] = [
        0x12, 0x34,  // 0: ID 0x1234, echoed in the reply
        0x01, 0x00,  // 2: flags: RD
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // 4: counts 1, 0, 0, 0
        0x04, 0x68, 0x6f, 0x73, 0x74,  // 12: "host"
        0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x00,  // 17: "local", root
        0x00, 0x01,  // 24: QTYPE A
        0x00, 0x01,  // 26: QCLASS IN, no QU bit
    ]

    static let legacyUnicastQueryMessage = DNSMessage(
        id: 0x1234, flags: 0x0100, questions: [DNSQuestion(name: host, type: .a)])

    /// python-zeroconf 0.47.3 (Debian python3-zeroconf) `DNSOutgoing(_FLAGS_QR_RESPONSE | _FLAGS_AA)` with a
    /// PTR answer for "Peer One._chat._tcp.local." and SRV (port 7000, host-1.local.), TXT ("txtvers=1",
    /// "a=bc"), A 192.168.1.20 and AAAA fe80::1 additionals, from `out.packets()[0]`.
    static let zeroconfResponse: [UInt8] = [
        0x00, 0x00, 0x84, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x05, 0x5f, 0x63, 0x68, 0x61,
        0x74, 0x04, 0x5f, 0x74, 0x63, 0x70, 0x05, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x00, 0x00, 0x0c, 0x00, 0x01,
        0x00, 0x00, 0x11, 0x94, 0x00, 0x0b, 0x08, 0x50, 0x65, 0x65, 0x72, 0x20, 0x4f, 0x6e, 0x65, 0xc0, 0x0c,
        0xc0, 0x28, 0x00, 0x21, 0x80, 0x01, 0x00, 0x00, 0x00, 0x78, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x1b,
        0x58, 0x06, 0x68, 0x6f, 0x73, 0x74, 0x2d, 0x31, 0xc0, 0x17, 0xc0, 0x28, 0x00, 0x10, 0x80, 0x01, 0x00,
        0x00, 0x11, 0x94, 0x00, 0x0f, 0x09, 0x74, 0x78, 0x74, 0x76, 0x65, 0x72, 0x73, 0x3d, 0x31, 0x04, 0x61,
        0x3d, 0x62, 0x63, 0xc0, 0x45, 0x00, 0x01, 0x80, 0x01, 0x00, 0x00, 0x00, 0x78, 0x00, 0x04, 0xc0, 0xa8,
        0x01, 0x14, 0xc0, 0x45, 0x00, 0x1c, 0x80, 0x01, 0x00, 0x00, 0x00, 0x78, 0x00, 0x10, 0xfe, 0x80, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
    ]

    /// The same python-zeroconf 0.47.3 packet with an NSEC (A, AAAA) additional appended by its encoder. That
    /// release writes the window number and bitmap length as 16-bit fields (`00 00 00 04`, fixed upstream in
    /// python-zeroconf pull request 1326), so the bitmap reads as window 0 with length 0: malformed under
    /// RFC 4034 section 4.1.2.
    static let zeroconfMalformedNSEC: [UInt8] =
        [0x00, 0x00, 0x84, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x05] + zeroconfResponse[12...] + [
            0xc0, 0x45, 0x00, 0x2f, 0x80, 0x01, 0x00, 0x00, 0x00, 0x78,  // host-1.local. NSEC cache-flush IN TTL 120
            0x00, 0x0a,  // RDLENGTH 10
            0xc0, 0x45,  // next name host-1.local.
            0x00, 0x00, 0x00, 0x04,  // window 0 and length 4, each written as 16 bits
            0x40, 0x00, 0x00, 0x08,  // A, AAAA
        ]

    static let zeroconfResponseMessage: DNSMessage = {
        let instance = name("Peer One._chat._tcp.local.")
        let host = name("host-1.local.")
        return DNSMessage(
            flags: DNSMessage.responseFlags,
            answers: [DNSResourceRecord(name: name("_chat._tcp.local."), ttl: 4500, data: .ptr(instance))],
            additionals: [
                DNSResourceRecord(
                    name: instance, ttl: 120, cacheFlush: true,
                    data: .srv(priority: 0, weight: 0, port: 7000, target: host)),
                DNSResourceRecord(
                    name: instance, ttl: 4500, cacheFlush: true,
                    data: .txt([Array("txtvers=1".utf8), Array("a=bc".utf8)])),
                DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .a(IPv4Address(192, 168, 1, 20))),
                DNSResourceRecord(name: host, ttl: 120, cacheFlush: true, data: .aaaa(IPv6Address("fe80::1")!)),
            ])
    }()

    /// Every vector with its expected message, named for test output and seed files.
    static let all: [(name: String, bytes: [UInt8], message: DNSMessage)] = [
        ("qu-ptr-query", quPTRQuery, quPTRQueryMessage),
        ("full-response", fullResponse, fullResponseMessage),
        ("goodbye", goodbye, goodbyeMessage),
        ("legacy-unicast-query", legacyUnicastQuery, legacyUnicastQueryMessage),
        ("zeroconf-response", zeroconfResponse, zeroconfResponseMessage),
    ]
}
