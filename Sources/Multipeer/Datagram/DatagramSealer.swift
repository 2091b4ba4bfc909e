/// Seals the outgoing datagrams of one connection: numbers each packet, encrypts and authenticates it.
///
/// Loop-confined like the connection that owns it (not thread-safe, not `Sendable`): the counter and the reused
/// cipher context change with every packet.
final class DatagramSealer {
    /// The far side's receive id, written in every header.
    let receiverID: UInt64
    /// The counter the next packet gets; equal to the number of packets sealed when the sealer started at 0.
    private(set) var nextCounter: UInt64
    private let cipher: AES256GCM
    private let nonce: DatagramNonce

    /// Creates a sealer.
    /// - Parameters:
    ///   - key: The direction's 32-byte key.
    ///   - iv: The direction's 12-byte IV.
    ///   - receiverID: The far side's receive id.
    ///   - firstCounter: The first packet's counter: 0 on a connection; tests start elsewhere to reach the limit.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the cipher cannot be set up.
    init(key: [UInt8], iv: [UInt8], receiverID: UInt64, firstCounter: UInt64 = 0) throws(DatagramError) {
        cipher = try AES256GCM(key: key, direction: .seal)
        nonce = DatagramNonce(iv: iv)
        self.receiverID = receiverID
        self.nextCounter = firstCounter
    }

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
        let header = DatagramHeader(receiverID: receiverID, counter: counter)
        let length = payload.count + DatagramFormat.overhead
        let headerLength = DatagramFormat.headerLength
        var sealed = false
        let packet = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            header.write(to: raw)
            sealed = nonce.withNonce(counter: counter) { nonce in
                cipher.seal(
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
        // Array.withUnsafeBytes rethrows untyped errors, so the typed one travels out in a Result.
        let result = payload.withUnsafeBytes { bytes in Result { () throws(DatagramError) in try seal(bytes) } }
        return try result.get()
    }
}
