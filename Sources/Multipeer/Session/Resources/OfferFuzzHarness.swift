/// The libFuzzer oracle for a member's resource transfers as the receiver reads them: the offer (a file's name,
/// size and SHA-256) and the messages about its progress and outcome, and the name the file is saved under.
///
/// An input is `selector (1) | body`: the selector picks one of the five resource messages (offer, progress,
/// result, cancel, resume) and the body is its layout; the body is also taken as a file name. The properties:
/// nothing crashes; a body decodes or is refused with a ``SessionWireError``; a decoded message keeps its bounds
/// (16-byte identifier, 32-byte SHA-256, a name or reason of at most 512 bytes) and encodes back to the same bytes;
/// and whatever name a peer sends, the saved name (and each numbered variant of it) is one file in the resource
/// folder: not empty, no `/` or `\`, no control characters, not starting with a dot or a space nor ending with a
/// space, at most ``ResourceName/maximumByteCount`` bytes, and sanitized again unchanged. Package access, for
/// `mdns-fuzz`.
package enum OfferFuzzHarness {
    static let kinds: [SessionWire.Kind] = [
        .resourceOffer, .resourceProgress, .resourceResult, .resourceCancel, .resourceResume,
    ]

    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        guard let selector = bytes.first else { return }
        let body = Array(bytes.dropFirst().prefix(SessionMessage.maximumBodyLength))
        checkName(String(decoding: body, as: UTF8.self))
        let kind = kinds[Int(selector) % kinds.count]
        let message: SessionWire.Message?
        do {
            message = try SessionWire.decode(SessionMessage(kind: kind.rawValue, body: body))
        } catch {
            precondition(error.description.hasPrefix("session message resource"), "an unclear refusal: \(error)")
            return
        }
        guard let message else { preconditionFailure("a resource message was ignored") }
        SessionFuzzHarness.checkBounds(message)
        let encoded = SessionWire.encode(message)
        precondition(encoded.kind == kind.rawValue && encoded.body == body, "re-encoded differently: \(message)")
        precondition((try? SessionWire.decode(encoded)) == message, "round trip changed the message: \(message)")
        switch message {
        case .resourceOffer(_, let name, _, _):
            checkName(name)
        case .resourceProgress, .resourceResult, .resourceCancel, .resourceResume:
            break
        default:
            preconditionFailure("a resource kind decoded as \(message)")
        }
    }

    /// The file name a sent name is saved under stays one safe name in the folder, numbered or not.
    static func checkName(_ name: String) {
        let safe = ResourceName.sanitize(name)
        checkSafe(safe, limit: ResourceName.maximumByteCount, sent: name)
        precondition(ResourceName.sanitize(safe) == safe, "sanitizing \(Array(safe.utf8)) again changed it")
        for index in [2, 1_000] {
            // The longest name a Linux file system takes is 255 bytes.
            checkSafe(ResourceName.candidate(safe, index), limit: 255, sent: name)
        }
    }

    private static func checkSafe(_ safe: String, limit: Int, sent: String) {
        let utf8 = Array(safe.utf8)
        func what() -> String { "\(Array(sent.utf8)) saved as \(utf8)" }
        precondition(!utf8.isEmpty && utf8.count <= limit, "\(what()): \(utf8.count) bytes")
        precondition(!utf8.contains(UInt8(ascii: "/")) && !utf8.contains(UInt8(ascii: "\\")), "\(what()): a separator")
        precondition(!utf8.contains { $0 < 0x20 || $0 == 0x7F }, "\(what()): a control character")
        precondition(
            utf8.first != UInt8(ascii: ".") && utf8.first != UInt8(ascii: " "), "\(what()): a leading dot or space")
        precondition(utf8.last != UInt8(ascii: " "), "\(what()): a trailing space")
    }

    /// The input form of a resource message: its selector and body.
    static func input(_ message: SessionWire.Message) -> [UInt8] {
        let raw = SessionWire.encode(message)
        let selector = kinds.firstIndex { $0.rawValue == raw.kind }!
        return [UInt8(selector)] + raw.body
    }

    /// Seeds: offers of ordinary, hostile and long names, and each message about a transfer.
    package static func seeds() -> [[UInt8]] {
        let id = [UInt8](repeating: 0x11, count: SessionWire.idLength)
        let sha256 = [UInt8](repeating: 0x55, count: 32)
        let names = [
            "photo.jpg", "../../etc/passwd", "dir\\sub/file.txt", ".hidden", "  spaced name  .txt", "Résumé ✓.pdf",
            "👩‍👩‍👧 family.png", String(repeating: "long name ", count: 30) + ".tar.gz", "a\u{0}b\nc", "",
        ]
        let offers = names.enumerated().map { index, name in
            SessionWire.Message.resourceOffer(id: id, name: name, size: UInt64(index) << 20, sha256: sha256)
        }
        let others: [SessionWire.Message] = [
            .resourceProgress(id: id, have: 1 << 20), .resourceResult(id: id, ok: true, reason: ""),
            .resourceResult(id: id, ok: false, reason: "the SHA-256 of what arrived differs from the sender's"),
            .resourceCancel(id: id, reason: "cancelled by the receiver"), .resourceResume(id: id, have: 3 << 20),
        ]
        return (offers + others).map(input)
    }
}
