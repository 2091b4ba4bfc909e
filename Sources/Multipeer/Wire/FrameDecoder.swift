/// Decodes a byte stream into frames, whether the bytes arrive all at once or one at a time.
///
/// Feed each read with ``append(_:)``, then call ``next()`` until it returns `nil` (more bytes needed)
/// before the next read. Used that way, the buffer never holds more than one frame
/// (12 + ``FrameLimits/maximumPayloadLength`` bytes) plus one read: a header is checked as soon as its
/// 12 bytes are buffered, so a frame declaring an oversized payload is refused before any of that payload
/// is kept, and a complete frame is taken out of the buffer as soon as it is decoded.
///
/// After an error the stream position is lost; the decoder stays failed and ``next()`` rethrows the error.
package struct FrameDecoder: Sendable {
    /// The bounds enforced on every frame.
    package let limits: FrameLimits
    private var buffer: [UInt8] = []
    /// Where unread bytes start in `buffer`; decoded bytes are dropped at the next append rather than after
    /// every frame, so a read holding many small frames moves its memory once.
    private var readIndex = 0
    private var failure: FrameDecodingError?
    /// Buffer capacity kept while idle; more is released once every buffered byte has been decoded.

    /// Creates a decoder.
    /// - Parameter limits: The bounds to enforce; protocol version 1 defaults.
    package init(limits: FrameLimits = .standard) {
        self.limits = limits
    }

    /// The number of received bytes not yet returned as frames.
    package var bufferedByteCount: Int { buffer.count - readIndex }

    /// Adds received bytes.
    /// - Parameter bytes: The bytes of one read, in stream order.
    package mutating func append(_ bytes: some Collection<UInt8>) {
        guard failure == nil else { return }
        compact()
        buffer.append(contentsOf: bytes)
    }

    /// Drops what was already decoded before more bytes are added, so the buffer is only the unread part of at
    /// most one frame plus this read (moving that part costs at most one frame's bytes per read, and keeps the
    /// buffer small enough to stay in cache: moving it only when full was slower).
    private mutating func compact() {
        guard readIndex > 0 else { return }
        buffer.removeSubrange(0..<readIndex)
        readIndex = 0
    }

    /// Appends the bytes of a read without going through an intermediate array.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        append(bytes.assumingMemoryBound(to: UInt8.self))
    }

    /// Lets `body` append bytes straight to the decoder's buffer (decrypting into it, for example); `body` must
    /// only append. Nothing happens once decoding has failed.
    /// - Returns: How many bytes `body` appended.
    mutating func fill<E: Error>(_ body: (inout [UInt8]) throws(E) -> Void) throws(E) -> Int {
        guard failure == nil else { return 0 }
        compact()
        let before = buffer.count
        try body(&buffer)
        return buffer.count - before
    }

    /// Frees the buffer's memory if every byte was decoded (the connection calls this when it is idle; a busy
    /// one keeps reusing the memory).
    mutating func releaseIdleBuffer() {
        guard readIndex == buffer.count, buffer.capacity > 0 else { return }
        buffer = []
        readIndex = 0
    }

    /// Decodes the next frame if all of its bytes have arrived.
    /// - Returns: The frame, or `nil` when more bytes are needed.
    /// - Throws: ``FrameDecodingError`` when the bytes cannot be a valid frame; the decoder stays failed.
    package mutating func next() throws(FrameDecodingError) -> Frame? {
        if let failure { throw failure }
        do throws(FrameDecodingError) {
            return try decodeNext()
        } catch {
            failure = error
            buffer = []
            readIndex = 0
            throw error
        }
    }

    /// If the next frame is a whole, valid `channelData` frame, lends its payload to `body` (straight from the
    /// buffer, no array made) and consumes it; otherwise does nothing, and ``next()`` decodes (or refuses)
    /// whatever comes next.
    /// - Returns: Whether a frame was handed to `body`.
    mutating func nextChannelData<E: Error>(_ body: (UInt32, UnsafeRawBufferPointer) throws(E) -> Void) throws(E)
        -> Bool
    {
        // Checked first, without lending the buffer: most frames that are not stream data stop here.
        guard failure == nil, bufferedByteCount >= Frame.headerLength,
            buffer[readIndex + 1] == FrameType.channelData.rawValue
        else { return false }
        let start = readIndex + Frame.headerLength
        guard
            let (channel, length) = buffer.withUnsafeBytes({
                channelDataHeader(UnsafeRawBufferPointer(rebasing: $0[readIndex...]))
            }),
            start + length <= buffer.count
        else { return false }
        try buffer.withUnsafeBytesTyped { bytes throws(E) in
            try body(channel, UnsafeRawBufferPointer(rebasing: bytes[start..<start + length]))
        }
        consume(through: start + length)
        return true
    }

    /// If the next frame is a whole, valid `message` frame, lends its fields and fragment data to `body`
    /// (straight from the buffer, no array made) and consumes it; otherwise does nothing, and ``next()`` decodes
    /// (or refuses) whatever comes next.
    /// - Returns: Whether a frame was handed to `body`.
    mutating func nextMessageFragment<E: Error>(
        _ body: (_ channel: UInt32, _ id: UInt32, _ totalLength: UInt64?, _ isLast: Bool, UnsafeRawBufferPointer)
            throws(E) -> Void
    ) throws(E) -> Bool {
        guard failure == nil, bufferedByteCount >= Frame.headerLength,
            buffer[readIndex + 1] == FrameType.message.rawValue
        else { return false }
        let h = readIndex
        let flags = buffer[h + 2]
        let channel = buffer.readBigEndianUInt32(at: h + 4)
        let length = Int(buffer.readBigEndianUInt32(at: h + 8))
        let start = h + Frame.headerLength
        guard buffer[h] == Frame.headerVersion, buffer[h + 3] == 0, channel != 0,
            flags & ~(Frame.MessageFlags.first | Frame.MessageFlags.last) == 0, length <= limits.maximumPayloadLength,
            start + length <= buffer.count
        else { return false }
        let end = start + length
        let fields: (id: UInt32, totalLength: UInt64?, isLast: Bool)
        let dataStart: Int
        do {
            // The reader shares the buffer: it must be gone before the buffer changes, or the change copies it.
            var reader = PayloadReader(bytes: buffer, type: .message, offset: start, end: end)
            guard let read = try? reader.readMessageFields(flags: flags, limits: limits) else { return false }
            fields = read
            dataStart = reader.offset
        }
        try buffer.withUnsafeBytesTyped { bytes throws(E) in
            try body(
                channel, fields.id, fields.totalLength, fields.isLast,
                UnsafeRawBufferPointer(rebasing: bytes[dataStart..<end]))
        }
        consume(through: end)
        return true
    }

    /// Marks the buffer as decoded up to `end` (a frame's end), emptying it when nothing is left.
    private mutating func consume(through end: Int) {
        readIndex = end
        if readIndex == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            readIndex = 0
        }
    }

    // MARK: - Cut-through for stream data

    /// Takes the next frame's header if it is a valid `channelData` header, from `input` or from the buffer
    /// (completed from `input`), leaving its payload to the caller: the payload is the next `length` bytes of
    /// the stream, and none of it is buffered here. Used with ``appendFrameBytes(from:)`` by a connection that
    /// reads plaintext, so stream bytes go from the socket's buffer to the stream's without a copy in between.
    /// - Parameter input: Received bytes not fed to the decoder yet; what was taken is removed from the front.
    /// - Returns: The frame's channel and payload length, or nil (then at most the rest of a header was
    ///   buffered, and ``appendFrameBytes(from:)`` and ``next()`` handle the frame).
    mutating func takeChannelDataHeader(from input: inout UnsafeRawBufferPointer) -> (channel: UInt32, length: Int)? {
        guard failure == nil else { return nil }
        let buffered = bufferedByteCount
        if buffered == 0 {
            guard let header = channelDataHeader(input) else { return nil }
            input = UnsafeRawBufferPointer(rebasing: input[Frame.headerLength...])
            return header
        }
        guard buffered < Frame.headerLength else { return nil }
        let count = min(Frame.headerLength - buffered, input.count)
        append(UnsafeRawBufferPointer(rebasing: input[..<count]))
        input = UnsafeRawBufferPointer(rebasing: input[count...])
        guard bufferedByteCount == Frame.headerLength,
            let header = buffer.withUnsafeBytes({
                channelDataHeader(UnsafeRawBufferPointer(rebasing: $0[readIndex...]))
            })
        else { return nil }
        buffer.removeAll(keepingCapacity: true)
        readIndex = 0
        return header
    }

    /// Buffers the bytes of `input` that belong to frames other than stream data: the rest of the frame
    /// started in the buffer, or (with an empty buffer) every whole frame up to a valid `channelData` header
    /// and at most the start of one more. Call ``next()`` until it returns nil afterwards, then
    /// ``takeChannelDataHeader(from:)`` again. After a decoding error the input is dropped.
    /// - Parameter input: Received bytes; what was buffered is removed from the front (at least one byte when
    ///   `input` is not empty and ``takeChannelDataHeader(from:)`` just returned nil).
    mutating func appendFrameBytes(from input: inout UnsafeRawBufferPointer) {
        guard failure == nil else {
            input = UnsafeRawBufferPointer(start: nil, count: 0)
            return
        }
        var take: Int
        let buffered = bufferedByteCount
        if buffered > 0 {
            if buffered < Frame.headerLength {
                take = Frame.headerLength - buffered
            } else {
                let length = Int(buffer.readBigEndianUInt32(at: readIndex + 8))
                // An oversized length is refused by next() before any payload is kept.
                take = length > limits.maximumPayloadLength ? 0 : Frame.headerLength + length - buffered
            }
        } else {
            take = 0
            // Whole frames at once, so a read of many small messages is buffered in one copy.
            while input.count - take >= Frame.headerLength {
                let header = UnsafeRawBufferPointer(rebasing: input[take...])
                if take > 0, channelDataHeader(header) != nil { break }
                let length = Int(header.loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian)
                guard length <= limits.maximumPayloadLength else {
                    take += Frame.headerLength  // next() refuses it from the header alone
                    break
                }
                take += Frame.headerLength + length
            }
            // A frame cut by the end of `input` (its length overshoots), or the start of a header: all of it.
            if input.count - take < Frame.headerLength { take = input.count }
        }
        take = min(take, input.count)
        append(UnsafeRawBufferPointer(rebasing: input[..<take]))
        input = UnsafeRawBufferPointer(rebasing: input[take...])
    }

    /// The channel and payload length in `bytes` if they start with a header ``next()`` would accept for a
    /// `channelData` frame.
    private func channelDataHeader(_ bytes: UnsafeRawBufferPointer) -> (channel: UInt32, length: Int)? {
        guard bytes.count >= Frame.headerLength, bytes[0] == Frame.headerVersion,
            bytes[1] == FrameType.channelData.rawValue, bytes[2] == 0, bytes[3] == 0
        else { return nil }
        let channel = bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self).bigEndian
        let length = Int(bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian)
        guard channel != 0, length <= limits.maximumPayloadLength else { return nil }
        return (channel, length)
    }

    /// Checks that the stream ended between frames; call it when the connection closes.
    /// - Throws: ``FrameDecodingError/truncatedStream(buffered:)`` if part of a frame is buffered, or the
    ///   error the decoder already failed with.
    package func finish() throws(FrameDecodingError) {
        if let failure { throw failure }
        if bufferedByteCount > 0 { throw .truncatedStream(buffered: bufferedByteCount) }
    }

    private mutating func decodeNext() throws(FrameDecodingError) -> Frame? {
        guard bufferedByteCount >= Frame.headerLength else { return nil }
        let h = readIndex
        let version = buffer[h]
        guard version == Frame.headerVersion else { throw .unknownVersion(version) }
        let type = FrameType(rawValue: buffer[h + 1])
        let flags = buffer[h + 2]
        guard buffer[h + 3] == 0 else { throw .reservedBitsSet(buffer[h + 3]) }
        let channel = buffer.readBigEndianUInt32(at: h + 4)
        let length = buffer.readBigEndianUInt32(at: h + 8)
        guard length <= limits.maximumPayloadLength else {
            throw .payloadTooLarge(length: length, limit: limits.maximumPayloadLength)
        }
        let start = h + Frame.headerLength
        let end = start + Int(length)
        guard end <= buffer.count else { return nil }
        let frame: Frame
        do {
            // The reader shares the buffer: it must be gone before the buffer changes, or the change copies it.
            var reader = PayloadReader(bytes: buffer, type: type, offset: start, end: end)
            frame = try reader.readFrame(flags: flags, channel: channel, limits: limits)
        }
        consume(through: end)
        return frame
    }
}

/// A cursor over one frame's payload.
private struct PayloadReader {
    let bytes: [UInt8]
    let type: FrameType
    var offset: Int
    let end: Int

    init(bytes: [UInt8], type: FrameType, offset: Int, end: Int) {
        self.bytes = bytes
        self.type = type
        self.offset = offset
        self.end = end
    }

    mutating func readFrame(flags: UInt8, channel: UInt32, limits: FrameLimits) throws(FrameDecodingError)
        -> Frame
    {
        guard FrameType.known.contains(type) else {
            return .unknown(type: type, flags: flags, channel: channel, payload: readRest())
        }
        if type.isConnectionLevel {
            guard channel == 0 else { throw .unexpectedChannel(type: type, channel: channel) }
        } else if type != .windowUpdate && channel == 0 {
            throw .unexpectedChannel(type: type, channel: channel)
        }
        let allowedFlags =
            type == .message
            ? Frame.MessageFlags.first | Frame.MessageFlags.last : type == .session ? SessionMessage.criticalFlag : 0
        guard flags & ~allowedFlags == 0 else { throw .unknownFlags(type: type, flags: flags) }
        let frame: Frame
        switch type {
        case .hello:
            let major = try readUInt8()
            let minor = try readUInt8()
            guard major == Frame.protocolMajorVersion else { throw .unsupportedVersion(major: major, minor: minor) }
            let capabilities = Frame.Capabilities(rawValue: try readUInt32())
            let name = try readString(
                "display name", length: Int(try readUInt8()), limit: limits.maximumDisplayNameLength,
                allowEmpty: false)
            let fingerprintLength = Int(try readUInt8())
            guard fingerprintLength <= limits.maximumFingerprintLength else {
                throw .fieldLength(
                    type: type, field: "fingerprint", length: fingerprintLength,
                    limit: limits.maximumFingerprintLength)
            }
            let fingerprint = try readBytes(fingerprintLength)
            var hello = Frame.Hello(
                majorVersion: major, minorVersion: minor, capabilities: capabilities, displayName: name,
                fingerprint: fingerprint)
            try readHelloFields(into: &hello, limits: limits)
            frame = .hello(hello)
        case .ping:
            frame = .ping(token: try readUInt64())
        case .pong:
            frame = .pong(token: try readUInt64())
        case .goodbye, .error:
            let code = try readUInt32()
            let text = try readString("text", length: end - offset, limit: limits.maximumTextLength)
            frame = type == .goodbye ? .goodbye(reason: code, text: text) : .error(code: code, text: text)
        case .channelOpen:
            let rawKind = try readUInt8()
            guard let kind = Frame.ChannelKind(rawValue: rawKind) else {
                throw .malformed(type: type, reason: "unknown channel kind \(rawKind)")
            }
            let window = try readUInt32()
            guard window <= SendWindow.maximumCredit else {
                throw .malformed(type: type, reason: "initial window \(window) exceeds 2^31-1")
            }
            let name = try readString(
                "name", length: Int(try readUInt8()), limit: limits.maximumChannelNameLength)
            frame = .channelOpen(channel: channel, kind: kind, name: name, initialWindow: window)
        case .channelData:
            frame = .channelData(channel: channel, bytes: readRest())
        case .channelClose:
            frame = .channelClose(channel: channel)
        case .channelReset:
            frame = .channelReset(channel: channel, code: try readUInt32())
        case .windowUpdate:
            let increment = try readUInt32()
            guard increment >= 1 && increment <= SendWindow.maximumCredit else {
                throw .malformed(type: type, reason: "increment \(increment) is not in 1...2^31-1")
            }
            frame = .windowUpdate(channel: channel, increment: increment)
        case .codeReveal:
            frame = .codeReveal(nonce: try readBytes(Frame.Hello.codeNonceLength))
        case .session:
            let kind = UInt16(try readUInt8()) << 8 | UInt16(try readUInt8())
            let length = end - offset
            guard length <= SessionMessage.maximumBodyLength else {
                throw .fieldLength(type: type, field: "body", length: length, limit: SessionMessage.maximumBodyLength)
            }
            frame = .session(
                SessionMessage(kind: kind, isCritical: flags & SessionMessage.criticalFlag != 0, body: readRest()))
        default:  // .message
            let (id, total, isLast) = try readMessageFields(flags: flags, limits: limits)
            frame = .message(
                channel: channel,
                fragment: Frame.MessageFragment(id: id, totalLength: total, isLast: isLast, bytes: readRest()))
        }
        guard offset == end else {
            throw .malformed(type: type, reason: "\(end - offset) byte(s) after the last field")
        }
        return frame
    }

    /// Reads the optional fields after a hello's fixed part: tag, length, value, until the payload ends. Unknown
    /// tags are skipped (a later minor version's fields); a known tag twice, or with a length its value cannot
    /// have, is refused.
    mutating func readHelloFields(into hello: inout Frame.Hello, limits: FrameLimits) throws(FrameDecodingError) {
        var seen: Set<UInt8> = []
        while offset < end {
            let tag = try readUInt8()
            let length = Int(try readUInt8())
            let value = try readBytes(length)
            guard let field = Frame.HelloField(rawValue: tag) else { continue }
            guard seen.insert(tag).inserted else {
                throw .malformed(type: type, reason: "field \(field) appears twice")
            }
            switch field {
            case .groupProof:
                guard (1...limits.maximumGroupProofLength).contains(length) else {
                    throw .fieldLength(
                        type: type, field: "group proof", length: length, limit: limits.maximumGroupProofLength)
                }
                hello.groupProof = value
            case .datagramPort:
                guard length == 2 else {
                    throw .malformed(type: type, reason: "a datagram port has 2 bytes, not \(length)")
                }
                hello.datagramPort = UInt16(value[0]) << 8 | UInt16(value[1])
            case .codeCommitment, .codeNonce:
                guard length == Frame.Hello.codeNonceLength else {
                    throw .malformed(type: type, reason: "\(field) has \(length) bytes, not 32")
                }
                if field == .codeCommitment { hello.codeCommitment = value } else { hello.codeNonce = value }
            case .maximumMessageLength:
                guard length == 4 else {
                    throw .malformed(type: type, reason: "a maximum message length has 4 bytes, not \(length)")
                }
                hello.maximumMessageLength = value.readBigEndianUInt32(at: 0)
            }
        }
    }

    /// Reads a message frame's fields before its data (id, and the total length on a first fragment) and checks
    /// them; `offset` is then at the fragment's data.
    mutating func readMessageFields(flags: UInt8, limits: FrameLimits) throws(FrameDecodingError)
        -> (id: UInt32, totalLength: UInt64?, isLast: Bool)
    {
        let id = try readUInt32()
        let isLast = flags & Frame.MessageFlags.last != 0
        guard flags & Frame.MessageFlags.first != 0 else { return (id, nil, isLast) }
        let length = try readUInt64()
        guard length <= limits.maximumMessageLength else {
            throw .messageTooLarge(length: length, limit: limits.maximumMessageLength)
        }
        let fragmentLength = UInt64(end - offset)
        guard fragmentLength <= length, !isLast || fragmentLength == length else {
            throw .malformed(
                type: type, reason: "first fragment of \(fragmentLength) bytes contradicts total length \(length)")
        }
        return (id, length, isLast)
    }

    @inline(__always) mutating func need(_ count: Int) throws(FrameDecodingError) {
        if offset + count > end { throw .truncated(type: type, needed: offset + count - end) }
    }

    mutating func readUInt8() throws(FrameDecodingError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func readUInt32() throws(FrameDecodingError) -> UInt32 {
        try need(4)
        defer { offset += 4 }
        return bytes.readBigEndianUInt32(at: offset)
    }

    mutating func readUInt64() throws(FrameDecodingError) -> UInt64 {
        let high = UInt64(try readUInt32())
        return high << 32 | UInt64(try readUInt32())
    }

    mutating func readBytes(_ count: Int) throws(FrameDecodingError) -> [UInt8] {
        try need(count)
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func readRest() -> [UInt8] {
        defer { offset = end }
        return Array(bytes[offset..<end])
    }

    mutating func readString(_ field: String, length: Int, limit: Int, allowEmpty: Bool = true)
        throws(FrameDecodingError) -> String
    {
        guard length <= limit, allowEmpty || length > 0 else {
            throw .fieldLength(type: type, field: field, length: length, limit: limit)
        }
        try need(length)
        defer { offset += length }
        guard let string = String(validating: bytes[offset..<offset + length], as: UTF8.self) else {
            throw .invalidUTF8(type: type, field: field)
        }
        return string
    }
}

extension [UInt8] {
    @inline(__always) func readBigEndianUInt32(at index: Int) -> UInt32 {
        UInt32(self[index]) << 24 | UInt32(self[index + 1]) << 16 | UInt32(self[index + 2]) << 8
            | UInt32(self[index + 3])
    }
}
