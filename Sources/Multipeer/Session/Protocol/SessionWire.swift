internal import MultipeerIO

/// The session layer's control messages, carried in the connection's `session` frames (``SessionMessage``):
/// invitations and their answers, joins through an introduction, the members and session secrets a link
/// shares, departures and delivery receipts. Every field is bounded here, before anything is kept; a body that
/// breaks a bound or ends early is refused as a whole (``SessionWireError``). The layout of each is in
/// `docs/PROTOCOL.md`, section 6.
enum SessionWire {
    /// The message kinds, as numbered on the wire.
    enum Kind: UInt16, CaseIterable {
        case invite = 1
        case inviteAnswer = 2
        case inviteCancel = 3
        case join = 4
        case joinAnswer = 5
        case sessions = 6
        case members = 7
        case leave = 8
        case delivered = 9
        case resume = 10
        case ack = 11
        case resourceOffer = 12
        case resourceProgress = 13
        case resourceResult = 14
        case resourceCancel = 15
        case resourceResume = 16
    }

    /// The answer an invitee gives.
    enum Answer: UInt8, Hashable, Sendable {
        /// The invitee accepted; this connection is now the session's link between the two.
        case accepted = 0
        /// The invitee's application declined, with its reason.
        case declined = 1
        /// Nobody answered before the inviter's deadline.
        case timedOut = 2
        /// The invitee refused without asking its application (limits, security, a full session), with why.
        case refused = 3
        /// The two are already linked (a crossing invitation or an introduction won): accepted, and this
        /// connection is closed.
        case alreadyConnected = 4
    }

    /// Limits on what a peer can make us hold.
    enum Limits {
        /// The longest invitation context: 8 KiB, half a session message.
        static let context = 8_192
        /// The longest reason or service type text.
        static let text = 512
        /// The most members one `members` message lists.
        static let membersPerMessage = 48
        /// The most addresses listed for one member.
        static let addressesPerMember = 4
        /// The most session secrets one side remembers and one `sessions` message lists.
        static let sessions = 64
    }

    /// A session's identifier and its secret: what a `join` proves knowledge of.
    struct SessionKey: Hashable, Sendable {
        var id: [UInt8]
        var secret: [UInt8]
    }

    /// A member as one side tells another about it, so the other can dial it and prove membership.
    struct Member: Hashable, Sendable {
        var fingerprint: PeerFingerprint
        var displayName: String
        /// The session identifier whose secret the member knows for sure (its own current one).
        var sessionID: [UInt8]
        /// Where the member listens, as the teller sees it.
        var addresses: [SocketAddress]
    }

    /// A decoded control message.
    enum Message: Hashable, Sendable {
        /// An invitation: its identifier (also the link's), how long the inviter waits, the service type it
        /// found the invitee under, the application's context data, and the inviting session's encryption
        /// preference (a `.none` session refuses an inviter that requires encryption, as Apple's does).
        case invite(
            id: [UInt8], timeoutMilliseconds: UInt32, serviceType: String, context: [UInt8],
            encryption: EncryptionPreference)
        /// The invitee's answer. An accepted one carries the invitee's current session and its secret (and only
        /// an accepted one does): the inviter adopts the link on this message, so it always knows a session the
        /// invitee holds and can redial it, even if the link ends before the invitee's `sessions` arrives.
        case inviteAnswer(id: [UInt8], answer: Answer, reason: String, session: SessionKey? = nil)
        case inviteCancel(id: [UInt8], reason: String)
        /// A member dialing a member it was introduced to: the link identifier, the session whose secret it
        /// proves, and `HMAC-SHA256(secret, "join" || binding || linkID)`.
        case join(linkID: [UInt8], sessionID: [UInt8], proof: [UInt8])
        case joinAnswer(accepted: Bool, reason: String)
        /// The sender's listening port, its current session, and every session secret it knows.
        case sessions(listenPort: UInt16, current: [UInt8], secrets: [[UInt8]: [UInt8]])
        case members([Member])
        case leave(reason: String)
        /// The receiving application took the numbered message `messageID` (its sequence number) of the
        /// conversation in which the receiver's epoch was `epoch`, so a receipt never confirms a message of another
        /// incarnation.
        case delivered(epoch: UInt64, messageID: UInt64)
        /// Sent on every new member link: the sender's conversation epoch, the epoch it knows of the receiver's
        /// (0 for none), and the last sequence number it received in order under that epoch.
        case resume(epoch: UInt64, peerEpoch: UInt64, received: UInt64)
        /// Every numbered message up to `received` is in the sender's inbox.
        case ack(received: UInt64)
        /// A resource the sender offers (again, after a reconnection): its name, size and SHA-256.
        case resourceOffer(id: [UInt8], name: String, size: UInt64, sha256: [UInt8])
        /// The receiver holds the first `have` bytes of the resource (send from there).
        case resourceProgress(id: [UInt8], have: UInt64)
        /// The receiver's verdict: saved and verified, or why not.
        case resourceResult(id: [UInt8], ok: Bool, reason: String)
        /// Either side gives the transfer up.
        case resourceCancel(id: [UInt8], reason: String)
        /// The receiver's answer to an offer (or to a stream starting at the wrong offset): send from `have`.
        case resourceResume(id: [UInt8], have: UInt64)
    }

    /// The service type of an invitation that presents a connection ticket (``ConnectionData``) instead of
    /// being found by discovery; no DNS-SD service type can have it.
    static let directServiceType = "mp.direct"

    static let idLength = 16
    static let secretLength = 32
    static let proofLength = 32

    // MARK: Encoding

    static func encode(_ message: Message) -> SessionMessage {
        var w = Writer()
        let kind: Kind
        switch message {
        case .invite(let id, let timeout, let serviceType, let context, let encryption):
            kind = .invite
            w.fixed(id)
            w.u32(timeout)
            w.text(serviceType)
            w.bytes(context)
            w.u8(encryption.rawValue)
        case .inviteAnswer(let id, let answer, let reason, let session):
            precondition((answer == .accepted) == (session != nil), "only an accepted answer names a session")
            kind = .inviteAnswer
            w.fixed(id)
            w.u8(answer.rawValue)
            w.text(reason)
            if let session {
                w.fixed(session.id)
                w.fixed(session.secret)
            }
        case .inviteCancel(let id, let reason):
            kind = .inviteCancel
            w.fixed(id)
            w.text(reason)
        case .join(let linkID, let sessionID, let proof):
            kind = .join
            w.fixed(linkID)
            w.fixed(sessionID)
            w.fixed(proof)
        case .joinAnswer(let accepted, let reason):
            kind = .joinAnswer
            w.u8(accepted ? 1 : 0)
            w.text(reason)
        case .sessions(let port, let current, let secrets):
            kind = .sessions
            w.u16(port)
            w.fixed(current)
            w.u8(UInt8(secrets.count))
            for (id, secret) in secrets.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                w.fixed(id)
                w.fixed(secret)
            }
        case .members(let members):
            kind = .members
            w.u8(UInt8(members.count))
            for member in members {
                w.fixed(member.fingerprint.bytes)
                w.text(member.displayName)
                w.fixed(member.sessionID)
                w.u8(UInt8(member.addresses.count))
                for address in member.addresses { w.address(address) }
            }
        case .leave(let reason):
            kind = .leave
            w.text(reason)
        case .delivered(let epoch, let id):
            kind = .delivered
            w.u64(epoch)
            w.u64(id)
        case .resume(let epoch, let peerEpoch, let received):
            kind = .resume
            w.u64(epoch)
            w.u64(peerEpoch)
            w.u64(received)
        case .ack(let received):
            kind = .ack
            w.u64(received)
        case .resourceOffer(let id, let name, let size, let sha256):
            kind = .resourceOffer
            w.fixed(id)
            w.text(name)
            w.u64(size)
            w.fixed(sha256)
        case .resourceProgress(let id, let have):
            kind = .resourceProgress
            w.fixed(id)
            w.u64(have)
        case .resourceResult(let id, let ok, let reason):
            kind = .resourceResult
            w.fixed(id)
            w.u8(ok ? 1 : 0)
            w.text(reason)
        case .resourceCancel(let id, let reason):
            kind = .resourceCancel
            w.fixed(id)
            w.text(reason)
        case .resourceResume(let id, let have):
            kind = .resourceResume
            w.fixed(id)
            w.u64(have)
        }
        return SessionMessage(kind: kind.rawValue, isCritical: true, body: w.bytes)
    }

    // MARK: Decoding

    /// Decodes a control message, or nil for a kind this version does not know and the sender marked as safe
    /// to ignore.
    /// - Throws: ``SessionWireError`` for an unknown critical kind or a body that breaks the layout or a bound.
    static func decode(_ message: SessionMessage) throws(SessionWireError) -> Message? {
        guard let kind = Kind(rawValue: message.kind) else {
            if message.isCritical { throw SessionWireError("unknown critical session message kind \(message.kind)") }
            return nil
        }
        var r = Reader(message.body, kind: kind)
        let decoded: Message
        switch kind {
        case .invite:
            let id = try r.fixed(idLength, "invitation id")
            let timeout = try r.u32("timeout")
            let serviceType = try r.text("service type")
            let context = try r.bytes("context", limit: Limits.context)
            let raw = try r.u8("encryption preference")
            guard let encryption = EncryptionPreference(rawValue: raw) else {
                throw r.error("unknown encryption preference \(raw)")
            }
            decoded = .invite(
                id: id, timeoutMilliseconds: timeout, serviceType: serviceType, context: context, encryption: encryption
            )
        case .inviteAnswer:
            let id = try r.fixed(idLength, "invitation id")
            let raw = try r.u8("answer")
            guard let answer = Answer(rawValue: raw) else { throw r.error("unknown answer \(raw)") }
            let reason = try r.text("reason")
            var session: SessionKey?
            if answer == .accepted {
                session = SessionKey(
                    id: try r.fixed(idLength, "accepting session id"),
                    secret: try r.fixed(secretLength, "accepting session secret"))
            }
            decoded = .inviteAnswer(id: id, answer: answer, reason: reason, session: session)
        case .inviteCancel:
            decoded = .inviteCancel(id: try r.fixed(idLength, "invitation id"), reason: try r.text("reason"))
        case .join:
            decoded = .join(
                linkID: try r.fixed(idLength, "link id"), sessionID: try r.fixed(idLength, "session id"),
                proof: try r.fixed(proofLength, "proof"))
        case .joinAnswer:
            let accepted = try r.u8("accepted")
            guard accepted <= 1 else { throw r.error("accepted flag \(accepted)") }
            decoded = .joinAnswer(accepted: accepted == 1, reason: try r.text("reason"))
        case .sessions:
            let port = try r.u16("listen port")
            let current = try r.fixed(idLength, "current session id")
            let count = Int(try r.u8("session count"))
            guard count <= Limits.sessions else { throw r.error("\(count) sessions, more than \(Limits.sessions)") }
            var secrets: [[UInt8]: [UInt8]] = [:]
            for _ in 0..<count {
                let id = try r.fixed(idLength, "session id")
                let secret = try r.fixed(secretLength, "session secret")
                guard secrets.updateValue(secret, forKey: id) == nil else { throw r.error("a session listed twice") }
            }
            decoded = .sessions(listenPort: port, current: current, secrets: secrets)
        case .members:
            let count = Int(try r.u8("member count"))
            guard count <= Limits.membersPerMessage else {
                throw r.error("\(count) members, more than \(Limits.membersPerMessage)")
            }
            var members: [Member] = []
            for _ in 0..<count {
                guard let fingerprint = PeerFingerprint(bytes: try r.fixed(PeerFingerprint.byteCount, "fingerprint"))
                else { throw r.error("bad fingerprint") }
                let name = try r.text("display name")
                guard (try? DisplayName.validate(name)) != nil else { throw r.error("a display name breaks the rules") }
                let sessionID = try r.fixed(idLength, "member session id")
                let addressCount = Int(try r.u8("address count"))
                guard addressCount <= Limits.addressesPerMember else {
                    throw r.error("\(addressCount) addresses, more than \(Limits.addressesPerMember)")
                }
                var addresses: [SocketAddress] = []
                for _ in 0..<addressCount { addresses.append(try r.address()) }
                members.append(
                    Member(fingerprint: fingerprint, displayName: name, sessionID: sessionID, addresses: addresses))
            }
            decoded = .members(members)
        case .leave:
            decoded = .leave(reason: try r.text("reason"))
        case .delivered:
            decoded = .delivered(epoch: try r.u64("epoch"), messageID: try r.u64("message id"))
        case .resume:
            decoded = .resume(
                epoch: try r.u64("epoch"), peerEpoch: try r.u64("peer epoch"), received: try r.u64("received"))
        case .ack:
            decoded = .ack(received: try r.u64("received"))
        case .resourceOffer:
            decoded = .resourceOffer(
                id: try r.fixed(idLength, "resource id"), name: try r.text("resource name"), size: try r.u64("size"),
                sha256: try r.fixed(32, "sha256"))
        case .resourceProgress:
            decoded = .resourceProgress(id: try r.fixed(idLength, "resource id"), have: try r.u64("have"))
        case .resourceResult:
            let id = try r.fixed(idLength, "resource id")
            let ok = try r.u8("ok")
            guard ok <= 1 else { throw r.error("ok flag \(ok)") }
            decoded = .resourceResult(id: id, ok: ok == 1, reason: try r.text("reason"))
        case .resourceCancel:
            decoded = .resourceCancel(id: try r.fixed(idLength, "resource id"), reason: try r.text("reason"))
        case .resourceResume:
            decoded = .resourceResume(id: try r.fixed(idLength, "resource id"), have: try r.u64("have"))
        }
        guard r.isAtEnd else { throw r.error("\(r.remaining) bytes after the last field") }
        return decoded
    }

    // MARK: Proofs

    /// The proof a joining member sends: `HMAC-SHA256(secret, "swift-multipeer join" || binding || linkID)`.
    static func joinProof(secret: [UInt8], binding: [UInt8], linkID: [UInt8]) -> [UInt8] {
        HMACSHA256.mac(key: secret, message: Array("swift-multipeer join".utf8) + binding + linkID)
    }

    // MARK: Writer and reader

    struct Writer {
        var bytes: [UInt8] = []
        mutating func u8(_ v: UInt8) { bytes.append(v) }
        mutating func u16(_ v: UInt16) { bytes += [UInt8(v >> 8), UInt8(truncatingIfNeeded: v)] }
        mutating func u32(_ v: UInt32) {
            for shift in stride(from: 24, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: v >> UInt32(shift)))
            }
        }
        mutating func u64(_ v: UInt64) {
            for shift in stride(from: 56, through: 0, by: -8) {
                bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(shift)))
            }
        }
        mutating func fixed(_ v: [UInt8]) { bytes += v }
        mutating func bytes(_ v: [UInt8]) {
            u16(UInt16(truncatingIfNeeded: v.count))
            bytes += v
        }
        /// Text, cut after the last whole character that keeps it within the limit.
        mutating func text(_ v: String) {
            guard v.utf8.count > Limits.text else { return bytes(Array(v.utf8)) }
            var cut: [UInt8] = []
            for character in v {
                let utf8 = Array(character.utf8)
                guard cut.count + utf8.count <= Limits.text else { break }
                cut += utf8
            }
            bytes(cut)
        }
        mutating func address(_ a: SocketAddress) {
            switch a.address {
            case .v4(let v4):
                u8(4)
                fixed(v4.byteArray)
            case .v6(let v6):
                u8(6)
                fixed(v6.byteArray)
            }
            u16(a.port)
        }
    }

    struct Reader {
        let data: [UInt8]
        /// What is read, for errors: `session message invite`.
        let what: String
        var offset = 0

        init(_ data: [UInt8], kind: Kind) {
            self.data = data
            what = "session message \(kind)"
        }

        init(_ data: [UInt8], what: String) {
            self.data = data
            self.what = what
        }

        var isAtEnd: Bool { offset == data.count }
        var remaining: Int { data.count - offset }

        func error(_ problem: String) -> SessionWireError { SessionWireError("\(what): \(problem)") }

        mutating func take(_ n: Int, _ field: String) throws(SessionWireError) -> ArraySlice<UInt8> {
            guard remaining >= n else { throw error("\(field) runs past the end of the body") }
            defer { offset += n }
            return data[offset..<offset + n]
        }
        mutating func u8(_ field: String) throws(SessionWireError) -> UInt8 { try take(1, field).first! }
        mutating func u16(_ field: String) throws(SessionWireError) -> UInt16 {
            try take(2, field).reduce(0) { $0 << 8 | UInt16($1) }
        }
        mutating func u32(_ field: String) throws(SessionWireError) -> UInt32 {
            try take(4, field).reduce(0) { $0 << 8 | UInt32($1) }
        }
        mutating func u64(_ field: String) throws(SessionWireError) -> UInt64 {
            try take(8, field).reduce(0) { $0 << 8 | UInt64($1) }
        }
        mutating func fixed(_ n: Int, _ field: String) throws(SessionWireError) -> [UInt8] { Array(try take(n, field)) }
        mutating func bytes(_ field: String, limit: Int) throws(SessionWireError) -> [UInt8] {
            let length = Int(try u16("\(field) length"))
            guard length <= limit else { throw error("\(field) of \(length) bytes, more than \(limit)") }
            return Array(try take(length, field))
        }
        mutating func text(_ field: String) throws(SessionWireError) -> String {
            let utf8 = try bytes(field, limit: Limits.text)
            guard let text = String(validating: utf8, as: UTF8.self) else { throw error("\(field) is not UTF-8") }
            return text
        }
        mutating func address() throws(SessionWireError) -> SocketAddress {
            let family = try u8("address family")
            let ip: IPAddress
            switch family {
            case 4: ip = .v4(IPv4Address(bytes: try fixed(4, "IPv4 address"))!)
            case 6: ip = .v6(IPv6Address(bytes: try fixed(16, "IPv6 address"))!)
            default: throw error("address family \(family)")
            }
            return SocketAddress(ip, port: try u16("port"))
        }
    }
}

/// A session control message that breaks the layout or a bound; the connection it came on is closed.
struct SessionWireError: Error, Hashable, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
