/// A few bytes a layer above puts in front of a message without copying the message: the scheduler sends them
/// as the message's first bytes (in the same fragment, or gathered before data written straight from the
/// caller's array), so the peer receives one message of `count + body.count` bytes. Held inline, no allocation.
package struct MessagePrefix: Sendable, Hashable {
    /// No prefix (computed: no lazily initialized global to check on every use).
    package static var none: MessagePrefix { MessagePrefix() }

    /// Nine bytes inline; with the count, the whole value takes 16 bytes.
    private var storage: (UInt64, UInt8) = (0, 0)
    private var length: UInt8 = 0

    /// How many bytes it holds.
    package var count: Int { Int(length) }

    private init() {}

    /// One byte, then a 64-bit number in network byte order (nine bytes).
    package init(_ byte: UInt8, bigEndian number: UInt64) {
        withUnsafeMutableBytes(of: &storage) { raw in
            raw[0] = byte
            raw.storeBytes(of: number.bigEndian, toByteOffset: 1, as: UInt64.self)
        }
        length = 9
    }

    /// The bytes, as a collection (for tests and the rare copying paths).
    package var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Lends the bytes.
    package func withUnsafeBytes<Result, Failure: Error>(
        _ body: (UnsafeRawBufferPointer) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        var storage = storage
        let count = count
        return try Swift.withUnsafeBytes(of: &storage) { (raw: UnsafeRawBufferPointer) throws(Failure) -> Result in
            try body(UnsafeRawBufferPointer(rebasing: raw[0..<count]))
        }
    }

    // Bytes past `count` are always zero, so equal bytes are equal stored values.
    package static func == (lhs: MessagePrefix, rhs: MessagePrefix) -> Bool {
        lhs.length == rhs.length && lhs.storage.0 == rhs.storage.0 && lhs.storage.1 == rhs.storage.1
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(length)
        hasher.combine(storage.0)
        hasher.combine(storage.1)
    }
}

/// A message on its way to the scheduler: a prefix and the caller's bytes, sent as one message.
package struct OutboundMessage: Sendable {
    /// What goes first.
    package var prefix: MessagePrefix
    /// The caller's bytes, never copied before they are encoded.
    package var body: [UInt8]

    /// A message without a prefix.
    package init(_ body: [UInt8]) {
        self.prefix = .none
        self.body = body
    }

    /// `prefix` then `body`, as one message.
    package init(prefix: MessagePrefix, body: [UInt8]) {
        self.prefix = prefix
        self.body = body
    }

    /// The message's length on the wire.
    package var count: Int { prefix.count + body.count }

    /// The whole message, copied (for paths that need one array).
    package var joined: [UInt8] {
        guard prefix.count > 0 else { return body }
        var bytes = prefix.bytes
        bytes.append(contentsOf: body)
        return bytes
    }
}
