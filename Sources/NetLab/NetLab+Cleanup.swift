import Dispatch
import Foundation
import Glibc
import MultipeerIO

extension NetLab {
    /// Removes the namespaces of labs whose creating process is dead (a crashed or killed test run), killing
    /// whatever still runs inside them. Labs of live processes, this one included, are left alone.
    /// - Returns: The namespaces removed.
    @discardableResult
    public static func sweepStale() -> [String] {
        guard ipPath != nil else { return [] }
        let stale = labNamespaces().filter { name in
            guard let pid = ownerPID(of: name) else { return false }
            return kill(pid, 0) != 0 && errno == ESRCH
        }
        deleteNamespaces(stale)
        return stale
    }

    /// Removes every lab namespace this process created (used on SIGINT/SIGTERM and at exit).
    static func sweepOwn() {
        let own = labNamespaces().filter { ownerPID(of: $0) == getpid() }
        deleteNamespaces(own)
    }

    /// Names of every namespace that looks like a lab's: `mpl<pid>x<hex>-…`.
    static func labNamespaces() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/run/netns")) ?? []
        return names.filter { ownerPID(of: $0) != nil }.sorted()
    }

    static func ownerPID(of namespace: String) -> pid_t? {
        guard namespace.hasPrefix(namePrefix) else { return nil }
        let rest = namespace.dropFirst(namePrefix.count)
        guard let x = rest.firstIndex(of: "x"), let dash = rest.firstIndex(of: "-"), x < dash,
            rest[rest.index(after: x)..<dash].allSatisfy(\.isHexDigit)
        else { return nil }
        return pid_t(rest[..<x])
    }

    /// Kills the processes inside each namespace, then deletes it, in one shell so it stays fast.
    static func deleteNamespaces(_ namespaces: [String]) {
        guard let ip = ipPath, !namespaces.isEmpty else { return }
        let script = namespaces.map { ns in
            "p=$(\(ip) netns pids \(ns) 2>/dev/null); [ -z \"$p\" ] || kill -9 $p 2>/dev/null; "
                + "\(ip) netns delete \(ns) 2>/dev/null"
        }.joined(separator: "\n")
        _ = try? ProcessLauncher.run("/bin/sh", ["-c", script + "\ntrue"], timeout: .seconds(30))
    }

    /// Keeps the signal sources alive; a released dispatch source stops delivering.
    private static let emergencySources = Lock<[any DispatchSourceSignal]>([])

    /// Makes sure this process's namespaces go away when it is interrupted or exits without tearing down.
    ///
    /// SIGINT and SIGTERM are routed to a dispatch source (the handler may spawn `ip`, which a C signal handler
    /// could not), which sweeps and then re-raises the signal with its default action. `atexit` sweeps too.
    static func installEmergencyCleanup() {
        emergencySources.withLock { sources in
            guard sources.isEmpty else { return }
            for number in [SIGINT, SIGTERM] {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    sweepOwn()
                    signal(number, SIG_DFL)
                    raise(number)
                }
                source.resume()
                sources.append(source)
            }
            atexit { NetLab.sweepOwn() }
        }
    }
}
