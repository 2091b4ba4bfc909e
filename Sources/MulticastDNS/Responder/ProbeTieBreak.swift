/// Simultaneous probe tie-breaking (RFC 6762 section 8.2).
///
/// Each host's proposed records for a name are sorted and compared pairwise by class, then type, then
/// rdata as uncompressed bytes; the first difference decides, and a host with more records wins if one list
/// is a prefix of the other.
enum ProbeTieBreak {
    /// Negative if `ours` loses, zero for identical sets, positive if `ours` wins.
    static func compare(_ ours: [DNSResourceRecord], _ theirs: [DNSResourceRecord]) -> Int {
        let a = ours.map(sortable).sorted(by: lexicographicallyPrecedes)
        let b = theirs.map(sortable).sorted(by: lexicographicallyPrecedes)
        for (x, y) in zip(a, b) where x != y {
            return lexicographicallyPrecedes(x, y) ? -1 : 1
        }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }

    private static func lexicographicallyPrecedes(_ x: [UInt8], _ y: [UInt8]) -> Bool {
        x.lexicographicallyPrecedes(y)
    }

    /// Class (cache-flush bit clear), type and uncompressed rdata as one byte string, so comparing byte
    /// strings compares class first, then type, then data.
    static func sortable(_ record: DNSResourceRecord) -> [UInt8] {
        var out: [UInt8] = []
        out.append(contentsOf: [UInt8(record.recordClass >> 8), UInt8(record.recordClass & 0xff)])
        out.append(contentsOf: [UInt8(record.type.rawValue >> 8), UInt8(record.type.rawValue & 0xff)])
        out.append(contentsOf: uncompressedRData(record.data))
        return out
    }

    static func uncompressedRData(_ data: DNSRecordData) -> [UInt8] {
        var writer = DNSWriter(compressing: false)
        // Only an oversized TXT string or unknown rdata can fail; our own records never hold one, and a
        // rival's came through the decoder's limits, so an empty result is never compared in practice.
        do { try writer.writeRData(data) } catch { return [] }
        return writer.bytes
    }
}
