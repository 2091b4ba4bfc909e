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
        func name(_ n: DNSName) -> [UInt8] {
            var out: [UInt8] = []
            for label in n.labels {
                out.append(UInt8(label.utf8.count))
                out.append(contentsOf: label.utf8)
            }
            out.append(0)
            return out
        }
        func u16(_ v: UInt16) -> [UInt8] { [UInt8(v >> 8), UInt8(v & 0xff)] }
        switch data {
        case .a(let address): return address.byteArray
        case .aaaa(let address): return address.byteArray
        case .ptr(let target): return name(target)
        case .srv(let priority, let weight, let port, let target):
            return u16(priority) + u16(weight) + u16(port) + name(target)
        case .txt(let strings):
            if strings.isEmpty { return [0] }
            return strings.flatMap { [UInt8(min($0.count, 255))] + $0.prefix(255) }
        case .nsec(let next, let types):
            var bitmap = [UInt8](repeating: 0, count: 32)
            var length = 0
            for type in types where type.rawValue < 256 {
                let bit = Int(type.rawValue)
                bitmap[bit / 8] |= 0x80 >> UInt8(bit % 8)
                length = max(length, bit / 8 + 1)
            }
            return name(next) + (length > 0 ? [0, UInt8(length)] + bitmap.prefix(length) : [])
        case .unknown(_, let bytes): return bytes
        }
    }
}
