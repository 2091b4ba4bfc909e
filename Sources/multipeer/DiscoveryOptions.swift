internal import Glibc
import MulticastDNS

/// Options shared by the discovery commands: `--interface IFNAME`... and `--loopback`.
struct DiscoveryOptions {
    var configuration = DiscoveryConfiguration()

    init(_ parsed: DiscoveryArguments) throws(UsageError) {
        let interfaces = parsed.interfaces
        if parsed.loopback && !interfaces.isEmpty { throw UsageError("--loopback and --interface exclude each other") }
        configuration.interfaces = parsed.loopback ? .loopbackOnly : interfaces.isEmpty ? .all : .named(interfaces)
        if parsed.ipv4Only { configuration.useIPv6 = false }
        if parsed.ipv6Only { configuration.useIPv4 = false }
        if !configuration.useIPv4 && !configuration.useIPv6 {
            throw UsageError("--ipv4-only and --ipv6-only exclude each other")
        }
    }

    /// What `multipeer` prints when discovery fails: the reason, and what to do where the code tells us.
    static func explain(_ error: DiscoveryError) -> String {
        switch error.code {
        case .socket(call: "bind", errno: EADDRINUSE):
            // Our sockets set SO_REUSEADDR and SO_REUSEPORT, so only a socket that set neither can refuse us.
            "multipeer: \(error.reason); another program holds UDP port 5353 without sharing it "
                + "(SO_REUSEADDR), so no other mDNS stack can run beside it on this host"
        default:
            "multipeer: \(error.reason)"
        }
    }

    /// Opens the discovery stack, or prints why it cannot and returns nil (the command then exits 1).
    static func openStack(_ configuration: DiscoveryConfiguration) async -> MulticastDNSStack? {
        do {
            return try await MulticastDNSStack(configuration: configuration, logger: ToolLog.logger)
        } catch {
            Output.error(explain(error))
            return nil
        }
    }

    /// Parses a service type argument with a usage error that names the broken rule.
    static func serviceType(_ text: String) throws(UsageError) -> ServiceType {
        do {
            return try ServiceType(text)
        } catch {
            throw UsageError("\(error)")
        }
    }

    /// Parses a duration in seconds, such as `2.5`.
    static func seconds(_ text: String, option: String) throws(UsageError) -> Duration {
        guard let value = Double(text), value >= 0, value < 1e9 else {
            throw UsageError("\(option) wants a number of seconds, not '\(text)'")
        }
        return .milliseconds(Int64(value * 1000))
    }
}
