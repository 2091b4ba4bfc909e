/// Encodes frames into their wire form (see `docs/PROTOCOL.md` section 2), refusing any frame the peer's
/// ``FrameDecoder`` would reject, so a bug here surfaces as an error at the sender, not as a dropped
/// connection.
package struct FrameEncoder: Sendable {
    /// The bounds every encoded frame must respect; use the same values as the peer's decoder.
    package let limits: FrameLimits

    /// Creates an encoder.
    /// - Parameter limits: The bounds to enforce; protocol version 1 defaults.
    package init(limits: FrameLimits = .standard) {
        self.limits = limits
    }

    /// Encodes one frame.
    /// - Parameter frame: The frame to encode.
    /// - Returns: The 12-byte header followed by the payload.
    /// - Throws: ``FrameEncodingError`` if the frame breaks a rule of its layout or a limit.
    package func encode(_ frame: Frame) throws(FrameEncodingError) -> [UInt8] {
        var bytes: [UInt8] = []
        try encode(frame, into: &bytes)
        return bytes
    }

    /// Appends one encoded frame to `bytes`; on error `bytes` is left as it was.
    /// - Parameters:
    ///   - frame: The frame to encode.
    ///   - bytes: The buffer to append to.
    /// - Throws: ``FrameEncodingError`` if the frame breaks a rule of its layout or a limit.
    package func encode(_ frame: Frame, into bytes: inout [UInt8]) throws(FrameEncodingError) {
        let type = frame.type
        let channel = frame.channel
        if type.isConnectionLevel || frame.isUnknown {
            // Unknown types carry whatever channel they were given.
            if type.isConnectionLevel && channel != 0 { throw .unexpectedChannel(type: type, channel: channel) }
        } else if type != .windowUpdate && channel == 0 {
            throw .unexpectedChannel(type: type, channel: channel)
        }
        try appendFrame(type: type, channel: channel, to: &bytes) { bytes throws(FrameEncodingError) in
            try appendPayload(of: frame, to: &bytes)
        }
    }

    /// Appends a `channelData` frame carrying `data`, without making a ``Frame`` (no copy of the bytes
    /// before this one); on error `bytes` is left as it was.
    /// - Parameters:
    ///   - channel: The channel (not 0).
    ///   - data: The payload.
    ///   - bytes: The buffer to append to.
    /// - Throws: ``FrameEncodingError`` like ``encode(_:into:)`` for the same frame.
    ///   - payloadFollows: Append only the header: the caller sends `data` right after it (a gathering write).
    package func encodeChannelData(
        channel: UInt32, _ data: UnsafeRawBufferPointer, into bytes: inout [UInt8], payloadFollows: Bool = false
    ) throws(FrameEncodingError) {
        guard channel != 0 else { throw .unexpectedChannel(type: .channelData, channel: channel) }
        let deferred = payloadFollows ? data.count : 0
        try appendFrame(type: .channelData, channel: channel, to: &bytes, deferred: deferred) {
            bytes throws(FrameEncodingError) in
            if !payloadFollows { bytes.append(contentsOf: data) }
            return 0
        }
    }

    /// Appends a `message` frame carrying one fragment whose data is `data`, without making a ``Frame``; on
    /// error `bytes` is left as it was.
    /// - Parameters:
    ///   - channel: The channel (not 0).
    ///   - id: The message id.
    ///   - totalLength: The message's length, on its first fragment only.
    ///   - isLast: Whether this is the message's last fragment.
    ///   - leading: Bytes of the fragment's data before `data` (a ``MessagePrefix``), always appended.
    ///   - data: The fragment's data (after `leading`).
    ///   - bytes: The buffer to append to.
    ///   - payloadFollows: Append only the header, the fragment's fields and `leading`: the caller sends `data`
    ///     right after them (a gathering write).
    /// - Throws: ``FrameEncodingError`` like ``encode(_:into:)`` for the same frame.
    package func encodeMessageFragment(
        channel: UInt32, id: UInt32, totalLength: UInt64?, isLast: Bool,
        leading: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0), _ data: UnsafeRawBufferPointer,
        into bytes: inout [UInt8], payloadFollows: Bool = false
    ) throws(FrameEncodingError) {
        guard channel != 0 else { throw .unexpectedChannel(type: .message, channel: channel) }
        let deferred = payloadFollows ? data.count : 0
        try appendFrame(type: .message, channel: channel, to: &bytes, deferred: deferred) {
            bytes throws(FrameEncodingError) in
            try appendFragment(
                id: id, totalLength: totalLength, isLast: isLast, leading: leading, data, to: &bytes,
                appendingData: !payloadFollows)
        }
    }

    /// Appends the header, then the payload `body` appends (returning the flags), then patches the length
    /// and flags; removes everything it appended if `body` or the length check fails.
    /// - Parameter deferred: Payload bytes the caller sends after these (counted in the length, not appended).
    private func appendFrame(
        type: FrameType, channel: UInt32, to bytes: inout [UInt8], deferred: Int = 0,
        _ body: (inout [UInt8]) throws(FrameEncodingError) -> UInt8
    ) throws(FrameEncodingError) {
        let start = bytes.count
        var flags: UInt8 = 0
        bytes.append(contentsOf: [Frame.headerVersion, type.rawValue, 0, 0])
        bytes.appendBigEndian(channel)
        bytes.appendBigEndian(UInt32(0))  // length, patched below
        do throws(FrameEncodingError) {
            flags = try body(&bytes)
        } catch {
            bytes.removeSubrange(start...)
            throw error
        }
        let length = bytes.count - start - Frame.headerLength + deferred
        guard length <= limits.maximumPayloadLength else {
            bytes.removeSubrange(start...)
            throw .payloadTooLarge(length: length, limit: limits.maximumPayloadLength)
        }
        bytes[start + 2] = flags
        let lengthField = UInt32(length)
        for index in 0..<4 {
            bytes[start + 8 + index] = UInt8(truncatingIfNeeded: lengthField >> (24 - 8 * index))
        }
    }

    /// Appends the payload and returns the header flags.
    private func appendPayload(of frame: Frame, to bytes: inout [UInt8]) throws(FrameEncodingError) -> UInt8 {
        switch frame {
        case .hello(let hello):
            let name = Array(hello.displayName.utf8)
            try check(.hello, "display name", name.count, limit: limits.maximumDisplayNameLength, allowEmpty: false)
            try check(.hello, "fingerprint", hello.fingerprint.count, limit: limits.maximumFingerprintLength)
            bytes.append(hello.majorVersion)
            bytes.append(hello.minorVersion)
            bytes.appendBigEndian(hello.capabilities.rawValue)
            bytes.append(UInt8(name.count))
            bytes.append(contentsOf: name)
            bytes.append(UInt8(hello.fingerprint.count))
            bytes.append(contentsOf: hello.fingerprint)
            if !hello.groupProof.isEmpty {
                try check(.hello, "group proof", hello.groupProof.count, limit: limits.maximumGroupProofLength)
                Self.appendHelloField(.groupProof, hello.groupProof, to: &bytes)
            }
            if let port = hello.datagramPort {
                Self.appendHelloField(.datagramPort, [UInt8(port >> 8), UInt8(port & 0xFF)], to: &bytes)
            }
            for (field, value) in [
                (Frame.HelloField.codeCommitment, hello.codeCommitment), (.codeNonce, hello.codeNonce),
            ]
            where !value.isEmpty {
                guard value.count == Frame.Hello.codeNonceLength else {
                    throw .invalidField(type: .hello, reason: "\(field) has \(value.count) bytes, not 32")
                }
                Self.appendHelloField(field, value, to: &bytes)
            }
            if let maximum = hello.maximumMessageLength {
                var value: [UInt8] = []
                value.appendBigEndian(maximum)
                Self.appendHelloField(.maximumMessageLength, value, to: &bytes)
            }
        case .ping(let token), .pong(let token):
            bytes.appendBigEndian(token)
        case .goodbye(let code, let text), .error(let code, let text):
            let utf8 = Array(text.utf8)
            try check(frame.type, "text", utf8.count, limit: limits.maximumTextLength, lengthPrefixed: false)
            bytes.appendBigEndian(code)
            bytes.append(contentsOf: utf8)
        case .channelOpen(_, let kind, let name, let initialWindow):
            let utf8 = Array(name.utf8)
            try check(.channelOpen, "name", utf8.count, limit: limits.maximumChannelNameLength)
            guard initialWindow <= SendWindow.maximumCredit else {
                throw .invalidField(type: .channelOpen, reason: "initial window \(initialWindow) exceeds 2^31-1")
            }
            bytes.append(kind.rawValue)
            bytes.appendBigEndian(initialWindow)
            bytes.append(UInt8(utf8.count))
            bytes.append(contentsOf: utf8)
        case .channelData(_, let data):
            bytes.append(contentsOf: data)
        case .channelClose:
            break
        case .channelReset(_, let code):
            bytes.appendBigEndian(code)
        case .windowUpdate(_, let increment):
            guard increment >= 1 && increment <= SendWindow.maximumCredit else {
                throw .invalidField(type: .windowUpdate, reason: "increment \(increment) is not in 1...2^31-1")
            }
            bytes.appendBigEndian(increment)
        case .message(_, let fragment):
            return try appendFragment(
                id: fragment.id, totalLength: fragment.totalLength, isLast: fragment.isLast, fragment.bytes, to: &bytes)
        case .codeReveal(let nonce):
            guard nonce.count == Frame.Hello.codeNonceLength else {
                throw .invalidField(type: .codeReveal, reason: "a nonce has 32 bytes, not \(nonce.count)")
            }
            bytes.append(contentsOf: nonce)
        case .session(let message):
            try check(
                .session, "body", message.body.count, limit: SessionMessage.maximumBodyLength, lengthPrefixed: false)
            bytes.append(UInt8(message.kind >> 8))
            bytes.append(UInt8(message.kind & 0xFF))
            bytes.append(contentsOf: message.body)
            return message.isCritical ? SessionMessage.criticalFlag : 0
        case .unknown(let type, let flags, _, let payload):
            guard !FrameType.known.contains(type) else {
                throw .invalidField(type: type, reason: "a known type cannot be encoded as an unknown frame")
            }
            bytes.append(contentsOf: payload)
            return flags
        }
        return 0
    }

    /// Appends one optional hello field: its tag, its length and its value (at most 255 bytes).
    private static func appendHelloField(_ field: Frame.HelloField, _ value: [UInt8], to bytes: inout [UInt8]) {
        bytes.append(field.rawValue)
        bytes.append(UInt8(value.count))
        bytes.append(contentsOf: value)
    }

    /// Appends a message fragment's payload and returns its flags.
    private func appendFragment(
        id: UInt32, totalLength: UInt64?, isLast: Bool,
        leading: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0), _ data: some Collection<UInt8>,
        to bytes: inout [UInt8], appendingData: Bool = true
    ) throws(FrameEncodingError) -> UInt8 {
        let count = leading.count + data.count
        var flags: UInt8 = isLast ? Frame.MessageFlags.last : 0
        bytes.appendBigEndian(id)
        if let total = totalLength {
            flags |= Frame.MessageFlags.first
            guard total <= limits.maximumMessageLength else {
                throw .invalidField(
                    type: .message, reason: "length \(total) exceeds the limit of \(limits.maximumMessageLength)")
            }
            guard UInt64(count) <= total, !isLast || count == total else {
                throw .invalidField(
                    type: .message, reason: "first fragment of \(count) bytes contradicts total length \(total)")
            }
            bytes.appendBigEndian(total)
        }
        bytes.append(contentsOf: leading)
        if appendingData { bytes.append(contentsOf: data) }
        return flags
    }

    private func check(
        _ type: FrameType, _ field: String, _ length: Int, limit: Int, allowEmpty: Bool = true,
        lengthPrefixed: Bool = true
    ) throws(FrameEncodingError) {
        // Length prefixes are one byte, so 255 caps those fields whatever the configuration says.
        let limit = lengthPrefixed ? min(limit, 255) : limit
        guard length <= limit, allowEmpty || length > 0 else {
            throw .fieldLength(type: type, field: field, length: length, limit: limit)
        }
    }
}

extension Frame {
    var isUnknown: Bool {
        if case .unknown = self { return true }
        return false
    }
}

extension [UInt8] {
    @inline(__always) mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always) mutating func appendBigEndian(_ value: UInt64) {
        appendBigEndian(UInt32(truncatingIfNeeded: value >> 32))
        appendBigEndian(UInt32(truncatingIfNeeded: value))
    }
}
