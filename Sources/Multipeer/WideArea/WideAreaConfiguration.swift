internal import Foundation
public import MulticastDNS
public import MultipeerIO

/// Discovery beyond the link: DNS-SD over unicast DNS (RFC 6763) in a domain that a DNS server holds.
///
/// With a domain (given, or found by domain enumeration), advertisers register their PTR, SRV, TXT and A/AAAA
/// records in it by signed DNS updates (RFC 2136, TSIG HMAC-SHA256) and refresh them before their lease runs
/// out; browsers poll the server and report what they find beside what multicast DNS finds on the link (one
/// peer found once). Without a key, a peer browses the domain but does not register.
public struct WideAreaConfiguration: Sendable, Hashable {
    /// The domain to register in and browse, such as `example.org`; nil to find one by domain enumeration
    /// under ``enumerationDomain``.
    public var domain: DNSName?
    /// Where to look for the domain when ``domain`` is nil (RFC 6763 section 11): the registration domain
    /// (`dr._dns-sd._udp`, else the first `r._dns-sd._udp`) and the browsing domains (`lb`, `db`, `b`) under it;
    /// nil uses the `domain` or first `search` entry of `/etc/resolv.conf`.
    public var enumerationDomain: DNSName?
    /// The DNS server to ask and update (port 53 by default).
    public var server: SocketAddress
    /// The key that signs updates; nil browses only.
    public var key: TSIGKey?
    /// How often a browser asks the server again: found and lost peers show within this time.
    public var pollInterval: Duration = .seconds(5)
    /// How long a registration stays valid without a refresh (it is refreshed at a third of it): a crashed
    /// peer's records are reported lost by browsers at most this long (plus 30 s for clocks that differ, plus a
    /// poll) after its last refresh, and removed from the zone by the next registering browser that sees them.
    public var lease: Duration = .seconds(180)
    /// The time to live of the registered records, in seconds: how long caching resolvers in between may keep
    /// them. Registrations are refreshed before it runs out (at a third of the lease: every 60 s by default).
    public var recordTTL: UInt32 = 120
    /// How long a question over UDP waits for its answer before it is sent again (each wait doubles, three
    /// tries in all: 1 + 2 + 4 s by default before the server counts as unreachable).
    public var queryTimeout: Duration = .seconds(1)
    /// How many instances of one service type a browser resolves: more are ignored (and counted), so a zone
    /// with a flood of records cannot make a browser hold or ask without bound.
    public var maximumInstances = 256

    /// Configures wide-area DNS-SD.
    /// - Parameters:
    ///   - domain: The domain; nil to enumerate.
    ///   - server: The DNS server.
    ///   - key: The update key; nil browses only.
    public init(domain: DNSName?, server: SocketAddress, key: TSIGKey? = nil) {
        self.domain = domain
        self.server = server
        self.key = key
    }

    /// Checks the settings.
    /// - Throws: ``WideAreaError`` with `invalidConfiguration` saying which setting is wrong.
    public func validate() throws(WideAreaError) {
        guard pollInterval >= .milliseconds(100) else {
            throw WideAreaError(.invalidConfiguration, "the poll interval \(pollInterval) is below 100 ms")
        }
        guard queryTimeout >= .milliseconds(10) && queryTimeout <= .seconds(30) else {
            throw WideAreaError(.invalidConfiguration, "a query timeout of \(queryTimeout) is outside 10 ms to 30 s")
        }
        guard lease >= .seconds(3) else {
            throw WideAreaError(.invalidConfiguration, "a lease of \(lease) is shorter than 3 s")
        }
        guard lease / 3 < .seconds(Int64(recordTTL)) else {
            throw WideAreaError(
                .invalidConfiguration,
                "records are refreshed every \(lease / 3) (a third of the lease), not before their TTL of \(recordTTL) s"
            )
        }
        guard (1...4096).contains(maximumInstances) else {
            throw WideAreaError(.invalidConfiguration, "maximumInstances must be 1 to 4096, not \(maximumInstances)")
        }
        if let domain, domain.labels.isEmpty {
            throw WideAreaError(.invalidConfiguration, "the wide-area domain cannot be the root")
        }
    }

    /// Parses `ADDRESS[:PORT]`: an IPv4 address, an IPv6 address in brackets when a port follows
    /// (`[2001:db8::53]:5353`) or bare without one; port 53 when none is given.
    /// - Parameter text: The server's address.
    /// - Returns: The socket address.
    /// - Throws: ``WideAreaError`` with `invalidConfiguration`.
    public static func serverAddress(_ text: String, defaultPort: UInt16 = 53) throws(WideAreaError) -> SocketAddress {
        if let address = IPAddress(text) { return SocketAddress(address, port: defaultPort) }
        var host = Substring(text)
        var port = defaultPort
        if host.hasPrefix("["), let close = host.firstIndex(of: "]") {
            let rest = host[host.index(after: close)...]
            host = host[host.index(after: host.startIndex)..<close]
            if !rest.isEmpty {
                guard rest.hasPrefix(":"), let value = UInt16(rest.dropFirst()), value != 0 else {
                    throw WideAreaError(.invalidConfiguration, "'\(text)' has no valid port after the address")
                }
                port = value
            }
        } else if let colon = host.lastIndex(of: ":"), host.filter({ $0 == ":" }).count == 1 {
            guard let value = UInt16(host[host.index(after: colon)...]), value != 0 else {
                throw WideAreaError(.invalidConfiguration, "'\(text)' has no valid port after the address")
            }
            port = value
            host = host[..<colon]
        }
        guard let address = IPAddress(String(host)) else {
            throw WideAreaError(
                .invalidConfiguration,
                "'\(text)' is not an IP address with an optional port (such as 192.0.2.53, 192.0.2.53:5353, "
                    + "[2001:db8::53]:53)")
        }
        return SocketAddress(address, port: port)
    }

    /// The first `nameserver` and the `domain` (or first `search` entry) of a resolver configuration.
    /// - Parameter text: The contents of `/etc/resolv.conf`.
    /// - Returns: What the file names, each nil when it names none.
    static func resolverSettings(_ text: String) -> (server: SocketAddress?, domain: DNSName?) {
        var server: SocketAddress?
        var domain: DNSName?
        var search: DNSName?
        for line in text.split(whereSeparator: \.isNewline) {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 2, !words[0].hasPrefix("#"), !words[0].hasPrefix(";") else { continue }
            switch words[0] {
            case "nameserver" where server == nil:
                server = IPAddress(String(words[1])).map { SocketAddress($0, port: 53) }
            case "domain" where domain == nil:
                domain = try? DNSName(String(words[1]))
            case "search" where search == nil:
                search = try? DNSName(String(words[1]))
            default:
                break
            }
        }
        return (server, domain ?? search)
    }

    /// The first `nameserver` and `domain`/`search` of `/etc/resolv.conf`.
    static func systemResolverSettings() -> (server: SocketAddress?, domain: DNSName?) {
        guard let data = FileManager.default.contents(atPath: "/etc/resolv.conf"), data.count <= 65_536 else {
            return (nil, nil)
        }
        return resolverSettings(String(decoding: data, as: UTF8.self))
    }
}

extension WideAreaConfiguration {
    /// A configuration from the words a user writes (the tool's `--domain`, `--dns-server`, `--dns-key`, or the
    /// environment's `MULTIPEER_DOMAIN`, `MULTIPEER_DNS_SERVER`, `MULTIPEER_DNS_KEY`).
    /// - Parameters:
    ///   - domain: The domain; nil finds one by domain enumeration under `/etc/resolv.conf`'s domain.
    ///   - server: `ADDRESS[:PORT]`; nil uses `/etc/resolv.conf`'s first nameserver.
    ///   - keyFile: A file holding `hmac-sha256:KEYNAME:BASE64SECRET`, readable by its owner only; nil browses
    ///     without registering.
    /// - Throws: ``WideAreaError`` with `invalidConfiguration` saying which word is wrong.
    public init(domain: String?, server: String?, keyFile: String?) throws(WideAreaError) {
        let parsedDomain: DNSName?
        do {
            parsedDomain = try domain.map { text throws(DNSNameError) in try DNSName(text) }
        } catch {
            throw WideAreaError(.invalidConfiguration, "the domain '\(domain ?? "")' is not a DNS name: \(error)")
        }
        let address: SocketAddress
        if let server {
            address = try Self.serverAddress(server)
        } else if let system = Self.systemResolverSettings().server {
            address = system
        } else {
            throw WideAreaError(
                .invalidConfiguration, "no DNS server is given and /etc/resolv.conf names no nameserver")
        }
        let key = try keyFile.map { path throws(WideAreaError) in try TSIGKey.load(contentsOf: path) }
        self.init(domain: parsedDomain, server: address, key: key)
    }
}
