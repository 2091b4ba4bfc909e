import Foundation

extension DiscoveryBenchmark {
    /// Scenario 7: bytes per cached service, ours (`mallinfo2`, in this process) against python-zeroconf's
    /// DNSCache (`tracemalloc`, `scripts/bench/zc_cache_memory.py`). No network.
    static func cacheMemory(paths: BenchmarkPaths, instances: Int) throws -> (ResultRow, [String]) {
        let ours = try CacheMemoryBenchmark.run(count: instances)
        var notes = [
            String(
                format:
                    "scenario 7: ours cached %d records, found %d of %d instances; heap (mallinfo2 uordblks+hblkhd) "
                    + "%.0f B/instance, RSS %.0f B/instance (page granularity); feeding the %d responses took %.2f s",
                ours.cachedRecords, ours.found, ours.instances, ours.heapBytesPerInstance, ours.rssBytesPerInstance,
                ours.instances, ours.feedSeconds)
        ]
        var baseline: Double?
        let process = Process()
        process.executableURL = URL(fileURLWithPath: paths.python)
        process.arguments = [paths.zeroconfCacheMemory, String(instances)]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        if process.terminationStatus == 0,
            let object = try? JSONSerialization.jsonObject(with: output) as? [String: Any],
            let bytes = object["bytes_per_instance"] as? Double
        {
            baseline = bytes
            notes.append(
                String(
                    format: "scenario 7: python-zeroconf DNSCache (tracemalloc) %.0f B/instance, %d records cached",
                    bytes, object["cached_records"] as? Int ?? -1))
        } else {
            notes.append("scenario 7: zc_cache_memory.py failed (status \(process.terminationStatus))")
        }
        let row = ResultRow(
            "7 memory per cached service (N=\(instances))", ours: [ours.heapBytesPerInstance], baseline: [baseline],
            target: nil, unit: .bytes)
        return (row, notes)
    }
}
