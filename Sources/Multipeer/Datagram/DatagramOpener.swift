/// Opens the incoming datagrams of one connection: checks the header and the replay window, decrypts and
/// authenticates, and only then records the counter as delivered.
///
/// Loop-confined like the connection that owns it (not thread-safe, not `Sendable`): the replay window and the
/// reused cipher context change with every packet.
final class DatagramOpener {
    /// This side's receive id: packets carrying another are refused as ``DatagramRejection/unknownReceiver``.
    let receiverID: UInt64
    /// The counters delivered so far.
    private(set) var window = ReplayWindow()
    /// Packets that failed authentication. AES-GCM's forgery bound grows with the number of attempts (RFC 9147
    /// section 4.5.3 limits AES-GCM to 2^36); a connection can close when this grows suspiciously.
    private(set) var authenticationFailures: UInt64 = 0
    private let cipher: AES256GCM
    private let nonce: DatagramNonce

    /// Creates an opener.
    /// - Parameters:
    ///   - key: The direction's 32-byte key.
    ///   - iv: The direction's 12-byte IV.
    ///   - receiverID: This side's receive id.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the cipher cannot be set up.
    init(key: [UInt8], iv: [UInt8], receiverID: UInt64) throws(DatagramError) {
        cipher = try AES256GCM(key: key, direction: .open)
        nonce = DatagramNonce(iv: iv)
        self.receiverID = receiverID
    }

    /// Opens a received packet.
    /// - Parameter packet: The whole UDP payload.
    /// - Returns: The payload, or why the packet was dropped; only a delivered packet changes the replay window.
    func open(_ packet: UnsafeRawBufferPointer) -> Result<[UInt8], DatagramRejection> {
        guard let header = DatagramHeader(parsing: packet) else { return .failure(.malformed) }
        return open(packet, header: header)
    }

    /// Opens a received packet; see ``open(_:)-(UnsafeRawBufferPointer)``.
    func open(_ packet: [UInt8]) -> Result<[UInt8], DatagramRejection> {
        packet.withUnsafeBytes { open($0) }
    }

    /// Opens a received packet whose header was already parsed from it.
    /// - Parameters:
    ///   - packet: The whole UDP payload.
    ///   - header: `DatagramHeader(parsing: packet)`.
    func open(_ packet: UnsafeRawBufferPointer, header: DatagramHeader) -> Result<[UInt8], DatagramRejection> {
        guard header.receiverID == receiverID else { return .failure(.unknownReceiver) }
        switch window.check(header.counter) {
        case .fresh: break
        case .replayed: return .failure(.replayed)
        case .tooOld: return .failure(.tooOld)
        }
        let headerLength = DatagramFormat.headerLength
        let length = packet.count - DatagramFormat.overhead
        let tagStart = headerLength + length
        var authentic = false
        let payload = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            authentic = nonce.withNonce(counter: header.counter) { nonce in
                cipher.open(
                    nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: packet[..<headerLength]),
                    ciphertext: UnsafeRawBufferPointer(rebasing: packet[headerLength..<tagStart]),
                    tag: UnsafeRawBufferPointer(rebasing: packet[tagStart...]),
                    into: UnsafeMutableRawBufferPointer(buffer))
            }
            initialized = authentic ? length : 0
        }
        guard authentic else {
            authenticationFailures += 1
            // A forged packet must not leave an entry behind to be blamed on the next OpenSSL call.
            OpenSSLErrorQueue.clear()
            return .failure(.authenticationFailed)
        }
        window.mark(header.counter)
        return .success(payload)
    }
}
