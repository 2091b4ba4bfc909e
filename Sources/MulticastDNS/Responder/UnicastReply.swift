import MultipeerIO

/// A unicast reply waiting to be sent: to a QU question, or to a legacy query (RFC 6762 sections 5.4, 6.7).
struct UnicastReply {
    /// When it goes out.
    var due: IOInstant
    /// Keys of the records to answer with, looked up again when the reply is sent.
    var answers: [DNSResourceRecord]
    /// ID and questions (echoed for legacy queries).
    var header: DNSMessage
    /// Whether it answers a legacy query (source port other than 5353).
    var legacy: Bool
    /// The querier, and the link its query came in on.
    var destination: MDNSDestination
}
