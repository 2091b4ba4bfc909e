/// What a connection runs its frames through once the preamble has settled the mode: TLS 1.3 or plaintext.
///
/// Loop-confined and non-blocking: bytes from the socket go in with ``receivedFromNetwork(_:)``, bytes for the
/// socket come out of ``drainNetworkOutput(_:)``.
protocol RecordLayer: AnyObject {
    /// Takes bytes read from the socket before this returns: plaintext goes straight into `decoder`; TLS
    /// records are opened straight into it when whole (after the handshake), the rest is kept for
    /// ``open(into:maximum:)``.
    /// - Throws: ``ConnectionError`` if a record is refused.
    func receivedFromNetwork(_ bytes: UnsafeRawBufferPointer, into decoder: inout FrameDecoder)
        throws(ConnectionError)
    /// Drives the handshake; true once it is complete on this side. Plaintext is complete at once.
    func advanceHandshake() throws(ConnectionError) -> Bool
    /// Hands everything pending for the socket to `body` without copying, then forgets it; `body` is not
    /// called when nothing is pending. The memory is reused by the next output.
    func drainNetworkOutput(_ body: (UnsafeRawBufferPointer) -> Void)
    /// Bytes waiting in ``drainNetworkOutput(_:)``.
    var pendingNetworkOutput: Int { get }
    /// Protects and queues application bytes (after the handshake): `encode` appends frames to the plaintext
    /// buffer it is given (a reused scratch buffer for TLS, the network output itself for plaintext).
    func seal(_ encode: (inout [UInt8]) -> Void) throws(ConnectionError)
    /// Moves at most `maximum` received application bytes (decrypted) into `decoder`.
    /// - Returns: How many bytes were moved, and whether the peer has said it will send nothing more (a TLS
    ///   close_notify).
    func open(into decoder: inout FrameDecoder, maximum: Int) throws(ConnectionError) -> (count: Int, closeNotify: Bool)
    /// Says that this side will send nothing more (a TLS close_notify; nothing for plaintext).
    func closeOutput()
    /// Frees the buffers kept for reuse wherever they hold nothing (see
    /// ``ConnectionCore/releaseIdleBuffers()``).
    func releaseIdleBuffers()
    /// The fingerprint the peer proved in the handshake, or nil for plaintext.
    var authenticatedPeer: PeerFingerprint? { get }
    /// Keying material exported from the session for `label` (RFC 8446 section 7.5, empty context), or nil
    /// if the layer has no keys (plaintext).
    /// - Throws: ``ConnectionError`` with code `.internalFailure` after ``releaseHandshakeState()``.
    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]?
    /// Frees what only the handshake and the exporter need (for TLS, OpenSSL's session object with its copies of
    /// the handshake, traffic and exporter secrets), once the connection has exported everything it needs.
    /// Records keep flowing both ways, key updates included; ``exportKeyingMaterial(label:length:)`` fails
    /// afterwards. Nothing to do for plaintext. Idempotent.
    func releaseHandshakeState()
    /// A description of the protection, such as "TLSv1.3 TLS_AES_128_GCM_SHA256" or "plaintext".
    var protectionDescription: String { get }
}

extension RecordLayer {
    /// Protects and queues `plaintext` (after the handshake).
    func seal(_ plaintext: [UInt8]) throws(ConnectionError) {
        try seal { $0.append(contentsOf: plaintext) }
    }
}

/// The record layer of an unencrypted connection: bytes pass through unchanged, received ones straight into
/// the connection's frame decoder, and frames are encoded straight into the network output.
final class PlaintextRecordLayer: RecordLayer {
    private var output: [UInt8] = []

    func receivedFromNetwork(_ bytes: UnsafeRawBufferPointer, into decoder: inout FrameDecoder)
        throws(ConnectionError)
    {
        decoder.append(bytes)
    }

    func advanceHandshake() throws(ConnectionError) -> Bool { true }

    func drainNetworkOutput(_ body: (UnsafeRawBufferPointer) -> Void) {
        guard !output.isEmpty else { return }
        output.withUnsafeBytes(body)
        output.removeAll(keepingCapacity: true)
    }

    var pendingNetworkOutput: Int { output.count }

    func seal(_ encode: (inout [UInt8]) -> Void) throws(ConnectionError) {
        encode(&output)
    }

    func open(into decoder: inout FrameDecoder, maximum: Int) throws(ConnectionError) -> (count: Int, closeNotify: Bool)
    {
        (0, false)
    }

    func closeOutput() {}

    func releaseIdleBuffers() {
        if output.isEmpty { output = [] }
    }

    var authenticatedPeer: PeerFingerprint? { nil }

    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]? { nil }

    func releaseHandshakeState() {}

    var protectionDescription: String { "plaintext" }
}
