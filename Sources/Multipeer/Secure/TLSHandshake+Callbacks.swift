internal import COpenSSL

/// The verify callback's verdict on the peer's certificate.
enum PeerVerification {
    /// The certificate passed every check. The certificate is retained, so its pointer identifies it
    /// while OpenSSL calls the callback again for the same chain.
    case accepted(certificate: X509Certificate, fingerprint: PeerFingerprint)
    /// The certificate failed a check; the handshake fails with this error.
    case rejected(ConnectionError)
}

extension TLSHandshake {
    // MARK: Certificate verification

    /// The `SSL_CTX_set_verify` callback: finds the handshake of the `SSL` being verified and lets it judge
    /// the peer's certificate. A C function pointer cannot capture, so the context's callback is a
    /// non-capturing closure that calls this.
    ///
    /// `preverified` (OpenSSL's own chain verdict) is ignored on purpose: a self-signed certificate never
    /// chains to a CA, and its validity period does not matter (see ``PeerIdentity/makeCertificate()``).
    /// What makes a peer trusted is its key: ``verifyPeer(store:)`` decides. Returning 0 makes OpenSSL
    /// abort the handshake at once and send a `bad_certificate` alert.
    static func verifyCallback(preverified: Int32, store: OpaquePointer?) -> Int32 {
        guard let store,
            let ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()),
            let handshake = handshake(of: OpaquePointer(ssl))
        else { return 0 }
        guard handshake.verifyPeer(store: store) else {
            X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED)
            return 0
        }
        return 1
    }

    /// Checks the certificate chain the peer sent: exactly one certificate, self-signed with an Ed25519 key,
    /// whose key is ``expectedPeer`` if one is expected. Records the verdict in ``verification``.
    ///
    /// OpenSSL may call the callback several times for one chain (once per problem it finds, and once at
    /// the end); the checks run once and the verdict is reused.
    func verifyPeer(store: OpaquePointer) -> Bool {
        guard let leaf = X509_STORE_CTX_get0_cert(store) else {
            return reject(.tlsHandshakeFailed("OpenSSL verified no certificate", alerts: TLSAlerts()))
        }
        switch verification {
        case .accepted(let certificate, _) where certificate.pointer == leaf: return true
        case .rejected: return false
        default: break
        }
        let count = multipeer_sk_x509_num(X509_STORE_CTX_get0_untrusted(store))
        guard count == 1 else {
            return reject(
                .tlsHandshakeFailed(
                    "the peer presented \(count) certificates; a peer presents exactly one, self-signed",
                    alerts: TLSAlerts()))
        }
        guard let certificate = X509Certificate.sharing(leaf) else {
            return reject(.tlsHandshakeFailed("taking a reference to the peer's certificate", alerts: TLSAlerts()))
        }
        let fingerprint: PeerFingerprint
        do {
            fingerprint = try PeerIdentity.fingerprint(of: certificate)
        } catch {
            if let expectedPeer {
                return reject(.tlsIdentityMismatch(expected: expectedPeer, actual: nil, detail: " (\(error.reason))"))
            }
            return reject(
                .tlsHandshakeFailed("the peer's certificate is unusable: \(error.reason)", alerts: TLSAlerts()))
        }
        if let expectedPeer, fingerprint != expectedPeer {
            return reject(.tlsIdentityMismatch(expected: expectedPeer, actual: fingerprint))
        }
        verification = .accepted(certificate: certificate, fingerprint: fingerprint)
        return true
    }

    /// Records `error` as the verdict and returns false.
    private func reject(_ error: ConnectionError) -> Bool {
        verification = .rejected(error)
        return false
    }

    // MARK: Secrets

    /// The key-log callback: keeps the two application traffic secrets of the session (lines
    /// `CLIENT_TRAFFIC_SECRET_0 <client random> <secret>` and `SERVER_TRAFFIC_SECRET_0 ...`, in hex) for
    /// this package's record layer; every other line is ignored. The line is read where OpenSSL holds it, never
    /// copied into a string, and nothing is logged anywhere.
    static func keyLogCallback(ssl: OpaquePointer?, line: UnsafePointer<CChar>?) {
        guard let ssl, let line, let handshake = handshake(of: ssl) else { return }
        let length = strlen(line)
        let bytes = UnsafeRawBufferPointer(start: line, count: length)
        for (label, isClient) in [("CLIENT_TRAFFIC_SECRET_0 ", true), ("SERVER_TRAFFIC_SECRET_0 ", false)] {
            let prefix = Array(label.utf8)
            guard length > prefix.count, bytes.prefix(prefix.count).elementsEqual(prefix) else { continue }
            // The secret is the last field, after the client random.
            guard let space = bytes.lastIndex(of: UInt8(ascii: " ")),
                let secret = hexBytes(UnsafeRawBufferPointer(rebasing: bytes[(space + 1)...]))
            else { return }
            if isClient { handshake.clientTrafficSecret = secret } else { handshake.serverTrafficSecret = secret }
        }
    }

    private static func hexBytes(_ digits: UnsafeRawBufferPointer) -> [UInt8]? {
        guard digits.count % 2 == 0, digits.count <= 128, !digits.isEmpty else { return nil }
        var bytes = [UInt8](repeating: 0, count: digits.count / 2)
        for index in bytes.indices {
            guard let high = hexValue(digits[2 * index]), let low = hexValue(digits[2 * index + 1]) else {
                bytes.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
                return nil
            }
            bytes[index] = high << 4 | low
        }
        return bytes
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    // MARK: Alerts and messages

    /// The `SSL_CTX_set_info_callback` callback: records every alert sent or received in the handshake's
    /// ``alerts``, so a failure can name it. Other notifications (handshake progress) are ignored.
    static func infoCallback(ssl: OpaquePointer?, location: Int32, value: Int32) {
        guard location & SSL_CB_ALERT != 0, let ssl, let handshake = handshake(of: ssl) else { return }
        if location & SSL_CB_READ != 0 {
            handshake.alerts.received = value
        } else {
            handshake.alerts.sent = value
        }
    }

    /// The `SSL_set_msg_callback` callback: watches what OpenSSL writes, so ``handOver()`` can tell whether it
    /// wrote an application data record (the inner content type of a protected record, which OpenSSL reports
    /// for every record it writes) or a handshake message that only comes after the handshake (NewSessionTicket,
    /// KeyUpdate). Reads are ignored; the first offending write is kept.
    static func messageCallback(
        writing: Int32, contentType: Int32, bytes: UnsafeRawPointer?, count: Int, ssl: OpaquePointer?
    ) {
        guard writing == 1, count > 0, let bytes, let ssl, let handshake = handshake(of: ssl),
            handshake.writtenPastHandshake == nil
        else { return }
        let first = bytes.load(as: UInt8.self)
        switch (contentType, first) {
        case (SSL3_RT_INNER_CONTENT_TYPE, TLSRecordProtection.applicationDataType):
            handshake.writtenPastHandshake = "an application data record"
        case (SSL3_RT_HANDSHAKE, 4):
            handshake.writtenPastHandshake = "a NewSessionTicket message"
        case (SSL3_RT_HANDSHAKE, 24):
            handshake.writtenPastHandshake = "a KeyUpdate message"
        default:
            break
        }
    }
}
