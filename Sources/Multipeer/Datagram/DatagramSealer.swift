internal import COpenSSL

/// Seals the outgoing datagrams of one connection: numbers each packet, encrypts and authenticates it with the
/// keys of the packet's generation, moving to the next generation's keys (and dropping the old ones) when the
/// counter crosses into it.
///
/// Loop-confined like the connection that owns it (not thread-safe, not `Sendable`): the counter and the reused
/// cipher context change with every packet.
final class DatagramSealer {
    /// The far side's receive id, written in every header.
    let receiverID: UInt64
    /// The counter the next packet gets; equal to the number of packets sealed when the sealer started at 0.
    private(set) var nextCounter: UInt64
    /// The direction's base secret, kept to derive the next generation's keys; wiped on deinit.
    private var secret: [UInt8]
    /// The keys of the generation the last packet was sealed in (or the first packet will be).
    private var keys: DatagramGenerationKeys

    /// Creates a sealer.
    /// - Parameters:
    ///   - secret: The direction's 32-byte base secret.
    ///   - receiverID: The far side's receive id.
    ///   - firstCounter: The first packet's counter: 0 on a connection; tests start elsewhere to reach the limit.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the keys cannot be derived or the cipher set up.
    init(secret: [UInt8], receiverID: UInt64, firstCounter: UInt64 = 0) throws(DatagramError) {
        precondition(secret.count == DatagramKeys.secretLength, "the datagram base secret must be 32 bytes")
        // A copy of its own, so wiping it cannot touch storage shared with the caller's array.
        self.secret = secret.withUnsafeBytes { Array($0) }
        keys = try DatagramGenerationKeys(
            secret: secret, generation: DatagramGenerationKeys.generation(of: firstCounter), direction: .seal)
        self.receiverID = receiverID
        self.nextCounter = firstCounter
    }

    deinit {
        secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
    }

    /// The generation whose keys the sealer holds.
    var generation: UInt64 { keys.generation }

    /// Seals `payload` into a packet with the next counter.
    /// - Parameter payload: At most ``DatagramFormat/maximumPayloadLength`` bytes.
    /// - Returns: The packet: 36 bytes longer than `payload`.
    /// - Throws: ``DatagramError/payloadTooLarge(size:limit:)``; ``DatagramError/counterExhausted`` after 2^48
    ///   packets; ``DatagramError/openSSL(_:)`` if OpenSSL fails (the counter is used up all the same).
    func seal(_ payload: UnsafeRawBufferPointer) throws(DatagramError) -> [UInt8] {
        guard payload.count <= DatagramFormat.maximumPayloadLength else {
            throw .payloadTooLarge(size: payload.count, limit: DatagramFormat.maximumPayloadLength)
        }
        guard nextCounter < DatagramFormat.counterLimit else { throw .counterExhausted }
        let counter = nextCounter
        // Used up before encrypting: even a failed attempt must not leave its nonce to be used again.
        nextCounter += 1
        let generation = DatagramGenerationKeys.generation(of: counter)
        if generation != keys.generation {
            // The old generation's context is freed (and cleared by OpenSSL) as it is replaced.
            keys = try DatagramGenerationKeys(secret: secret, generation: generation, direction: .seal)
        }
        let keys = keys
        let header = DatagramHeader(receiverID: receiverID, counter: counter)
        let length = payload.count + DatagramFormat.overhead
        let headerLength = DatagramFormat.headerLength
        var sealed = false
        let packet = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            header.write(to: raw)
            sealed = keys.nonce.withNonce(counter: counter) { nonce in
                keys.cipher.seal(
                    nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: raw[..<headerLength]), plaintext: payload,
                    into: UnsafeMutableRawBufferPointer(rebasing: raw[headerLength...]))
            }
            initialized = sealed ? length : 0
        }
        guard sealed else { throw .openSSL(OpenSSLErrorQueue.drain()) }
        return packet
    }

    /// Seals `payload` into a packet with the next counter; see ``seal(_:)-(UnsafeRawBufferPointer)``.
    func seal(_ payload: [UInt8]) throws(DatagramError) -> [UInt8] {
        try payload.withUnsafeBytesTyped { bytes throws(DatagramError) in try seal(bytes) }
    }
}
