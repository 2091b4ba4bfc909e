internal import COpenSSL

/// The TLS alerts one session saw, kept so a failure can say which alert ended the handshake.
///
/// Each value is OpenSSL's info-callback encoding: the alert level in the high byte and the description
/// (RFC 8446 section 6) in the low byte.
struct TLSAlerts {
    /// The last alert the peer sent, if any.
    var received: Int32?
    /// The last alert this side sent, if any.
    var sent: Int32?

    /// "; alert received: bad certificate (fatal)" and/or "; alert sent: …", or "" when no alert was seen.
    var suffix: String {
        var text = ""
        if let received { text += "; alert received: \(Self.describe(received))" }
        if let sent { text += "; alert sent: \(Self.describe(sent))" }
        return text
    }

    /// Names for the alerts TLS 1.3 added, which OpenSSL 3.0's `SSL_alert_desc_string_long` calls "unknown".
    static let tls13AlertNames: [Int32: String] = [
        109: "missing extension", 115: "unknown PSK identity", 116: "certificate required",
        120: "no application protocol",
    ]

    /// The long description of an alert and its level, e.g. "bad certificate (fatal)".
    static func describe(_ alert: Int32) -> String {
        var description = SSL_alert_desc_string_long(alert).map { String(cString: $0) } ?? "unknown"
        if description == "unknown" { description = tls13AlertNames[alert & 0xFF] ?? "alert \(alert & 0xFF)" }
        let level = SSL_alert_type_string_long(alert).map { String(cString: $0) } ?? "unknown"
        return "\(description) (\(level))"
    }
}

extension ConnectionError {
    /// An OpenSSL call that sets up TLS (a context or a session) failed: `.internalFailure`, with OpenSSL's
    /// error text.
    static func tlsSetup(_ operation: String, file: String = #fileID, line: Int = #line) -> ConnectionError {
        ConnectionError(
            code: .internalFailure,
            reason: "setting up TLS: \(operation) failed: \(OpenSSLErrorQueue.drain())", file: file, line: line)
    }

    /// The TLS handshake failed: `.handshakeFailed`, with OpenSSL's error text and the alerts seen.
    static func tlsHandshakeFailed(
        _ detail: String, alerts: TLSAlerts, file: String = #fileID, line: Int = #line
    ) -> ConnectionError {
        ConnectionError(
            code: .handshakeFailed,
            reason: "the TLS handshake failed: \(detail)\(alerts.suffix)", file: file, line: line)
    }

    /// The far side's certificate key is not the identity the dialer expected: `.identityMismatch`, naming
    /// both fingerprints in their readable form.
    static func tlsIdentityMismatch(
        expected: PeerFingerprint, actual: PeerFingerprint?, detail: String = "", file: String = #fileID,
        line: Int = #line
    ) -> ConnectionError {
        let presented =
            actual.map { "a certificate for the identity \($0)" } ?? "no usable Ed25519 certificate\(detail)"
        return ConnectionError(
            code: .identityMismatch(expected: expected, actual: actual),
            reason: "the peer presented \(presented), but the identity \(expected) was expected (from "
                + "discovery); the handshake was aborted", file: file, line: line)
    }
}
