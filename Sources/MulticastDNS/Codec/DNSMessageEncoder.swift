/// Encodes DNS messages (RFC 1035 section 4) for multicast DNS, compressing names and splitting large
/// messages into packets.
///
/// Owner names and the names inside PTR, SRV (target) and NSEC (next name) data are compressed
/// (RFC 1035 section 4.1.4; RFC 6762 section 18.14 allows it for SRV and NSEC in mDNS). Suffixes match
/// byte for byte, case included, so every name decodes with exactly the case it was given.
public struct DNSMessageEncoder: Sendable {
    /// The bounds every produced message respects, so a ``DNSMessageDecoder`` with the same limits accepts it.
    public let limits: DNSLimits
    /// Whether names are compressed; `true` by default. Turning it off is only useful to compare sizes or to
    /// talk to a peer that cannot decompress.
    public var usesNameCompression = true

    /// Creates an encoder.
    /// - Parameter limits: The bounds to respect; multicast DNS defaults.
    public init(limits: DNSLimits = .mdns) {
        self.limits = limits
    }

    /// Encodes a message as one packet, with name compression (RFC 1035 section 4.1.4) for owner names and
    /// names inside PTR, SRV target and NSEC next name.
    /// - Parameter message: The message; the header counts are taken from its sections.
    /// - Returns: The wire bytes.
    /// - Throws: ``DNSEncodingError/messageTooLarge(size:limit:)`` if it exceeds
    ///   ``DNSLimits/maximumMessageSize``, ``DNSEncodingError/tooManyRecords(count:limit:)``, or an error for
    ///   record data that cannot be expressed.
    public func encode(_ message: DNSMessage) throws(DNSEncodingError) -> [UInt8] {
        let total =
            message.questions.count + message.answers.count + message.authorities.count + message.additionals.count
        guard total <= limits.maximumRecordCount, total <= Int(UInt16.max) else {
            throw .tooManyRecords(count: total, limit: limits.maximumRecordCount)
        }
        var writer = DNSWriter(compressing: usesNameCompression)
        writer.writeHeader(id: message.id, flags: message.flags)
        for question in message.questions { writer.writeQuestion(question) }
        for record in message.answers { try writer.writeRecord(record) }
        for record in message.authorities { try writer.writeRecord(record) }
        for record in message.additionals { try writer.writeRecord(record) }
        guard writer.bytes.count <= limits.maximumMessageSize else {
            throw .messageTooLarge(size: writer.bytes.count, limit: limits.maximumMessageSize)
        }
        writer.setCounts([
            message.questions.count, message.answers.count, message.authorities.count, message.additionals.count,
        ])
        return writer.bytes
    }

    /// Splits a message across several packets no larger than `maximumSize`.
    ///
    /// Questions all go into the first packet. Records fill packets in order: answers, then authorities,
    /// then additionals; an answer or authority that does not fit starts a new packet, while an additional
    /// that does not fit is dropped (additionals are optional, RFC 6762 section 6), never split. For a query
    /// (QR=0) that needs several packets, every packet but the last has the TC bit set, telling responders
    /// more known answers follow (RFC 6762 section 7.2); responses are never marked truncated.
    /// - Parameters:
    ///   - message: The message to send.
    ///   - maximumSize: The largest packet in bytes, between 12 and ``DNSLimits/maximumMessageSize``.
    /// - Returns: One or more packets, in sending order.
    /// - Throws: ``DNSEncodingError/recordTooLarge(name:type:size:limit:)`` if one answer or authority alone
    ///   cannot fit, ``DNSEncodingError/messageTooLarge(size:limit:)`` if the questions alone cannot, or
    ///   ``DNSEncodingError/invalidMaximumSize(_:)``.
    public func encode(_ message: DNSMessage, splittingAt maximumSize: Int) throws(DNSEncodingError) -> [[UInt8]] {
        guard maximumSize >= DNSWriter.headerSize, maximumSize <= limits.maximumMessageSize else {
            throw .invalidMaximumSize(maximumSize)
        }
        let recordLimit = min(limits.maximumRecordCount, Int(UInt16.max))
        guard message.questions.count <= recordLimit else {
            throw .tooManyRecords(count: message.questions.count, limit: recordLimit)
        }
        var packets: [[UInt8]] = []
        var writer = DNSWriter(compressing: usesNameCompression)
        var counts = [0, 0, 0, 0]
        writer.writeHeader(id: message.id, flags: message.flags)
        for question in message.questions { writer.writeQuestion(question) }
        guard writer.bytes.count <= maximumSize else {
            throw .messageTooLarge(size: writer.bytes.count, limit: maximumSize)
        }
        counts[0] = message.questions.count

        let sections = [(1, message.answers), (2, message.authorities), (3, message.additionals)]
        for (section, records) in sections {
            for record in records {
                let mark = writer.mark()
                try writer.writeRecord(record)
                if writer.bytes.count <= maximumSize && counts.reduce(0, +) < recordLimit {
                    counts[section] += 1
                    continue
                }
                let size = writer.bytes.count - mark.byteCount + DNSWriter.headerSize
                writer.rollback(to: mark)
                if section == 3 { continue }
                guard counts.reduce(0, +) > 0 else {
                    throw .recordTooLarge(name: record.name, type: record.type, size: size, limit: maximumSize)
                }
                writer.setCounts(counts)
                packets.append(writer.bytes)
                writer = DNSWriter(compressing: usesNameCompression)
                writer.writeHeader(id: message.id, flags: message.flags)
                counts = [0, 0, 0, 0]
                try writer.writeRecord(record)
                guard writer.bytes.count <= maximumSize else {
                    throw .recordTooLarge(
                        name: record.name, type: record.type, size: writer.bytes.count, limit: maximumSize)
                }
                counts[section] = 1
            }
        }
        writer.setCounts(counts)
        packets.append(writer.bytes)
        if !message.isResponse {
            for index in packets.indices.dropLast() {
                packets[index][2] |= UInt8(DNSMessage.truncatedFlag >> 8)
            }
        }
        return packets
    }
}
