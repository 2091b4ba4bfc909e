internal import Glibc

/// Enumerates the calling thread's network namespace's interfaces.
public enum NetworkInterfaces {
    /// The current interfaces from `getifaddrs`, one entry per interface, sorted by index.
    ///
    /// Interfaces without IP addresses are included (through their link-layer entry).
    /// - Returns: The interfaces with their addresses sorted.
    /// - Throws: `SystemCallError` from `getifaddrs`.
    public static func current() throws(SystemCallError) -> [NetworkInterface] {
        var list: UnsafeMutablePointer<ifaddrs>?
        _ = try retryingSystemCall("getifaddrs") { getifaddrs(&list) }
        defer { freeifaddrs(list) }
        var byName: [String: NetworkInterface] = [:]
        var cursor = list
        while let entry = cursor?.pointee {
            cursor = entry.ifa_next
            guard let cName = entry.ifa_name else { continue }
            let name = String(cString: cName)
            if byName[name] == nil {
                let index = if_nametoindex(cName)
                guard index != 0 else { continue }
                let flags = entry.ifa_flags
                byName[name] = NetworkInterface(
                    name: name, index: index, isUp: flags & UInt32(IFF_UP) != 0,
                    isRunning: flags & UInt32(IFF_RUNNING) != 0, isLoopback: flags & UInt32(IFF_LOOPBACK) != 0,
                    supportsMulticast: flags & UInt32(IFF_MULTICAST) != 0, addresses: [])
            }
            if let address = entry.ifa_addr, let value = ipAddress(address) {
                let prefix = entry.ifa_netmask.flatMap { ipAddress($0) }.map(prefixLength) ?? 0
                byName[name]?.addresses.append(InterfaceAddress(address: value, prefixLength: prefix))
            }
        }
        return byName.values.map { interface in
            var interface = interface
            interface.addresses.sort { ($0.address, $0.prefixLength) < ($1.address, $1.prefixLength) }
            return interface
        }.sorted { $0.index < $1.index }
    }

    private static func ipAddress(_ pointer: UnsafeMutablePointer<sockaddr>) -> IPAddress? {
        switch Int32(pointer.pointee.sa_family) {
        case AF_INET:
            let sin = UnsafeRawPointer(pointer).loadUnaligned(as: sockaddr_in.self)
            return .v4(IPv4Address(value: UInt32(bigEndian: sin.sin_addr.s_addr)))
        case AF_INET6:
            var sin6 = UnsafeRawPointer(pointer).loadUnaligned(as: sockaddr_in6.self)
            let bytes = withUnsafeBytes(of: &sin6.sin6_addr) { Array($0) }
            return IPv6Address(bytes: bytes).map(IPAddress.v6)
        default:
            return nil
        }
    }

    private static func prefixLength(_ mask: IPAddress) -> Int {
        let bytes: [UInt8]
        switch mask {
        case .v4(let v4): bytes = v4.byteArray
        case .v6(let v6): bytes = v6.byteArray
        }
        return bytes.reduce(0) { $0 + $1.nonzeroBitCount }
    }
}
