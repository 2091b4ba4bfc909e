import MultipeerIO
import Testing

@Suite struct InterfaceMonitorTests {
    @Test func firstReportListsEveryCurrentInterfaceAsAdded() async throws {
        try await withLoop { loop in
            let reports = Collector<InterfaceChanges>()
            let snapshot = try await loop.submit {
                let monitor = try InterfaceMonitor(loop: loop)
                monitor.start { reports.append($0) }
                defer {
                    monitor.stop()
                    monitor.stop()
                }
                return monitor.interfaces
            }
            let first = try #require(reports.values.first)
            #expect(first.current == snapshot)
            #expect(first.added == first.current)
            #expect(first.removed.isEmpty && first.changed.isEmpty)
            #expect(first.current.contains { $0.isLoopback })
        }
    }

    @Test(
        .enabled(if: NetworkNamespace.isAvailable, "needs root and iproute2 to create a private network namespace"))
    func reportsLinksAddedAndRemovedInANamespace() async throws {
        try await withNamespace { namespace, loop in
            let reports = Collector<InterfaceChanges>()
            let monitor = try await loop.submit {
                // A long poll interval so the netlink notification, not the poll, must drive the report.
                let monitor = try InterfaceMonitor(loop: loop, pollInterval: .seconds(60))
                monitor.start { reports.append($0) }
                return monitor
            }
            #expect(await eventually { reports.count == 1 })
            #expect(reports.values.first?.added.map(\.name) == ["lo"])

            // This kernel has no `dummy` module; a veth pair is the next simplest link to add and remove.
            try namespace.ip(["link", "add", "mpv0", "type", "veth", "peer", "name", "mpv1"])
            #expect(
                await eventually {
                    Set(reports.values.flatMap(\.added).map(\.name)).isSuperset(of: ["mpv0", "mpv1"])
                })
            try namespace.ip(["link", "set", "mpv0", "up"])
            #expect(await eventually { reports.values.flatMap(\.changed).contains { $0.name == "mpv0" && $0.isUp } })

            try namespace.ip(["link", "del", "mpv0"])
            #expect(
                await eventually {
                    Set(reports.values.flatMap(\.removed).map(\.name)).isSuperset(of: ["mpv0", "mpv1"])
                })
            let names = try await loop.submit { monitor.interfaces.map(\.name) }
            #expect(names == ["lo"])
            try await loop.submit { monitor.stop() }
        }
    }
}
