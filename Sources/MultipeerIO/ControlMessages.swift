internal import Glibc

/// Builds and parses `cmsghdr` ancillary data by hand: the `CMSG_*` macros are not importable into Swift.
enum ControlMessages {
    private static let alignment = MemoryLayout<Int>.size
    private static func align(_ length: Int) -> Int { (length + alignment - 1) & ~(alignment - 1) }
    private static let headerSize = align(MemoryLayout<cmsghdr>.size)

    /// `CMSG_SPACE(length)`.
    static func space(_ length: Int) -> Int { headerSize + align(length) }

    /// Room for one `in6_pktinfo` (the larger of the two packet-info structures) plus slack.
    static let receiveCapacity = space(20) + space(20) + 64

    /// Encodes one control message with `payload` as its data.
    static func encode(level: Int32, type: Int32, payload: [UInt8]) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: space(payload.count))
        buffer.withUnsafeMutableBytes { raw in
            var header = cmsghdr()
            header.cmsg_len = headerSize + payload.count
            header.cmsg_level = level
            header.cmsg_type = type
            raw.storeBytes(of: header, as: cmsghdr.self)
            raw.baseAddress!.advanced(by: headerSize).copyMemory(from: payload, byteCount: payload.count)
        }
        return buffer
    }

    /// Calls `visit(level, type, data)` for each control message in the first `length` bytes of `buffer`.
    static func forEach(
        in buffer: UnsafeRawBufferPointer, length: Int, _ visit: (Int32, Int32, UnsafeRawBufferPointer) -> Void
    ) {
        var offset = 0
        let end = min(length, buffer.count)
        while offset + headerSize <= end {
            let header = buffer.loadUnaligned(fromByteOffset: offset, as: cmsghdr.self)
            let total = Int(header.cmsg_len)
            guard total >= headerSize, offset + total <= end else { return }
            let data = UnsafeRawBufferPointer(rebasing: buffer[(offset + headerSize)..<(offset + total)])
            visit(header.cmsg_level, header.cmsg_type, data)
            offset += align(total)
        }
    }
}
