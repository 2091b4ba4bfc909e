/// What a connection runs its frames through once the preamble has settled the mode: TLS 1.3 or plaintext.
///
/// Loop-confined and non-blocking: bytes from the socket go in with ``receivedFromNetwork(_:)``, bytes for the
/// socket come out of ``takeNetworkOutput()``.
protocol RecordLayer: AnyObject {
    /// Feeds bytes read from the socket.
    func receivedFromNetwork(_ bytes: [UInt8])
    /// Drives the handshake; true once it is complete on this side. Plaintext is complete at once.
    func advanceHandshake() throws(ConnectionError) -> Bool
    /// Everything to write to the socket, removed from the layer; empty when nothing is pending.
    func takeNetworkOutput() -> [UInt8]
    /// Bytes waiting in ``takeNetworkOutput()``.
    var pendingNetworkOutput: Int { get }
    /// Protects and queues application bytes (after the handshake).
    func seal(_ plaintext: [UInt8]) throws(ConnectionError)
    /// Appends at most `maximum` received application bytes to `output`.
    /// - Returns: true once the peer has said it will send nothing more (a TLS close_notify).
    func open(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> Bool
    /// Says that this side will send nothing more (a TLS close_notify; nothing for plaintext).
    func closeOutput()
    /// The fingerprint the peer proved in the handshake, or nil for plaintext.
    var authenticatedPeer: PeerFingerprint? { get }
    /// Keying material exported from the session for `label` (RFC 8446 section 7.5, empty context), or nil
    /// if the layer has no keys (plaintext).
    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]?
    /// A description of the protection, such as "TLSv1.3 TLS_AES_128_GCM_SHA256" or "plaintext".
    var protectionDescription: String { get }
}

/// The record layer of an unencrypted connection: bytes pass through unchanged.
final class PlaintextRecordLayer: RecordLayer {
    private var input: [UInt8] = []
    private var inputHead = 0
    private var output: [UInt8] = []

    func receivedFromNetwork(_ bytes: [UInt8]) {
        if inputHead == input.count {
            input = bytes
            inputHead = 0
        } else {
            input.append(contentsOf: bytes)
        }
    }

    func advanceHandshake() throws(ConnectionError) -> Bool { true }

    func takeNetworkOutput() -> [UInt8] {
        defer { output = [] }
        return output
    }

    var pendingNetworkOutput: Int { output.count }

    func seal(_ plaintext: [UInt8]) throws(ConnectionError) {
        if output.isEmpty {
            output = plaintext
        } else {
            output.append(contentsOf: plaintext)
        }
    }

    func open(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> Bool {
        let count = min(maximum, input.count - inputHead)
        guard count > 0 else { return false }
        if output.isEmpty && inputHead == 0 && count == input.count {
            output = input
        } else {
            output.append(contentsOf: input[inputHead..<inputHead + count])
        }
        inputHead += count
        if inputHead == input.count {
            input = []
            inputHead = 0
        }
        return false
    }

    func closeOutput() {}

    var authenticatedPeer: PeerFingerprint? { nil }

    func exportKeyingMaterial(label: String, length: Int) throws(ConnectionError) -> [UInt8]? { nil }

    var protectionDescription: String { "plaintext" }
}
