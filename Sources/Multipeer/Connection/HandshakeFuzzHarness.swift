internal import MultipeerIO

/// The libFuzzer oracle for the connection setup: the preamble parser, the hello parser and everything a
/// plaintext connection does with the frames that follow, fed arbitrary bytes from an unauthenticated peer.
///
/// The properties: nothing crashes; a connection that ends reports exactly one reason, with text; a peer's
/// bytes never make this side's output grow beyond a bound. Package access, for `mdns-fuzz`.
package enum HandshakeFuzzHarness {
    static let identity = try! PeerIdentity.generate(displayName: "fuzz")

    /// Runs one input against an acceptor and a dialer, with the default limits and with small ones (so the
    /// message-length and window checks are reached by short inputs); traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        let split = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
        for role in [ConnectionCore.Role.acceptor, .dialer] {
            for small in [false, true] {
                var configuration = ConnectionConfiguration(identity: identity, encryption: .none)
                if small {
                    configuration.maximumMessageLength = 16
                    configuration.connectionWindow = Int(FlowController.Configuration.initialCredit)
                    configuration.streamWindow = Int(FlowController.Configuration.initialCredit)
                }
                run(role: role, configuration: configuration, chunks: [bytes[..<split], bytes[split...]])
            }
        }
    }

    private static func run(
        role: ConnectionCore.Role, configuration: ConnectionConfiguration, chunks: [ArraySlice<UInt8>]
    ) {
        var now = IOInstant(nanoseconds: 1_000_000_000)
        let core = ConnectionCore(
            role: role, configuration: configuration, expectedPeer: nil, now: now,
            makeTLS: { (_) throws(ConnectionError) -> any RecordLayer in
                throw ConnectionError(code: .internalFailure, reason: "no TLS while fuzzing")
            })
        var output = core.takeOutput().count
        var closedCount = 0
        for chunk in chunks {
            core.receive(Array(chunk), now: now)
            now = now + .milliseconds(1)
            for _ in 0..<64 {
                let bytes = core.takeOutput(limit: 65_536).count
                output += bytes
                if bytes == 0 { break }
            }
            for case .closed(let error) in core.takeEvents() {
                closedCount += 1
                precondition(!error.reason.isEmpty, "a close without a reason")
            }
        }
        core.tick(now: now + .seconds(60))
        for event in core.takeEvents() {
            if case .closed = event { closedCount += 1 }
        }
        precondition(closedCount <= 1, "the connection ended \(closedCount) times")
        precondition(core.isClosed || closedCount == 0, "closed without reporting it")
        // The peer's bytes can make this side answer (pongs, window updates), never more than a bounded amount.
        precondition(output <= 1 << 20, "\(output) bytes of output for \(chunks.map(\.count)) bytes of input")
    }

    /// Valid openings to start from: an offer, an answer, and an offer followed by a hello and frames.
    package static func seeds() -> [[UInt8]] {
        let encoder = FrameEncoder()
        let nonce = [UInt8](repeating: 3, count: Preamble.nonceLength)
        let offer = Preamble(kind: .offer, preference: .none, outcome: .none, nonce: nonce).bytes
        let answer = Preamble(kind: .answer, preference: .none, outcome: .plaintext, nonce: nonce).bytes
        let hello = Frame.Hello(
            displayName: "seed", fingerprint: identity.fingerprint.bytes, maximumMessageLength: 1 << 20)
        let proofHello = Frame.Hello(
            displayName: "seed", fingerprint: identity.fingerprint.bytes,
            groupProof: [UInt8](repeating: 9, count: 32), maximumMessageLength: 1 << 20)
        let frames: [Frame] = [
            .ping(token: 1), .channelOpen(channel: 2, kind: .message, name: "", initialWindow: 262_144),
            .message(channel: 2, fragment: .init(id: 0, totalLength: 3, isLast: true, bytes: [1, 2, 3])),
            .message(channel: 2, fragment: .init(id: 1, totalLength: 70_000, isLast: false, bytes: [1])),
            .session(SessionMessage(kind: 1, body: [1])), .codeReveal(nonce: [UInt8](repeating: 1, count: 32)),
            .channelOpen(channel: 4, kind: .stream, name: "s", initialWindow: 262_144),
            .channelData(channel: 4, bytes: [9, 9]), .channelClose(channel: 4), .windowUpdate(channel: 0, increment: 9),
            .goodbye(reason: 0, text: "bye"),
        ]
        let tail = frames.compactMap { try? encoder.encode($0) }.flatMap { $0 }
        let helloBytes = (try? encoder.encode(.hello(hello))) ?? []
        let proofBytes = (try? encoder.encode(.hello(proofHello))) ?? []
        return [
            offer, answer, offer + helloBytes, answer + helloBytes, offer + helloBytes + tail,
            answer + proofBytes + tail, offer + proofBytes,
        ]
    }
}
