/// How fast this machine seals and opens TLS records on one thread, for the benchmarks' estimate of what TLS
/// throughput can reach here at all. Package access, for `multipeer-bench`.
package enum RecordLayerSpeed {
    /// Seals `bytes` of plaintext into 16 KiB AES-128-GCM records, 96 KiB at a time (as a connection writes
    /// them), and opens them again, on the calling thread, with the record layer connections use.
    /// - Returns: Plaintext bytes per second for sealing and for opening.
    package static func measure(bytes: Int) -> (seal: Double, open: Double) {
        let secretA = [UInt8](repeating: 0xA1, count: 32)
        let secretB = [UInt8](repeating: 0xB2, count: 32)
        guard
            let sender = try? TLSRecordProtection(
                suite: .aes128GCM, sendingSecret: secretA, receivingSecret: secretB),
            let receiver = try? TLSRecordProtection(
                suite: .aes128GCM, sendingSecret: secretB, receivingSecret: secretA)
        else { return (0, 0) }
        let chunk = [UInt8](repeating: 0x5A, count: 96 * 1024)
        var sealed: [UInt8] = []
        var opened: [UInt8] = []
        sealed.reserveCapacity(TLSRecordProtection.sealedLength(of: chunk.count))
        opened.reserveCapacity(chunk.count)
        let clock = ContinuousClock()
        var sealTime = Duration.zero
        var openTime = Duration.zero
        var done = 0
        while done < bytes {
            sealed.removeAll(keepingCapacity: true)
            opened.removeAll(keepingCapacity: true)
            let sealStart = clock.now
            let ok = chunk.withUnsafeBytes { plaintext in
                (try? sender.seal(plaintext, contentType: TLSRecordProtection.applicationDataType, into: &sealed))
                    != nil
            }
            let sealEnd = clock.now
            guard ok, (try? RecordFuzzHarness.openAll(sealed, with: receiver, into: &opened)) != nil else {
                return (0, 0)
            }
            openTime += clock.now - sealEnd
            sealTime += sealEnd - sealStart
            done += chunk.count
        }
        return (Double(done) / seconds(sealTime), Double(done) / seconds(openTime))
    }

    private static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return max(1e-9, Double(seconds) + Double(attoseconds) / 1e18)
    }
}
