internal import Foundation
import MulticastDNS
import Multipeer
import MultipeerIO

/// Wide-area DNS-SD for the discovery commands (`browse`, `advertise`), which run beside the multicast DNS stack
/// without a session network: an event loop of its own, failures and registrations said on stderr.
struct WideAreaTool {
    let discovery: WideAreaDiscovery
    let loop: EventLoop
    let configuration: WideAreaConfiguration

    /// Starts it, or returns nil when no wide-area option was given.
    static func start(
        _ configuration: WideAreaConfiguration?, discovery: DiscoveryConfiguration
    ) throws(UsageError) -> WideAreaTool? {
        guard let configuration else { return nil }
        let loop: EventLoop
        do {
            loop = try EventLoop(name: "multipeer-wide-area")
        } catch {
            throw UsageError("cannot start an event loop for wide-area discovery: \(error)")
        }
        var network = PeerNetwork.Configuration()
        network.discovery = discovery
        if discovery.interfaces == .loopbackOnly { network.listenAddresses = [.v4(IPv4Address(127, 0, 0, 1))] }
        let addressing = network
        let made = WideAreaDiscovery(
            configuration: configuration, loop: loop, logger: ToolLog.logger,
            addresses: { PeerNetwork.advertisedAddresses(addressing) },
            report: { Output.error("multipeer: \(PeerOptions.describe($0))") })
        return WideAreaTool(discovery: made, loop: loop, configuration: configuration)
    }

    /// A host label for this machine in the domain: its host name's letters, digits and hyphens, and six random
    /// hexadecimal digits (as multicast DNS names hosts), so two tools on one host never share one.
    static func hostLabel() -> String {
        let name = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host"
        let cleaned = String(
            name.lowercased().filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }.prefix(40))
        return (cleaned.isEmpty ? "host" : cleaned) + "-" + String(format: "%06x", UInt32.random(in: 0...0xFF_FFFF))
    }

    /// Removes what was registered and stops polling.
    func stop() async {
        await discovery.shutdown()
        loop.shutdown()
    }
}
