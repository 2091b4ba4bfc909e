internal import MultipeerIO

/// Frames received once the connection is established: liveness, the goodbye, channels and their data.
extension ConnectionCore {
    func handle(_ frame: Frame, now: IOInstant) throws(ConnectionError) {
        switch frame {
        case .hello, .codeReveal:
            throw .outOfPlace(frame.type, phase: phase)
        case .ping(let token):
            try enqueueControl(.pong(token: token))
        case .pong(let token):
            if let roundTrip = keepalive.pong(token, at: now) {
                events.append(.pong(token: token, roundTrip: roundTrip))
            }
        case .goodbye(let code, let text):
            receivedGoodbye(code: code, text: text)
        case .error(let code, let text):
            throw .peerError(code: code, text: text)
        case .session(let message):
            events.append(.session(message))
        case .channelOpen(let channel, let kind, let name, let initialWindow):
            try handleChannelOpen(channel: channel, kind: kind, name: name, initialWindow: initialWindow)
        case .channelData(let channel, let bytes):
            try bytes.withUnsafeBytesTyped { bytes throws(ConnectionError) in
                try receiveStreamData(channel: channel, bytes)
            }
        case .message(let channel, let fragment):
            try fragment.bytes.withUnsafeBytesTyped { bytes throws(ConnectionError) in
                try receiveFragment(
                    channel: channel, id: fragment.id, totalLength: fragment.totalLength, isLast: fragment.isLast,
                    bytes)
            }
        case .channelClose(let channel):
            if channels.isForgotten(channel) { return }  // crossed our reset
            guard var state = channels[channel], state.remoteOpen else { throw .closeOnUnwritable(channel) }
            state.remoteOpen = false
            channels[channel] = state
            events.append(.channelFinished(channel: channel))
            if !state.localOpen { finishedBothWays(channel) }
        case .channelReset(let channel, let code):
            guard let state = channels[channel] else { return }  // crossed our own reset
            if state.kind == .message && state.isLocal { throw .messageChannelReset(channel) }
            forgetChannel(channel, discarding: .streamResetByPeer(code: code))
            events.append(.channelReset(channel: channel, code: code))
        case .windowUpdate(let channel, let increment):
            do {
                try flow.receivedWindowUpdate(channel: channel, increment: increment)
            } catch {
                throw .flowControl(error)
            }
        case .unknown:
            break  // a newer minor version's frame: ignored, as PROTOCOL.md requires
        }
    }

    /// The peer closes: answer at once (whatever is still queued would never be read), or, if this side's
    /// goodbye went first, the exchange is complete.
    private func receivedGoodbye(code: UInt32, text: String) {
        ending.goodbyeReceived = (code, text)
        if ending.goodbyeSent {
            finish(ending.reason ?? .closedLocally("closed by this side"))
        } else {
            ending.goodbyeSent = true
            sealFinalFrame(.goodbye(reason: 0, text: "goodbye"), into: record)
            finish(.closedByPeer(code: code, text: text))
        }
    }

    /// Bytes on a stream channel: counted against its window, then handed to its reader's buffer.
    func receiveStreamData(channel: UInt32, _ bytes: UnsafeRawBufferPointer) throws(ConnectionError) {
        guard try acceptFlowControlled(channel: channel, count: bytes.count, kind: .stream) else { return }
        channels[channel]?.inbound?.append(bytes)
    }

    /// Accounts a flow-controlled frame on `channel`; false when it belongs to a channel this side already
    /// forgot (its credit is still counted against the connection, and given back at once).
    func acceptFlowControlled(channel: UInt32, count: Int, kind: Frame.ChannelKind) throws(ConnectionError) -> Bool {
        guard let state = channels[channel] else {
            // A channel we reset or closed both ways: the peer may not know yet.
            guard channels.isForgotten(channel) else { throw .sentBeforeOpen(channel) }
            let updates: [Frame]
            do {
                updates = try flow.discard(count)
            } catch {
                throw .flowControl(error)
            }
            for frame in updates { try enqueueControl(frame) }
            return false
        }
        guard state.remoteOpen else { throw .sentAfterClose(channel) }
        guard (kind == .message) == (state.kind == .message) else {
            throw .wrongChannelKind(channel, sent: kind, open: state.kind)
        }
        do {
            try flow.received(channel: channel, count: count)
        } catch {
            throw .flowControl(error)
        }
        return true
    }

    private func handleChannelOpen(channel: UInt32, kind: Frame.ChannelKind, name: String, initialWindow: UInt32)
        throws(ConnectionError)
    {
        guard channels.peerMayOpen(channel) else { throw .notPeersChannel(channel) }
        let updates: [Frame]
        do {
            updates = try flow.openRemoteChannel(channel, initialWindow: initialWindow, isMessage: kind == .message)
        } catch {
            throw .channelOpenRefused(error)
        }
        for frame in updates { try enqueueControl(frame) }
        // A message channel only carries its opener's messages; stream channels are two-way.
        channels.openedRemote(
            channel,
            ChannelTable.Entry(kind: kind, isLocal: false, localOpen: kind != .message, inbound: makeInbound(kind)))
        events.append(.channelOpened(channel: channel, kind: kind, name: name))
    }

    /// The receive buffer of a new stream or resource channel; nil for message channels.
    func makeInbound(_ kind: Frame.ChannelKind) -> StreamInbound? {
        kind == .message
            ? nil
            : StreamInbound(window: configuration.streamWindow, connectionWindow: configuration.connectionWindow)
    }

    /// The buffer where the peer's bytes on stream `channel` wait for the reader; nil for other channels.
    func inbound(channel: UInt32) -> StreamInbound? {
        channels[channel]?.inbound
    }

    /// A channel is finished both ways: forgotten now, unless the reader has bytes of it still to take. Those
    /// stay within the windows: their credit (and the channel's slot) goes back only as the reader takes them, or
    /// when the application drops the stream (``streamDropped(channel:)``).
    func finishedBothWays(_ channel: UInt32) {
        guard var state = channels[channel] else { return }
        if state.dropped {
            forgetChannel(channel, discarding: .streamDropped())
        } else if let inbound = state.inbound, inbound.bufferedByteCount > 0 {
            state.lingering = true
            channels[channel] = state
        } else {
            forgetChannel(channel)
        }
    }

    /// Forgets a channel finished both ways or reset: drops what is queued on it and its partial messages, and
    /// gives their credit back (messages already delivered keep theirs until the application takes them). A reset
    /// (`discarding` its reader's error) also drops the stream bytes nobody read: their credit goes back with the
    /// rest, so they must not stay in the buffer the application's stream still holds.
    func forgetChannel(_ channel: UInt32, discarding resetError: ConnectionError? = nil) {
        guard let entry = channels.remove(channel) else { return }
        if let resetError { entry.inbound?.discard(resetError) }
        queuedBytes -= scheduler.removeChannel(channel)
        events.append(.channelGone(channel: channel))
        reassembler.removeChannel(channel)
        for frame in flow.closeChannel(channel, held: delivered.held(by: channel)) {
            try? enqueueControl(frame)
        }
    }
}
