/// Builds one packet, remembering where each name suffix was written so later names can point to it.
struct DNSWriter {
    static let headerSize = 12
    /// Pointers carry 14 bits of offset (RFC 1035 section 4.1.4).
    static let maximumPointerTarget = 0x3FFF

    private(set) var bytes: [UInt8] = []
    let compressing: Bool
    /// Wire form of each name suffix written so far (exact bytes, so case is preserved) to its offset.
    private var suffixOffsets: [[UInt8]: Int] = [:]
    /// Suffixes in insertion order, so a tentative record can be taken back.
    private var journal: [[UInt8]] = []

    init(compressing: Bool) {
        self.compressing = compressing
        bytes.reserveCapacity(512)
    }

    struct Mark {
        let byteCount: Int
        let journalCount: Int
    }

    func mark() -> Mark { Mark(byteCount: bytes.count, journalCount: journal.count) }

    mutating func rollback(to mark: Mark) {
        bytes.removeSubrange(mark.byteCount...)
        for key in journal[mark.journalCount...] { suffixOffsets[key] = nil }
        journal.removeSubrange(mark.journalCount...)
    }

    mutating func writeHeader(id: UInt16, flags: UInt16) {
        writeUInt16(id)
        writeUInt16(flags)
        bytes.append(contentsOf: repeatElement(0, count: 8))
    }

    /// Patches the four section counts into the header.
    mutating func setCounts(_ counts: [Int]) {
        for (index, count) in counts.enumerated() {
            bytes[4 + 2 * index] = UInt8(truncatingIfNeeded: count >> 8)
            bytes[5 + 2 * index] = UInt8(truncatingIfNeeded: count)
        }
    }

    @inline(__always) mutating func writeUInt16(_ value: UInt16) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always) mutating func writeUInt32(_ value: UInt32) {
        writeUInt16(UInt16(value >> 16))
        writeUInt16(UInt16(truncatingIfNeeded: value))
    }

    /// Writes a name, replacing its longest already-written suffix with a pointer.
    mutating func writeName(_ name: DNSName) {
        var wire: [UInt8] = []
        wire.reserveCapacity(name.wireLength)
        var starts: [Int] = []
        for label in name.labels {
            starts.append(wire.count)
            wire.append(UInt8(truncatingIfNeeded: label.utf8.count))
            wire.append(contentsOf: label.utf8)
        }
        wire.append(0)
        var pointer: Int?
        var written = starts.count
        var keys: [[UInt8]] = []
        keys.reserveCapacity(starts.count)
        for (index, start) in starts.enumerated() {
            let key = Array(wire[start...])
            if compressing, let target = suffixOffsets[key] {
                pointer = target
                written = index
                break
            }
            keys.append(key)
        }
        let base = bytes.count
        for (index, key) in keys.enumerated() {
            let offset = base + starts[index]
            if offset <= Self.maximumPointerTarget && suffixOffsets[key] == nil {
                suffixOffsets[key] = offset
                journal.append(key)
            }
        }
        if let pointer {
            bytes.append(contentsOf: wire[0..<starts[written]])
            writeUInt16(0xC000 | UInt16(pointer))
        } else {
            bytes.append(contentsOf: wire)
        }
    }

    mutating func writeQuestion(_ question: DNSQuestion) {
        writeName(question.name)
        writeUInt16(question.type.rawValue)
        writeUInt16(question.questionClass & 0x7FFF | (question.unicastResponse ? 0x8000 : 0))
    }

    mutating func writeRecord(_ record: DNSResourceRecord) throws(DNSEncodingError) {
        writeName(record.name)
        writeUInt16(record.type.rawValue)
        writeUInt16(record.recordClass & 0x7FFF | (record.cacheFlush ? 0x8000 : 0))
        writeUInt32(record.ttl)
        let lengthOffset = bytes.count
        writeUInt16(0)
        let start = bytes.count
        try writeRData(record.data)
        let length = bytes.count - start
        guard length <= Int(UInt16.max) else { throw .rdataTooLong(type: record.type, bytes: length) }
        bytes[lengthOffset] = UInt8(length >> 8)
        bytes[lengthOffset + 1] = UInt8(truncatingIfNeeded: length)
    }

    mutating func writeRData(_ data: DNSRecordData) throws(DNSEncodingError) {
        switch data {
        case .a(let address):
            bytes.append(contentsOf: address.byteArray)
        case .aaaa(let address):
            bytes.append(contentsOf: address.byteArray)
        case .ptr(let target):
            writeName(target)
        case .srv(let priority, let weight, let port, let target):
            writeUInt16(priority)
            writeUInt16(weight)
            writeUInt16(port)
            writeName(target)
        case .txt(let strings):
            // RFC 6763 section 6.1: an empty TXT record is a single empty string.
            if strings.isEmpty { bytes.append(0) }
            for string in strings {
                guard string.count <= 255 else { throw .txtStringTooLong(bytes: string.count) }
                bytes.append(UInt8(string.count))
                bytes.append(contentsOf: string)
            }
        case .nsec(let next, let types):
            writeName(next)
            writeTypeBitmaps(types)
        case .unknown(let type, let raw):
            guard raw.count <= Int(UInt16.max) else { throw .rdataTooLong(type: type, bytes: raw.count) }
            bytes.append(contentsOf: raw)
        }
    }

    /// Writes RFC 4034 section 4.1.2 window blocks: sorted, without duplicates or trailing zero bytes.
    mutating func writeTypeBitmaps(_ types: [DNSRecordType]) {
        let sorted = Set(types.map(\.rawValue)).sorted()
        var index = 0
        while index < sorted.count {
            let window = sorted[index] >> 8
            var bitmap = [UInt8](repeating: 0, count: 32)
            var used = 0
            while index < sorted.count && sorted[index] >> 8 == window {
                let low = Int(sorted[index] & 0xFF)
                bitmap[low >> 3] |= 0x80 >> UInt8(low & 7)
                used = (low >> 3) + 1
                index += 1
            }
            bytes.append(UInt8(window))
            bytes.append(UInt8(used))
            bytes.append(contentsOf: bitmap[0..<used])
        }
    }
}
