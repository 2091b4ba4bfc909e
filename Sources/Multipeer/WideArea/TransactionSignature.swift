internal import MulticastDNS

/// Transaction signatures (RFC 8945) with HMAC-SHA256: signs a request and verifies the server's response.
///
/// A signed message ends with a TSIG record (class ANY, TTL 0) whose data holds the algorithm name, the time
/// signed, the fudge, the MAC, the original message ID, an error and other data. The MAC covers the message as
/// it was before the record was added, then the "TSIG variables" (key name, class, TTL, algorithm name, time
/// signed, fudge, error, other data); a response's MAC covers the request's MAC first.
enum TransactionSignature {
    /// `hmac-sha256.`
    static let algorithmName = try! DNSName("hmac-sha256")
    /// The clock difference a signature allows, in seconds (RFC 8945 section 10 recommends 300).
    static let fudge: UInt16 = 300
    /// TSIG's class: ANY.
    static let recordClass: UInt16 = 255

    /// What a verified response said.
    struct Verified {
        /// The response.
        var message: DNSMessage
        /// The signature's error (0 when the server verified ours).
        var error: UInt16
    }

    /// Signs an encoded request: appends the TSIG record and counts it in the additional section.
    /// - Parameters:
    ///   - message: The encoded request, without a TSIG record.
    ///   - key: The key.
    ///   - timeSigned: Seconds since the Unix epoch.
    /// - Returns: The signed request and its MAC (which the response's MAC covers).
    static func sign(_ message: [UInt8], key: TSIGKey, timeSigned: UInt64) -> (bytes: [UInt8], mac: [UInt8]) {
        precondition(message.count >= 12, "a DNS message has a 12-byte header")
        var covered = message
        appendVariables(to: &covered, key: key, timeSigned: timeSigned, error: 0, other: [])
        let mac = HMACSHA256.mac(key: key.secret, message: covered)
        var signed = message
        signed += key.name.wire
        append16(250, to: &signed)
        append16(recordClass, to: &signed)
        signed += [0, 0, 0, 0]
        var data = algorithmName.wire
        append48(timeSigned, to: &data)
        append16(fudge, to: &data)
        append16(UInt16(mac.count), to: &data)
        data += mac
        data += message[0..<2]  // the original ID
        append16(0, to: &data)  // error
        append16(0, to: &data)  // other length
        append16(UInt16(data.count), to: &signed)
        signed += data
        let count = (UInt16(signed[10]) << 8 | UInt16(signed[11])) + 1
        signed[10] = UInt8(count >> 8)
        signed[11] = UInt8(count & 0xff)
        return (signed, mac)
    }

    /// Verifies a response to a signed request and decodes it.
    ///
    /// A response whose signature carries an error (BADSIG, BADKEY, BADTIME) is returned with that error and not
    /// verified: the server could not check ours, so it has none of its own to give (RFC 8945 section 5.3.2);
    /// the caller reports it as a refusal, and trusts nothing else in it.
    /// - Parameters:
    ///   - bytes: The response.
    ///   - requestMAC: The MAC of the request it answers.
    ///   - key: The key the request was signed with.
    ///   - now: Seconds since the Unix epoch.
    /// - Returns: The response and the signature's error.
    /// - Throws: ``WideAreaError`` with `badResponse` for a malformed or unsigned response, another key or
    ///   algorithm, a MAC that does not verify, or a time outside the fudge.
    static func verify(_ bytes: [UInt8], requestMAC: [UInt8], key: TSIGKey, now: UInt64) throws(WideAreaError)
        -> Verified
    {
        let message: DNSMessage
        let tsigStart: Int?
        do {
            (message, tsigStart) = try DNSMessageDecoder(limits: .unicast).decodeLocatingLastRecord(bytes)
        } catch {
            throw WideAreaError(.badResponse, "the DNS server's response does not decode: \(error)")
        }
        guard let record = message.additionals.last, record.type == .tsig, let tsigStart,
            case .unknown(_, let data) = record.data
        else {
            throw WideAreaError(
                .badResponse,
                "the DNS server's response to a signed request is not signed (\(message.answers.count) answers, "
                    + "response code \(WideAreaError.responseCodeName(message.responseCode)))")
        }
        guard record.name == key.name, record.recordClass == recordClass else {
            throw WideAreaError(.badResponse, "the response is signed with the key '\(record.name)', not ours")
        }
        let fields = try parse(data)
        guard fields.algorithm == algorithmName else {
            throw WideAreaError(.badResponse, "the response is signed with \(fields.algorithm), not hmac-sha256")
        }
        var unsigned = message
        unsigned.additionals.removeLast()
        if fields.error != 0 && fields.mac.isEmpty {
            return Verified(message: unsigned, error: fields.error)
        }
        var covered: [UInt8] = []
        covered.reserveCapacity(2 + requestMAC.count + tsigStart + 64)
        append16(UInt16(requestMAC.count), to: &covered)
        covered += requestMAC
        covered += bytes[0..<tsigStart]
        covered[2 + requestMAC.count] = UInt8(fields.originalID >> 8)
        covered[3 + requestMAC.count] = UInt8(fields.originalID & 0xff)
        let countIndex = 2 + requestMAC.count + 10
        let count = (UInt16(covered[countIndex]) << 8 | UInt16(covered[countIndex + 1])) - 1
        covered[countIndex] = UInt8(count >> 8)
        covered[countIndex + 1] = UInt8(count & 0xff)
        appendVariables(
            to: &covered, key: key, timeSigned: fields.timeSigned, error: fields.error, other: fields.other,
            fudge: fields.fudge)
        let expected = HMACSHA256.mac(key: key.secret, message: covered)
        guard HMACSHA256.constantTimeEqual(expected, fields.mac) else {
            throw WideAreaError(
                .badResponse,
                "the response's signature does not verify with \(key): it was not sent by the server that holds it")
        }
        let skew = now > fields.timeSigned ? now - fields.timeSigned : fields.timeSigned - now
        guard skew <= UInt64(fields.fudge) else {
            throw WideAreaError(
                .badResponse,
                "the response was signed \(skew) s away from this clock; at most \(fields.fudge) s are allowed")
        }
        return Verified(message: unsigned, error: fields.error)
    }

    /// The fields of a TSIG record's data.
    struct Fields {
        var algorithm: DNSName
        var timeSigned: UInt64
        var fudge: UInt16
        var mac: [UInt8]
        var originalID: UInt16
        var error: UInt16
        var other: [UInt8]
    }

    /// Parses a TSIG record's data, every length bounded by the data itself.
    static func parse(_ data: [UInt8]) throws(WideAreaError) -> Fields {
        var offset = 0
        func malformed(_ what: String) -> WideAreaError {
            WideAreaError(.badResponse, "the response's TSIG record is malformed: \(what)")
        }
        func take(_ count: Int) throws(WideAreaError) -> ArraySlice<UInt8> {
            guard count <= data.count - offset else { throw malformed("it ends early") }
            defer { offset += count }
            return data[offset..<offset + count]
        }
        func number(_ count: Int) throws(WideAreaError) -> UInt64 {
            try take(count).reduce(0) { $0 << 8 | UInt64($1) }
        }
        var labels: [String] = []
        while true {
            let length = Int(try number(1))
            if length == 0 { break }
            guard length <= 63 else { throw malformed("the algorithm name is compressed or has a long label") }
            labels.append(String(decoding: try take(length), as: UTF8.self))
            guard labels.count <= 8 else { throw malformed("the algorithm name has more than 8 labels") }
        }
        let algorithm: DNSName
        do {
            algorithm = try DNSName(labels: labels)
        } catch {
            throw malformed("the algorithm name: \(error)")
        }
        let timeSigned = try number(6)
        let fudge = UInt16(try number(2))
        let mac = Array(try take(Int(try number(2))))
        let originalID = UInt16(try number(2))
        let error = UInt16(try number(2))
        let other = Array(try take(Int(try number(2))))
        guard offset == data.count else { throw malformed("\(data.count - offset) bytes after its last field") }
        return Fields(
            algorithm: algorithm, timeSigned: timeSigned, fudge: fudge, mac: mac, originalID: originalID,
            error: error, other: other)
    }

    /// The TSIG variables (RFC 8945 section 4.3.3) a MAC covers after the message.
    private static func appendVariables(
        to bytes: inout [UInt8], key: TSIGKey, timeSigned: UInt64, error: UInt16, other: [UInt8],
        fudge: UInt16 = fudge
    ) {
        bytes += key.name.canonicalWire
        append16(recordClass, to: &bytes)
        bytes += [0, 0, 0, 0]
        bytes += algorithmName.canonicalWire
        append48(timeSigned, to: &bytes)
        append16(fudge, to: &bytes)
        append16(error, to: &bytes)
        append16(UInt16(other.count), to: &bytes)
        bytes += other
    }

    private static func append16(_ value: UInt16, to bytes: inout [UInt8]) {
        bytes.append(UInt8(value >> 8))
        bytes.append(UInt8(value & 0xff))
    }

    private static func append48(_ value: UInt64, to bytes: inout [UInt8]) {
        for shift in stride(from: 40, through: 0, by: -8) { bytes.append(UInt8((value >> UInt64(shift)) & 0xff)) }
    }
}
