import Multipeer

/// The property every byte stream must keep: the frame decoder never crashes, whether the bytes come at once or
/// in two pieces split where the input says, both ways decode the same frames, and every decoded frame survives
/// encode → decode unchanged. Anything else traps so libFuzzer records the input.
enum WireFuzzOracle {
    static let encoder = FrameEncoder()

    /// The frames a decoder yields for `chunks`, stopping at the first error (which is sticky).
    static func frames(_ chunks: [ArraySlice<UInt8>]) -> [Frame] {
        var decoder = FrameDecoder()
        var frames: [Frame] = []
        for chunk in chunks {
            decoder.append(chunk)
            while true {
                let frame: Frame?
                do {
                    frame = try decoder.next()
                } catch {
                    return frames
                }
                guard let frame else { break }  // needs more bytes
                frames.append(frame)
            }
        }
        return frames
    }

    /// Runs one input; returns `true` if it held at least one frame.
    @discardableResult
    static func check(_ bytes: [UInt8]) -> Bool {
        let whole = frames([bytes[...]])
        let split = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
        let pieces = frames([bytes[..<split], bytes[split...]])
        guard pieces == whole else {
            fatalError("split at \(split) decoded differently:\n\(whole)\n\(pieces)")
        }
        for frame in whole {
            let encoded: [UInt8]
            do {
                encoded = try encoder.encode(frame)
            } catch {
                fatalError("decoded frame does not encode: \(error)\n\(frame)")
            }
            guard frames([encoded[...]]) == [frame] else {
                fatalError("round trip changed the frame:\n\(frame)\n\(encoded)")
            }
        }
        return !whole.isEmpty
    }

    /// A few valid frames of every kind, as seed inputs.
    static func seeds() -> [[UInt8]] {
        let frames: [Frame] = [
            .hello(Frame.Hello(displayName: "Alice", fingerprint: [UInt8](repeating: 7, count: 32))),
            .hello(
                Frame.Hello(
                    displayName: "Bob", fingerprint: [UInt8](repeating: 8, count: 32), groupProof: [1, 2],
                    datagramPort: 9, codeNonce: [UInt8](repeating: 3, count: 32), maximumMessageLength: 4096)),
            .codeReveal(nonce: [UInt8](repeating: 5, count: 32)),
            .session(SessionMessage(kind: 7, isCritical: false, body: Array("invite".utf8))),
            .ping(token: 42), .pong(token: 42), .goodbye(reason: 1, text: "bye"), .error(code: 2, text: "oops"),
            .channelOpen(channel: 1, kind: .message, name: "chat", initialWindow: 65536),
            .channelData(channel: 1, bytes: Array("hello".utf8)), .channelClose(channel: 1),
            .channelReset(channel: 3, code: 9), .windowUpdate(channel: 0, increment: 4096),
            .message(
                channel: 1,
                fragment: Frame.MessageFragment(id: 1, totalLength: 5, isLast: true, bytes: Array("hi!!!".utf8))),
        ]
        return frames.compactMap { try? encoder.encode($0) } + [
            frames.compactMap { try? encoder.encode($0) }.flatMap { $0 }
        ]
    }
}
