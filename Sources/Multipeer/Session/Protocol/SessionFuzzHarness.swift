internal import MultipeerIO

/// The libFuzzer oracle for what a member (or anyone who completed a handshake) sends a session: its control
/// messages, as `session` frames carry them, and the connection data (`nearbyConnectionData`) an application may
/// have carried from anyone.
///
/// An input is a session message as the frame holds it, `kind (2) | flags (1, bit 0: critical) | body`; the
/// whole input is also read as connection data. The properties: nothing crashes; a known kind decodes or is
/// refused with a ``SessionWireError`` that says what was read, an unknown one is ignored unless critical; what
/// decodes keeps every bound of ``SessionWire/Limits`` (and fixed-length identifiers, valid display names) and
/// encodes back to the same body (the same message, for the `sessions` map, whose order is not kept); connection
/// data that decodes is at most 1 KiB with at most 8 addresses and encodes back to the same bytes. Package access,
/// for `mdns-fuzz`.
package enum SessionFuzzHarness {
    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        checkConnectionData(bytes)
        guard bytes.count >= 3 else { return }
        let kind = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        // The frame decoder refuses longer bodies, so none reaches the session layer.
        let body = Array(bytes[3...].prefix(SessionMessage.maximumBodyLength))
        let raw = SessionMessage(kind: kind, isCritical: bytes[2] & 1 == 1, body: body)
        let decoded: SessionWire.Message?
        do {
            decoded = try SessionWire.decode(raw)
        } catch {
            precondition(error.description.contains("session message "), "an unclear refusal: \(error.description)")
            return
        }
        guard let message = decoded else {
            precondition(SessionWire.Kind(rawValue: kind) == nil && !raw.isCritical, "a known or critical kind ignored")
            return
        }
        checkBounds(message)
        let encoded = SessionWire.encode(message)
        precondition(encoded.kind == kind && encoded.isCritical, "re-encoded as another kind")
        precondition(encoded.body.count <= SessionMessage.maximumBodyLength, "re-encoded beyond the body limit")
        let again: SessionWire.Message?
        do {
            again = try SessionWire.decode(encoded)
        } catch {
            preconditionFailure("a decoded message does not decode again: \(error)\n\(message)")
        }
        precondition(again == message, "round trip changed the message:\n\(message)\n\(String(describing: again))")
        if case .sessions = message {
            precondition(encoded.body.count == body.count, "the sessions message changed size")
        } else {
            precondition(encoded.body == body, "a message re-encodes to other bytes: \(message)")
        }
    }

    /// What every decoded message must respect.
    static func checkBounds(_ message: SessionWire.Message) {
        func id(_ bytes: [UInt8]) {
            precondition(bytes.count == SessionWire.idLength, "an identifier of \(bytes.count)")
        }
        func text(_ text: String) {
            precondition(text.utf8.count <= SessionWire.Limits.text, "a text of \(text.utf8.count) bytes")
        }
        switch message {
        case .invite(let invitation, _, let serviceType, let context, _):
            id(invitation)
            text(serviceType)
            precondition(context.count <= SessionWire.Limits.context, "a context of \(context.count) bytes")
        case .inviteAnswer(let invitation, let answer, let reason, let session):
            id(invitation)
            text(reason)
            precondition(
                (answer == .accepted) == (session != nil), "an answer \(answer) with session \(session != nil)")
            if let session {
                id(session.id)
                precondition(session.secret.count == SessionWire.secretLength, "a secret of \(session.secret.count)")
            }
        case .inviteCancel(let invitation, let reason):
            id(invitation)
            text(reason)
        case .join(let linkID, let sessionID, let proof):
            id(linkID)
            id(sessionID)
            precondition(proof.count == SessionWire.proofLength, "a proof of \(proof.count) bytes")
        case .joinAnswer(_, let reason), .leave(let reason):
            text(reason)
        case .sessions(_, let current, let secrets):
            id(current)
            precondition(secrets.count <= SessionWire.Limits.sessions, "\(secrets.count) sessions")
            for (session, secret) in secrets {
                id(session)
                precondition(secret.count == SessionWire.secretLength, "a secret of \(secret.count) bytes")
            }
        case .members(let members):
            precondition(members.count <= SessionWire.Limits.membersPerMessage, "\(members.count) members")
            for member in members {
                precondition((try? DisplayName.validate(member.displayName)) != nil, "a member's name breaks the rules")
                id(member.sessionID)
                precondition(member.addresses.count <= SessionWire.Limits.addressesPerMember, "too many addresses")
            }
        case .resourceOffer(let resource, let name, _, let sha256):
            id(resource)
            text(name)
            precondition(sha256.count == 32, "a SHA-256 of \(sha256.count) bytes")
        case .resourceProgress(let resource, _), .resourceResume(let resource, _):
            id(resource)
        case .resourceResult(let resource, _, let reason), .resourceCancel(let resource, let reason):
            id(resource)
            text(reason)
        case .delivered, .resume, .ack:
            break
        }
    }

    /// The input as connection data: refused with a reason, or within its bounds and canonical.
    static func checkConnectionData(_ bytes: [UInt8]) {
        let data: ConnectionData
        do {
            data = try ConnectionData(decoding: bytes)
        } catch {
            precondition(error.description.hasPrefix("connection data"), "an unclear refusal: \(error.description)")
            return
        }
        precondition(bytes.count <= ConnectionData.maximumLength, "\(bytes.count) bytes of connection data accepted")
        precondition(data.addresses.count <= ConnectionData.maximumAddresses, "\(data.addresses.count) addresses")
        precondition(data.ticket.count == ConnectionData.ticketLength, "a ticket of \(data.ticket.count) bytes")
        precondition((try? DisplayName.validate(data.displayName)) != nil, "a display name that breaks the rules")
        precondition(data.encoded == bytes, "connection data re-encodes to other bytes")
    }

    /// The input form of a message: kind, flags, body.
    static func input(_ message: SessionWire.Message) -> [UInt8] {
        let raw = SessionWire.encode(message)
        return [UInt8(raw.kind >> 8), UInt8(truncatingIfNeeded: raw.kind), raw.isCritical ? 1 : 0] + raw.body
    }

    /// Seeds: every kind of control message as the session encodes it, and connection data.
    package static func seeds() -> [[UInt8]] {
        let id = [UInt8](repeating: 0x11, count: SessionWire.idLength)
        let other = [UInt8](repeating: 0x22, count: SessionWire.idLength)
        let fingerprint = PeerFingerprint(bytes: [UInt8](repeating: 0x33, count: PeerFingerprint.byteCount))!
        let v4 = SocketAddress(.v4(IPv4Address(192, 0, 2, 7)), port: 7000)
        let v6 = SocketAddress(
            .v6(IPv6Address(bytes: [0xfe, 0x80] + [UInt8](repeating: 0, count: 13) + [1])!), port: 7001)
        let messages: [SessionWire.Message] = [
            .invite(
                id: id, timeoutMilliseconds: 30_000, serviceType: "mp-colors", context: Array("hello".utf8),
                encryption: .required),
            .invite(
                id: id, timeoutMilliseconds: 5_000, serviceType: SessionWire.directServiceType, context: other,
                encryption: .none),
            .inviteAnswer(
                id: id, answer: .accepted, reason: "",
                session: SessionWire.SessionKey(
                    id: other, secret: [UInt8](repeating: 3, count: SessionWire.secretLength))),
            .inviteAnswer(id: id, answer: .declined, reason: "the application declined"),
            .inviteCancel(id: id, reason: "timed out"),
            .join(linkID: id, sessionID: other, proof: [UInt8](repeating: 0x44, count: SessionWire.proofLength)),
            .joinAnswer(accepted: false, reason: "unknown session"),
            .sessions(
                listenPort: 7000, current: id,
                secrets: [id: [UInt8](repeating: 1, count: 32), other: [UInt8](repeating: 2, count: 32)]),
            .members([
                SessionWire.Member(
                    fingerprint: fingerprint, displayName: "Alice ✓", sessionID: id, addresses: [v4, v6]),
                SessionWire.Member(fingerprint: fingerprint, displayName: "Bob", sessionID: other, addresses: []),
            ]),
            .leave(reason: "bye"), .delivered(epoch: 3, messageID: 42), .resume(epoch: 3, peerEpoch: 2, received: 41),
            .ack(received: 41),
            .resourceOffer(
                id: id, name: "photo.jpg", size: 1 << 20, sha256: [UInt8](repeating: 0x55, count: 32)),
            .resourceProgress(id: id, have: 1 << 19), .resourceResult(id: id, ok: true, reason: ""),
            .resourceCancel(id: id, reason: "cancelled by the sender"), .resourceResume(id: id, have: 0),
        ]
        let connectionData = [
            ConnectionData(fingerprint: fingerprint, displayName: "Alice", ticket: id, addresses: [v4, v6]).encoded,
            ConnectionData(fingerprint: fingerprint, displayName: "Bob ✓", ticket: other, addresses: []).encoded,
        ]
        // A kind from a newer version, safe to ignore.
        let unknown: [UInt8] = [0x01, 0x00, 0x00, 1, 2, 3]
        return messages.map(input) + connectionData + [unknown]
    }
}
