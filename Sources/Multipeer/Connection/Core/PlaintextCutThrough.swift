/// The receive fast path of an established plaintext connection: a `channelData` payload goes from the socket's
/// buffer (or straight from the kernel) into its stream's buffer, without passing through the frame decoder.
/// This holds where the payload being passed through goes and how much of it is still to come.
struct PlaintextCutThrough {
    /// Stream data frames at least this long make the next reads go straight into the stream's buffer.
    static let directReadMinimum = 8192

    /// Whether the preamble settled on plaintext (received bytes can take this path).
    var isActive = false
    /// The stream buffer the current payload goes to (nil: a channel already forgotten, whose bytes are
    /// dropped), and how many of its bytes are still to come.
    var passThrough: (inbound: StreamInbound?, remaining: Int) = (nil, 0)
    /// The stream buffer holding a reservation made by ``ConnectionCore/directReadTarget()``.
    var directInbound: StreamInbound?
    /// Whether the last frame started was stream data of at least ``directReadMinimum`` bytes.
    var inBulkData = false
}
