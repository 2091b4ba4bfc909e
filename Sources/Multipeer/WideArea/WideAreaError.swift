/// Why wide-area DNS-SD (a DNS server, a domain, a key) did not do what was asked.
public struct WideAreaError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure.
    public enum Code: Sendable, Hashable {
        /// The configuration cannot work: a malformed domain, server address or key file, or a key file others
        /// can read.
        case invalidConfiguration
        /// The DNS server did not answer (every try over UDP and TCP timed out, or the connection was refused).
        case unreachable
        /// The DNS server answered with an error: its response code (RFC 1035, RFC 2136) and, for a signed
        /// request, the transaction signature's error (RFC 8945: 16 BADSIG, 17 BADKEY, 18 BADTIME).
        case refused(responseCode: UInt8, signatureError: UInt16?)
        /// The answer was malformed, unsigned where it had to be signed, or its signature did not verify: not
        /// from the server, or not with our key.
        case badResponse
    }

    /// What kind of failure.
    public var code: Code
    /// What happened, in words: the server, the name, and the rule or answer that decided.
    public var reason: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: What happened, in words.
    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { reason }

    /// The name of a DNS response code (RFC 1035 section 4.1.1, RFC 2136 section 2.2), with its number.
    static func responseCodeName(_ code: UInt8) -> String {
        let names = [
            "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET", "NXRRSET",
            "NOTAUTH", "NOTZONE",
        ]
        return Int(code) < names.count ? names[Int(code)] : "RCODE\(code)"
    }

    /// The name of a transaction signature error (RFC 8945 section 3), with what it means.
    static func signatureErrorName(_ error: UInt16) -> String {
        switch error {
        case 16: "BADSIG (the server computed another signature: the key's secret is wrong)"
        case 17: "BADKEY (the server does not know this key name or algorithm)"
        case 18: "BADTIME (the clocks differ by more than the allowed 300 s)"
        case 22: "BADTRUNC (a truncated signature was not accepted)"
        default: "TSIG error \(error)"
        }
    }
}
