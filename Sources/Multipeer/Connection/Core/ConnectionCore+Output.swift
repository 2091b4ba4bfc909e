/// Output: the preamble, TLS handshake records and the frames the scheduler picks, sealed by the record layer and
/// lent to the socket, with a gathering path that sends large payloads of plaintext connections straight from the
/// application's arrays.
extension ConnectionCore {
    /// Bytes for the socket: the preamble, TLS handshake records, and frames chosen by the scheduler, at most
    /// about `limit` bytes of frames (whole frames, so a little more).
    func takeOutput(limit: Int = 262_144) -> [UInt8] {
        var output: [UInt8] = []
        writeOutput(limit: limit) { (segments: UnsafeBufferPointer<UnsafeRawBufferPointer>) in
            for segment in segments { output.append(contentsOf: segment) }
        }
        return output
    }

    /// The most pieces of data one gathering write refers to (with the headers between them, at most 64
    /// buffers).
    static let gatheredPayloadLimit = 31
    /// Data at least this long is sent from the caller's array by a gathering write; shorter data is copied
    /// next to its header (a buffer per tiny message would cost more than the copy).
    static let gatherThreshold = 4096

    /// Like ``writeOutput(limit:to:)``, but lends `sink` the output as buffers to send in order with one
    /// gathering write. On an established plaintext connection, stream data and message fragments of at least
    /// ``gatherThreshold`` bytes are not copied at all: they are sent straight from the arrays the application
    /// gave. Otherwise `sink` gets one buffer at a time.
    func writeOutput(limit: Int, gathering sink: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Void) {
        guard cutThrough.isActive, phase == .established, !ending.isRequested, rawOutput.isEmpty, let record,
            record.pendingNetworkOutput == 0
        else {
            writeOutput(limit: limit) { bytes in
                withUnsafePointer(to: bytes) { sink(UnsafeBufferPointer(start: $0, count: 1)) }
            }
            return
        }
        gatherHeaders.removeAll(keepingCapacity: true)
        var pieces: [(headerEnd: Int, payload: ArraySlice<UInt8>)] = []
        var total = 0
        while total < limit && pieces.count < Self.gatheredPayloadLimit {
            let start = gatherHeaders.count
            let next: (frame: FrameScheduler.EncodedFrame, payload: ArraySlice<UInt8>)?
            do {
                next = try scheduler.encodeNext(
                    flow: &flow, encoder: encoder, into: &gatherHeaders, gatheringFrom: Self.gatherThreshold)
            } catch {
                fail(.encodingFailed(error))
                return
            }
            guard let next else { break }
            accountSent(next.frame)
            total += gatherHeaders.count - start + next.payload.count
            if !next.payload.isEmpty { pieces.append((gatherHeaders.count, next.payload)) }
        }
        guard total > 0 else { return }
        gatherHeaders.withUnsafeBytes { headers in
            var segments: [UnsafeRawBufferPointer] = []
            segments.reserveCapacity(2 * pieces.count + 1)
            Self.withSegments(headers, from: 0, pieces[...], &segments, sink)
        }
    }

    /// Lends `sink` the headers and payloads in wire order: each piece's headers (up to `headerEnd`), then its
    /// payload, then the headers after the last piece. Recursive, so every payload's memory stays lent.
    private static func withSegments(
        _ headers: UnsafeRawBufferPointer, from start: Int,
        _ pieces: ArraySlice<(headerEnd: Int, payload: ArraySlice<UInt8>)>,
        _ segments: inout [UnsafeRawBufferPointer], _ sink: (UnsafeBufferPointer<UnsafeRawBufferPointer>) -> Void
    ) {
        guard let piece = pieces.first else {
            if start < headers.count { segments.append(UnsafeRawBufferPointer(rebasing: headers[start...])) }
            segments.withUnsafeBufferPointer(sink)
            return
        }
        segments.append(UnsafeRawBufferPointer(rebasing: headers[start..<piece.headerEnd]))
        piece.payload.withUnsafeBytes { payload in
            segments.append(payload)
            withSegments(headers, from: piece.headerEnd, pieces.dropFirst(), &segments, sink)
        }
    }

    /// Like ``takeOutput(limit:)``, but lends the bytes to `sink` (once or twice; not at all when there are
    /// none) instead of copying them into a new array; the memory is reused for the next output.
    func writeOutput(limit: Int, to sink: (UnsafeRawBufferPointer) -> Void) {
        if !rawOutput.isEmpty {
            rawOutput.withUnsafeBytes(sink)
            rawOutput = []
        }
        guard let record else { return }
        if phase == .established || phase == .hello || phase == .confirming || phase == .closing, !finished {
            fillRecordLayer(record, limit: limit)
        }
        record.drainNetworkOutput(sink)
    }

    /// Frees the buffers kept for reuse between reads and writes wherever they hold nothing. The driver calls
    /// this when the connection is established and on every timer (keepalive) tick, so an idle connection
    /// holds none while a busy one reuses them instead of allocating (and page-faulting) for every batch.
    func releaseIdleBuffers() {
        decoder.releaseIdleBuffer()
        record?.releaseIdleBuffers()
        for state in channels.entries.values { state.inbound?.releaseIfEmpty() }
    }

    /// Frames from the scheduler, sealed into the record layer until `limit` bytes are pending; then the goodbye,
    /// once a requested close has nothing left to send.
    private func fillRecordLayer(_ record: any RecordLayer, limit: Int) {
        let room = limit - record.pendingNetworkOutput
        guard room > 0, !ending.goodbyeSent else { return }
        var failure: ConnectionError?
        do throws(ConnectionError) {
            try record.seal { plaintext in
                let start = plaintext.count
                while !ending.goodbyeSent && plaintext.count - start < room {
                    do throws(FrameEncodingError) {
                        guard let sent = try scheduler.encodeNext(flow: &flow, encoder: encoder, into: &plaintext)
                        else { break }
                        accountSent(sent)
                    } catch {
                        failure = .encodingFailed(error)
                        return
                    }
                }
                let nothingQueued =
                    queuedBytes == 0 && scheduler.queuedControlFrames == 0 && scheduler.activeChannels.isEmpty
                if let goodbye = ending.goodbyeDue(nothingQueued: nothingQueued) {
                    ending.goodbyeSent = true
                    _ = try? encoder.encode(
                        .goodbye(reason: goodbye.code, text: validUTF8Prefix(goodbye.text)), into: &plaintext)
                    if ending.goodbyeReceived != nil { finished = true }
                }
            }
        } catch {
            fail(error, notifyPeer: false)
            return
        }
        if let failure {
            fail(failure)
            return
        }
        if ending.goodbyeSent { record.closeOutput() }
    }

    private func accountSent(_ sent: FrameScheduler.EncodedFrame) {
        queuedBytes -= sent.dataBytes
        if sent.type == .channelClose { localChannelClosed(sent.channel) }
    }

    /// Whether the graceful close has sent its goodbye and the owner should shut down writing once the
    /// output is written.
    var wantsWriteShutdown: Bool { ending.goodbyeSent }

    private func localChannelClosed(_ channel: UInt32) {
        guard var state = channels[channel] else { return }
        state.localOpen = false
        channels[channel] = state
        if !state.remoteOpen { finishedBothWays(channel) }
    }
}
