import COpenSSL

@testable import Multipeer

/// A TLS session whose application data goes through OpenSSL's own record layer (`SSL_write`/`SSL_read`) after
/// the production handshake (``TLSHandshake``), so the tests can check this package's record layer
/// (``TLSSession``) against OpenSSL's in both directions. Production never sends a record this way.
final class OpenSSLRecordSession: TLSEndpoint {
    /// The production handshake, whose `SSL` goes on carrying the records here.
    let handshake: TLSHandshake
    private let buffers: CiphertextBuffers
    private(set) var isHandshakeComplete = false
    private var closeNotifyReceived = false
    private var failure: ConnectionError?

    init(context: TLSContext, expectedPeer: PeerFingerprint?) throws(ConnectionError) {
        let buffers = CiphertextBuffers()
        handshake = try TLSHandshake(context: context, expectedPeer: expectedPeer, buffers: buffers)
        self.buffers = buffers
    }

    private var ssl: OpaquePointer { handshake.ssl }

    var negotiatedCipherSuite: String { handshake.negotiatedCipherSuite }

    func receivedCiphertext(_ bytes: [UInt8]) {
        buffers.receive(bytes)
    }

    func takeCiphertext() -> [UInt8] {
        buffers.takeOutgoing()
    }

    func advanceHandshake() throws(ConnectionError) -> Bool {
        if let failure { throw failure }
        if isHandshakeComplete { return true }
        do throws(ConnectionError) {
            guard try handshake.advance() else { return false }
        } catch {
            failure = error
            throw error
        }
        // OpenSSL keeps its own record keys; the captured copies are not needed.
        handshake.wipeTrafficSecrets()
        isHandshakeComplete = true
        return true
    }

    func encrypt(_ plaintext: UnsafeRawBufferPointer) throws(ConnectionError) {
        if let failure { throw failure }
        guard isHandshakeComplete else {
            throw ConnectionError(code: .internalFailure, reason: "encrypt before the TLS handshake completed")
        }
        guard let base = plaintext.baseAddress, !plaintext.isEmpty else { return }
        OpenSSLErrorQueue.clear()
        var written = 0
        guard SSL_write_ex(ssl, base, plaintext.count, &written) == 1, written == plaintext.count else {
            throw fail(
                ConnectionError(
                    code: .internalFailure,
                    reason: "SSL_write_ex of \(plaintext.count) bytes failed: \(OpenSSLErrorQueue.drain())"))
        }
    }

    /// Decrypts with `SSL_read_ex`, appending at most `maximum` bytes, as ``TLSSession/decrypt(into:maximum:)``.
    func decrypt(into output: inout [UInt8], maximum: Int) throws(ConnectionError) -> TLSReadStatus {
        if let failure { throw failure }
        guard isHandshakeComplete else {
            throw ConnectionError(code: .internalFailure, reason: "decrypt before the TLS handshake completed")
        }
        if closeNotifyReceived { return .closeNotify }
        var remaining = maximum
        while remaining > 0 {
            let buffered = Int(SSL_pending(ssl))
            let unread = buffers.incomingByteCount
            // Plaintext can only come from decrypted bytes, unread ciphertext, or a record OpenSSL has read in part
            // (at most one, since read-ahead is off).
            guard buffered > 0 || unread > 0 || SSL_has_pending(ssl) == 1 else { break }
            let chunk = min(remaining, buffered + unread + TLSRecordProtection.maximumPlaintext)
            var error: Int32 = 0
            let countBefore = output.count
            OpenSSLErrorQueue.clear()
            output.append(addingCapacity: chunk) { span in
                span.withUnsafeMutableBufferPointer { buffer, initialized in
                    while initialized < buffer.count {
                        var read = 0
                        let result = SSL_read_ex(
                            ssl, buffer.baseAddress! + initialized, buffer.count - initialized, &read)
                        guard result == 1 else {
                            error = SSL_get_error(ssl, result)
                            return
                        }
                        initialized += read
                    }
                }
            }
            remaining -= output.count - countBefore
            switch error {
            case 0:
                continue  // Filled the whole chunk; there may be more.
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
                return .ok  // The rest needs more ciphertext.
            case SSL_ERROR_ZERO_RETURN:
                closeNotifyReceived = true
                return .closeNotify
            default:
                throw fail(
                    ConnectionError(
                        code: .protocolViolation,
                        reason: "a TLS record was rejected: \(OpenSSLErrorQueue.drain())\(handshake.alerts.suffix)"))
            }
        }
        return .ok
    }

    func sendCloseNotify() {
        guard failure == nil, isHandshakeComplete else { return }
        OpenSSLErrorQueue.clear()
        // 0 (sent, the peer's not yet received) and 1 (both done) both mean success.
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
    }

    /// Makes OpenSSL send a KeyUpdate that asks the peer to update too, before its next record.
    func requestKeyUpdate() -> Bool {
        SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) == 1
    }

    private func fail(_ error: ConnectionError) -> ConnectionError {
        failure = error
        return error
    }
}
