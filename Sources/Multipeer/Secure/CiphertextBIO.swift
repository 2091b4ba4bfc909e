internal import COpenSSL

/// The ciphertext on the network side of one ``TLSSession``: what arrived from the socket and OpenSSL has not
/// read yet, and what OpenSSL wrote and the connection layer has not taken yet.
///
/// OpenSSL reaches it through a BIO of our own kind (``CiphertextBIO``) rather than a memory BIO or a BIO
/// pair, for three reasons:
/// - Idle memory. A memory BIO's buffer keeps the largest size it ever grew to, and a BIO pair allocates two
///   fixed ring buffers for its whole life. Here both directions are plain arrays that are released as soon
///   as they are empty, so an idle session holds no ciphertext storage at all.
/// - Fewer copies. ``drainOutgoing(_:)`` lends the array OpenSSL wrote into to the socket write (which copies
///   only what the kernel did not take), where a memory BIO or BIO pair would need one more copy out of
///   OpenSSL's buffer; and ``receive(_:)-([UInt8])`` adopts the caller's array without copying when nothing else
///   is waiting.
/// - No size limit to manage: a BIO pair's fixed buffer would make large writes stall half-way (and need
///   `SSL_MODE_ENABLE_PARTIAL_WRITE` and retries), while this BIO accepts every write in full.
/// The cost is a function call per OpenSSL read or write, which is two calls per 16 KB record.
final class CiphertextBuffers {
    /// Received ciphertext; OpenSSL has read everything before `incomingOffset`.
    private var incoming: [UInt8] = []
    /// How much of `incoming` OpenSSL has read.
    private var incomingOffset = 0
    /// Ciphertext OpenSSL wrote, in order, not yet taken.
    private var outgoing: [UInt8] = []

    /// The number of received bytes OpenSSL has not read yet.
    var incomingByteCount: Int { incoming.count - incomingOffset }

    /// The number of bytes waiting to be sent.
    var outgoingByteCount: Int { outgoing.count }

    /// Queues received ciphertext after any still unread; when nothing is unread, adopts the array itself
    /// (no copy as long as the caller keeps no other reference to it).
    func receive(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        if incomingByteCount == 0 {
            incoming = bytes
            incomingOffset = 0
        } else {
            compactIncoming()
            incoming.append(contentsOf: bytes)
        }
    }

    /// Queues a copy of received ciphertext after any still unread.
    func receive(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        compactIncoming()
        incoming.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
    }

    /// Lends the unread received bytes to `body`, which returns how many it used (they count as read).
    func consumeIncoming<E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> Int) throws(E) {
        guard incomingByteCount > 0 else { return }
        let offset = incomingOffset
        incomingOffset += try incoming.withUnsafeBytesTyped { bytes throws(E) in
            try body(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        }
        if incomingOffset == incoming.count {
            incoming.removeAll(keepingCapacity: true)
            incomingOffset = 0
        }
    }

    /// Lets `body` append to the outgoing bytes (records sealed without OpenSSL's record layer).
    func appendOutgoing<E: Error>(_ body: (inout [UInt8]) throws(E) -> Void) throws(E) {
        try body(&outgoing)
    }

    /// Drops the bytes OpenSSL has read, so appending does not keep them alive.
    private func compactIncoming() {
        guard incomingOffset > 0 else { return }
        incoming.removeSubrange(0..<incomingOffset)
        incomingOffset = 0
    }

    /// Copies up to `count` unread bytes to `destination` for OpenSSL; returns how many (0 when none are
    /// waiting). The storage is kept for the next bytes until ``releaseIdle()``.
    func read(into destination: UnsafeMutableRawPointer, count: Int) -> Int {
        let available = incomingByteCount
        guard available > 0, count > 0 else { return 0 }
        let length = min(available, count)
        incoming.withUnsafeBytes { source in
            destination.copyMemory(from: source.baseAddress! + incomingOffset, byteCount: length)
        }
        incomingOffset += length
        if incomingOffset == incoming.count {
            incoming.removeAll(keepingCapacity: true)
            incomingOffset = 0
        }
        return length
    }

    /// Appends ciphertext OpenSSL wrote.
    func write(_ bytes: UnsafeBufferPointer<UInt8>) {
        outgoing.append(contentsOf: bytes)
    }

    /// Everything waiting to be sent, removed from here without copying; `[]` if nothing is.
    func takeOutgoing() -> [UInt8] {
        var bytes: [UInt8] = []
        swap(&bytes, &outgoing)
        return bytes
    }

    /// Hands everything waiting to be sent to `body`, then empties the buffer but keeps its memory for the next
    /// records (a new buffer for every batch would cost an allocation and its page faults).
    func drainOutgoing(_ body: (UnsafeRawBufferPointer) -> Void) {
        guard !outgoing.isEmpty else { return }
        outgoing.withUnsafeBytes(body)
        outgoing.removeAll(keepingCapacity: true)
    }

    /// Frees the memory of whichever buffer holds nothing.
    func releaseIdle() {
        if outgoing.isEmpty { outgoing = [] }
        if incomingByteCount == 0 {
            incoming = []
            incomingOffset = 0
        }
    }
}

/// The BIO kind through which OpenSSL reads and writes a ``CiphertextBuffers``; see there for why.
///
/// A BIO of this kind never blocks and never fails a write: a read with nothing waiting returns "retry", which
/// OpenSSL reports as `SSL_ERROR_WANT_READ`. It holds an unretained pointer to its buffers, which the owning
/// ``TLSHandshake`` keeps alive for as long as its `SSL` (and so the BIO) exists.
enum CiphertextBIO {
    /// Owns the process-wide `BIO_METHOD`. `@unchecked Sendable`: it is set up once and never changed, and
    /// OpenSSL only reads a `BIO_METHOD` after that, from any thread.
    private final class Method: @unchecked Sendable {
        let pointer: OpaquePointer

        init?() {
            let type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK
            guard let method = BIO_meth_new(type, "swift-multipeer ciphertext") else { return nil }
            pointer = method
            guard
                BIO_meth_set_write_ex(
                    method,
                    { bio, data, count, written in
                        CiphertextBIO.write(bio: bio, data: data, count: count, written: written)
                    }) == 1,
                BIO_meth_set_read_ex(
                    method,
                    { bio, data, count, read in
                        CiphertextBIO.read(bio: bio, data: data, count: count, read: read)
                    }) == 1,
                BIO_meth_set_ctrl(method, { bio, command, _, _ in CiphertextBIO.control(bio: bio, command: command) })
                    == 1,
                BIO_meth_set_create(
                    method,
                    { bio in
                        BIO_set_init(bio, 1)
                        return 1
                    }) == 1
            else { return nil }
        }

        deinit {
            BIO_meth_free(pointer)
        }
    }

    /// The method, made on first use; nil if OpenSSL could not make it.
    private static let method = Method()

    /// A new BIO reading from and writing to `buffers`, which must outlive it. The caller owns the BIO
    /// (`SSL_set_bio` hands it to an `SSL`).
    static func make(buffers: CiphertextBuffers) -> OpaquePointer? {
        guard let method, let bio = BIO_new(method.pointer) else { return nil }
        BIO_set_data(bio, Unmanaged.passUnretained(buffers).toOpaque())
        return bio
    }

    /// The buffers behind `bio`.
    private static func buffers(of bio: OpaquePointer?) -> CiphertextBuffers? {
        guard let bio, let data = BIO_get_data(bio) else { return nil }
        return Unmanaged<CiphertextBuffers>.fromOpaque(data).takeUnretainedValue()
    }

    /// `BIO_write_ex`: takes all `count` bytes.
    private static func write(
        bio: OpaquePointer?, data: UnsafePointer<CChar>?, count: Int, written: UnsafeMutablePointer<Int>?
    ) -> Int32 {
        guard let buffers = buffers(of: bio) else { return 0 }
        multipeer_bio_clear_retry_flags(bio)
        if let data, count > 0 {
            let bytes = UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self)
            buffers.write(UnsafeBufferPointer(start: bytes, count: count))
        }
        written?.pointee = count
        return 1
    }

    /// `BIO_read_ex`: up to `count` bytes, or "retry" when none are waiting.
    private static func read(
        bio: OpaquePointer?, data: UnsafeMutablePointer<CChar>?, count: Int, read: UnsafeMutablePointer<Int>?
    ) -> Int32 {
        read?.pointee = 0
        guard let buffers = buffers(of: bio), let data else { return 0 }
        multipeer_bio_clear_retry_flags(bio)
        let length = buffers.read(into: data, count: count)
        guard length > 0 else {
            multipeer_bio_set_retry_read(bio)
            return 0
        }
        read?.pointee = length
        return 1
    }

    /// `BIO_ctrl`: flushing succeeds (writes are complete at once), pending reports the unread input, and
    /// everything else is unsupported (0), which is what OpenSSL expects from a simple source/sink BIO.
    private static func control(bio: OpaquePointer?, command: Int32) -> Int {
        switch command {
        case BIO_CTRL_FLUSH: return 1
        case BIO_CTRL_PENDING: return buffers(of: bio)?.incomingByteCount ?? 0
        default: return 0
        }
    }
}
