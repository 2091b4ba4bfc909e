/// The unreliable datagram path, format version 2: how messages sent with Apple's `.unreliable` mode travel
/// between two connected peers as single UDP datagrams protected by AES-256-GCM, with keys from the TLS session.
///
/// ## Keys
///
/// Once the TLS 1.3 handshake of a connection has finished, both sides call `SSL_export_keying_material`
/// (RFC 8446 section 7.5) with the label `EXPORTER-swift-multipeer datagram` (33 ASCII bytes, no terminating
/// zero), an empty context (in TLS 1.3 the same as no context) and a length of 80 bytes. The "dialer" is the
/// side that opened the TCP connection, the "acceptor" the side that accepted it. The 80 bytes are split in this
/// fixed order (offsets in bytes):
///
/// | Offset | Size | Field                                                                                   |
/// |-------:|-----:|-----------------------------------------------------------------------------------------|
/// |      0 |   32 | base secret, dialer to acceptor                                                         |
/// |     32 |   32 | base secret, acceptor to dialer                                                         |
/// |     64 |    8 | the dialer's receive id (big-endian): written in the packets the acceptor sends it      |
/// |     72 |    8 | the acceptor's receive id (big-endian): written in the packets the dialer sends it      |
///
/// Each side seals with its outgoing direction and writes the far side's receive id; it opens with the incoming
/// direction the packets carrying its own receive id. Receive ids let one UDP socket serve every connection of a
/// process: the id picks the connection (and so the keys), never the source address, so a peer whose address or
/// port changes keeps working. Both sides know both ids without exchanging them.
///
/// ## Key generations
///
/// A direction's packets are numbered by a counter (see the packet below) and grouped into generations of
/// 2^20 = 1,048,576 consecutive counters (``generationShift``): generation `g = counter >> 20`. Each generation has
/// its own key and IV, derived from the direction's base secret with HKDF-Expand (RFC 5869, SHA-256, the base
/// secret as the pseudorandom key):
///
///     key(g) = HKDF-Expand(secret, "swift-multipeer datagram key" ‖ g as 8 big-endian bytes, 32)
///     iv(g)  = HKDF-Expand(secret, "swift-multipeer datagram iv"  ‖ g as 8 big-endian bytes, 12)
///
/// The generation follows from the counter every packet carries, so no field says which key was used. Why 2^20:
/// the confidentiality bound of AES-GCM grows with the square of the blocks encrypted under one key, and TLS 1.3
/// (RFC 8446 section 5.5) stops at 2^24.5 records of 2^10 blocks (2^34.5 blocks) for a margin of 2^-57. A packet
/// carries at most 65,471 bytes, 4,092 blocks plus 2 of additional data (under 2^12), so a generation encrypts at
/// most 2^32 blocks: 2^2.5 times fewer than TLS allows, which puts the bound near 2^-62; with the default
/// 1,216-byte payloads (78 blocks) it is near 2^-73. Forgery attempts do not wear a key out in any comparable way
/// (each succeeds with probability about 2^-116 for the largest packets), but they are counted per connection
/// (``DatagramStatistics``). A change of generation costs two HMAC-SHA-256 and one AES key schedule per side.
///
/// A receiver derives keys only for the generation of its replay window's newest counter (0 before any packet)
/// and the next one, and keeps the previous generation's while the window still reaches into it. A packet of a
/// generation beyond the next is dropped unread (``DatagramRejection/tooFarAhead``), so a forged far-future
/// counter cannot make it derive keys; the price is that if more than one whole generation of a direction's
/// packets is lost in a row (over a million), that direction's later datagrams are dropped too, and unreliable
/// messages of that connection stop arriving until it reconnects.
///
/// ## Packet
///
/// One UDP datagram carries exactly one packet; all integers are big-endian:
///
/// | Offset | Size | Field                                                                                   |
/// |-------:|-----:|-----------------------------------------------------------------------------------------|
/// |      0 |    1 | format: `0xD2` (datagram format version 2)                                              |
/// |      1 |    3 | reserved, zero                                                                          |
/// |      4 |    8 | receiver connection id: the receiving side's receive id                                 |
/// |     12 |    8 | counter: 0 for the first packet in a direction, then +1 per packet, always below 2^48   |
/// |     20 |    n | ciphertext: the payload encrypted with AES-256-GCM (n = payload length, 0 to 65,471)    |
/// |   20+n |   16 | the GCM authentication tag                                                              |
///
/// The first 20 bytes are the header; the overhead is 36 bytes. Encryption is AES-256-GCM with the key of the
/// counter's generation, the header as additional authenticated data, and as the 12-byte nonce that generation's
/// IV XOR (4 zero bytes followed by the counter as 8 big-endian bytes), the TLS 1.3 construction (RFC 8446 section
/// 5.3). Version 1 (`0xD1`) used one key for the whole connection; a version 1 packet is malformed here.
/// A sender never reuses a counter, so never a nonce: after 2^48 packets in one direction it refuses to seal
/// (``DatagramError/counterExhausted``); the connection then sends on its stream only, or reconnects.
///
/// Packets are 36 to 65,507 bytes (the largest UDP payload over IPv4). A receiver drops, without answering:
/// - packets outside those bounds, with another format byte, with non-zero reserved bytes, or with a counter of
///   2^48 or more (malformed; checked before any cryptography);
/// - packets whose receive id belongs to no connection (unknown receiver);
/// - packets whose counter the connection's ``ReplayWindow`` has seen or left behind (replayed, too old), or
///   whose generation is beyond the next one (too far ahead), checked before decrypting;
/// - packets that fail authentication. Only a packet that authenticates moves the replay window.
///
/// ## Size
///
/// Packets are never fragmented by this layer, and senders keep them within the path MTU so IP does not fragment
/// them either: ``DatagramSizing/maximumPayload(pathMTU:family:)``, by default 1,216 payload bytes over IPv4 and
/// 1,196 over IPv6 (a path MTU of 1,280 minus the IP and UDP headers and the 36 bytes of overhead). The payload is
/// whatever the connection layer puts in it; this layer adds no inner framing. An unreliable message larger than
/// one datagram's payload is not fragmented: the connection layer sends it over the reliable TLS stream instead,
/// where it is still delivered, in order with the reliable traffic.
///
/// ## Delivery
///
/// Datagrams may be lost, duplicated by the network (a duplicate is dropped as a replay) or reordered (a packet
/// up to 1,023 counters behind the newest one seen is still delivered, once). There is no acknowledgement and no
/// retransmission.
enum DatagramFormat {
    /// The first byte of every format version 2 packet.
    static let version: UInt8 = 0xD2
    /// Bytes of the header: format, reserved, receiver connection id, counter.
    static let headerLength = 20
    /// Bytes of the GCM authentication tag at the end of a packet.
    static let tagLength = 16
    /// Bytes a packet adds to its payload: the header and the tag.
    static let overhead = headerLength + tagLength
    /// The largest packet: the largest UDP payload over IPv4 (65,535 − 20 − 8).
    static let maximumPacketLength = 65_507
    /// The largest payload one packet can carry.
    static let maximumPayloadLength = maximumPacketLength - overhead
    /// The number of counters a direction can use: counters are 0 to 2^48 − 1.
    static let counterLimit: UInt64 = 1 << 48
    /// A packet's key generation is its counter shifted right by this: 2^20 packets per key, at most 2^32 AES
    /// blocks even for the largest packets, well inside AES-GCM's limits (see "Key generations" above).
    static let generationShift: UInt64 = 20
}

/// The 20-byte header of a datagram packet: the receiver connection id and the counter (the format and reserved
/// bytes are fixed).
struct DatagramHeader: Hashable, Sendable {
    /// The receiving side's receive id.
    var receiverID: UInt64
    /// The packet's counter, below ``DatagramFormat/counterLimit``.
    var counter: UInt64

    /// Creates a header.
    /// - Parameters:
    ///   - receiverID: The receiving side's receive id.
    ///   - counter: The packet's counter.
    init(receiverID: UInt64, counter: UInt64) {
        self.receiverID = receiverID
        self.counter = counter
    }

    /// Reads the header of `packet`, or returns nil if the packet is malformed: shorter than 36 or longer than
    /// 65,507 bytes, another format byte, non-zero reserved bytes, or a counter of 2^48 or more.
    /// - Parameter packet: A whole received packet.
    init?(parsing packet: UnsafeRawBufferPointer) {
        guard packet.count >= DatagramFormat.overhead, packet.count <= DatagramFormat.maximumPacketLength,
            packet[0] == DatagramFormat.version, packet[1] == 0, packet[2] == 0, packet[3] == 0
        else { return nil }
        let counter = UInt64(bigEndian: packet.loadUnaligned(fromByteOffset: 12, as: UInt64.self))
        guard counter < DatagramFormat.counterLimit else { return nil }
        self.receiverID = UInt64(bigEndian: packet.loadUnaligned(fromByteOffset: 4, as: UInt64.self))
        self.counter = counter
    }

    /// Writes the 20 header bytes at the start of `buffer`.
    /// - Parameter buffer: At least ``DatagramFormat/headerLength`` bytes.
    func write(to buffer: UnsafeMutableRawBufferPointer) {
        precondition(buffer.count >= DatagramFormat.headerLength, "buffer too small for a datagram header")
        buffer.storeBytes(of: DatagramFormat.version, toByteOffset: 0, as: UInt8.self)
        buffer.storeBytes(of: 0, toByteOffset: 1, as: UInt8.self)
        buffer.storeBytes(of: 0, toByteOffset: 2, as: UInt8.self)
        buffer.storeBytes(of: 0, toByteOffset: 3, as: UInt8.self)
        buffer.storeBytes(of: receiverID.bigEndian, toByteOffset: 4, as: UInt64.self)
        buffer.storeBytes(of: counter.bigEndian, toByteOffset: 12, as: UInt64.self)
    }
}
