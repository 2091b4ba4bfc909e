import MultipeerIO

/// A record waiting to be multicast on a link: a delayed answer (RFC 6762 section 6), or a probe defense.
struct ScheduledAnswer {
    /// When it goes out.
    var due: IOInstant
    /// Sources whose queries asked for it; empty for announcements and probe defenses, which known answers
    /// never cancel.
    var requesters: Set<IPAddress>
    /// Whether something other than a query (a probe defense) scheduled it, so known answers do not cancel it.
    var unsolicited: Bool
}
