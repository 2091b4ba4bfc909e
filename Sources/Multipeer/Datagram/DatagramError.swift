/// Why a datagram could not be sealed, or its cipher set up.
enum DatagramError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The payload is larger than one packet can carry (``DatagramFormat/maximumPayloadLength``).
    case payloadTooLarge(size: Int, limit: Int)
    /// The direction has used all 2^48 counters; sealing another packet would reuse a nonce.
    case counterExhausted
    /// OpenSSL failed for a reason unrelated to the data (an allocation, a broken library); the text is OpenSSL's.
    case openSSL(String)

    /// A sentence explaining the failure.
    var description: String {
        switch self {
        case .payloadTooLarge(let size, let limit):
            "a datagram payload of \(size) bytes is larger than the \(limit) bytes one packet carries"
        case .counterExhausted:
            "the datagram counter reached 2^48; sealing another packet would reuse a nonce"
        case .openSSL(let text):
            "OpenSSL failed in the datagram cipher: \(text)"
        }
    }
}

/// Why a received datagram was dropped instead of delivered.
enum DatagramRejection: Error, Hashable, Sendable {
    /// Not a well-formed format version 2 packet: wrong size, format byte, reserved bytes, or counter range.
    case malformed
    /// The receiver connection id belongs to no registered connection.
    case unknownReceiver
    /// The packet failed AES-GCM authentication: tampered, forged, or sealed with another key.
    case authenticationFailed
    /// A packet with this counter was already delivered.
    case replayed
    /// The counter is too far behind the newest delivered one for the replay window to tell.
    case tooOld
    /// The counter belongs to a key generation beyond the next one after the newest delivered counter's: its keys
    /// are not derived for an unauthenticated packet, so a forged far-future counter costs no key derivation.
    case tooFarAhead
}
