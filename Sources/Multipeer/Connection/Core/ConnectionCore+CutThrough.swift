internal import MultipeerIO

/// The receive fast path of established plaintext connections (see ``PlaintextCutThrough``).
extension ConnectionCore {
    /// On a plaintext connection receiving large stream data frames: room in the stream's buffer for the rest
    /// of the current payload, for the next socket read to fill directly (no copy at all on this side), or
    /// an empty buffer between two such frames, so the next read takes little more than the next header and
    /// the read after it goes direct. Call ``receivedDirect(count:now:)`` after that read, whatever it returned.
    func directReadTarget() -> UnsafeMutableRawBufferPointer? {
        guard cutThrough.isActive, cutThrough.inBulkData, phase == .established || phase == .closing, !finished,
            cutThrough.directInbound == nil
        else { return nil }
        if cutThrough.passThrough.remaining == 0 { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        guard let inbound = cutThrough.passThrough.inbound,
            let room = inbound.reserve(upTo: cutThrough.passThrough.remaining)
        else { return nil }
        cutThrough.directInbound = inbound
        return room
    }

    /// `count` bytes of the payload arrived in the room ``directReadTarget()`` gave.
    func receivedDirect(count: Int, now: IOInstant) {
        cutThrough.directInbound?.commit(count)
        cutThrough.directInbound = nil
        guard count > 0, phase != .closed else { return }
        keepalive.heard(at: now)
        cutThrough.passThrough.remaining -= count
    }

    /// Received plaintext once established: stream data goes from `bytes` (the socket's buffer) straight to the
    /// stream's buffer, everything else through the decoder. The same byte streams are accepted and refused,
    /// in the same order, as by decoding every frame, with two differences of timing: a stream data frame is
    /// checked against the window (and its channel) as soon as its header arrives, and its payload reaches the
    /// reader as it arrives, so a connection that breaks in the middle of a frame has already delivered part
    /// of it (the stream then ends with the connection's error).
    func receivePlaintext(_ bytes: UnsafeRawBufferPointer, now: IOInstant) throws(ConnectionError) {
        var input = bytes
        while !input.isEmpty && phase != .closed && !finished {
            if cutThrough.passThrough.remaining > 0 {
                let count = min(cutThrough.passThrough.remaining, input.count)
                cutThrough.passThrough.inbound?.append(UnsafeRawBufferPointer(rebasing: input[..<count]))
                cutThrough.passThrough.remaining -= count
                input = UnsafeRawBufferPointer(rebasing: input[count...])
                continue
            }
            if let (channel, length) = decoder.takeChannelDataHeader(from: &input) {
                // The whole payload is checked against the window now, as decoding the frame would.
                let accepted = try acceptFlowControlled(channel: channel, count: length, kind: .stream)
                cutThrough.passThrough = (accepted ? channels[channel]?.inbound : nil, length)
                cutThrough.inBulkData = length >= PlaintextCutThrough.directReadMinimum
                continue
            }
            cutThrough.inBulkData = false
            decoder.appendFrameBytes(from: &input)
            try decodeBuffered(now: now)
        }
    }
}
