/// Setting a connection up: the preamble (TLS or plaintext, and who refuses whom), the hello exchange (identity,
/// group proof, limits), and the verification code both sides derive from the TLS session.
///
/// With TLS the acceptor speaks second: it sends its hello only after checking the dialer's. The
/// dialer's hello commits to a random nonce (SHA-256 of it), the acceptor's hello carries its own nonce, and the
/// dialer then reveals its nonce (a `codeReveal` frame); the code is derived from the TLS exporter and both
/// nonces. A man in the middle runs two TLS sessions with two exporter values; because each side fixed its
/// nonce before it saw the other's, he cannot steer either code toward the other, so the codes the two people
/// compare match only by chance (one in a million per connection).
extension ConnectionCore {
    /// The answer for a connection the acceptor has no room for (too many handshakes): send it and close.
    static func busyAnswer(preference: EncryptionPreference) -> [UInt8] {
        refusal(.busy, preference: preference)
    }

    /// The answer for a connection the acceptor refuses because it has its maximum of connections.
    static func fullAnswer(preference: EncryptionPreference) -> [UInt8] {
        refusal(.full, preference: preference)
    }

    private static func refusal(_ outcome: Preamble.Outcome, preference: EncryptionPreference) -> [UInt8] {
        Preamble(
            kind: .answer, preference: preference, outcome: outcome,
            nonce: [UInt8](repeating: 0, count: Preamble.nonceLength)
        ).bytes
    }

    // MARK: - Preamble

    /// Collects the peer's preamble; once whole, settles the mode.
    /// - Returns: The bytes that followed the preamble, or nil while it is incomplete.
    func receivePreamble(_ bytes: UnsafeRawBufferPointer) throws(ConnectionError) -> [UInt8]? {
        setup.preambleInput.append(contentsOf: bytes)
        guard setup.preambleInput.count >= Preamble.length else { return nil }
        let rest = Array(setup.preambleInput[Preamble.length...])
        let preamble: Preamble
        do {
            preamble = try Preamble.decode(
                setup.preambleInput[0..<Preamble.length], expected: role == .dialer ? .answer : .offer)
        } catch {
            if case .unsupportedVersion = error, role == .acceptor {
                rawOutput += setup.answer(.unsupportedVersion).bytes
            }
            throw .badPreamble(error)
        }
        setup.preambleInput = []
        try settleMode(preamble)
        return rest
    }

    /// Chooses TLS or plaintext from the peer's preamble (the acceptor also answers), or refuses with a reason.
    private func settleMode(_ preamble: Preamble) throws(ConnectionError) {
        let local = setup.effectivePreference
        let outcome: Preamble.Outcome
        if role == .acceptor {
            outcome = Preamble.negotiate(dialer: preamble.preference, acceptor: local)
            rawOutput += setup.answer(outcome).bytes
        } else {
            outcome = preamble.outcome
        }
        switch outcome {
        case .tls where local.allowsEncryption:
            record = try makeTLS(role)
        case .plaintext where local.allowsPlaintext:
            record = PlaintextRecordLayer()
            cutThrough.isActive = true
        case .plaintext where setup.tlsRequirement != nil:
            throw .plaintextChosenAnyway(requirement: setup.tlsRequirement ?? "")
        case .encryptionMismatch:
            // Would plaintext have been fine but for the requirement? Then that is the reason to give.
            if let requirement = setup.tlsRequirement, setup.preference.allowsPlaintext {
                throw .plaintextRefused(peer: preamble.preference, isDialer: role == .dialer, requirement: requirement)
            }
            throw .encryptionMismatch(local: local, remote: preamble.preference, isDialer: role == .dialer)
        case .busy:
            throw .peerBusy()
        case .full:
            throw .peerFull()
        case .unsupportedVersion:
            throw .preambleVersionRefused()
        default:
            throw .unexpectedOutcome(outcome, local: local)
        }
        phase = .handshake
    }

    // MARK: - Hello

    /// The record layer finished its handshake: the dialer speaks first. On plaintext the acceptor speaks at once
    /// too: there is no group proof (group secrets need TLS) and no verification code to order, so waiting for
    /// the dialer's hello would only cost a round trip.
    func handshakeFinished(_ record: any RecordLayer) throws(ConnectionError) {
        phase = .hello
        if role == .dialer || record is PlaintextRecordLayer {
            try sendHello(record)
        }
    }

    /// Frames before the connection is established: the peer's hello, then (acceptor, TLS) its code nonce.
    func handleSetupFrame(_ frame: Frame) throws(ConnectionError) {
        switch (phase, frame) {
        case (.hello, .hello(let hello)):
            try handleHello(hello)
        case (.confirming, .codeReveal(let nonce)):
            try handleCodeReveal(nonce)
        case (_, .error(let code, let text)):
            throw .peerError(code: code, text: text)
        case (_, .unknown):
            break  // a newer minor version's frame: ignored here too, as PROTOCOL.md requires
        default:
            throw .outOfPlace(frame.type, phase: phase)
        }
    }

    private func sendHello(_ record: any RecordLayer) throws(ConnectionError) {
        guard !setup.helloSent else { return }
        setup.helloSent = true
        var proof: [UInt8] = []
        if let secret = configuration.groupSecret {
            proof = secret.proof(binding: try groupBinding(record), isDialer: role == .dialer)
        }
        let isTLS = record.authenticatedPeer != nil
        var commitment: [UInt8] = []
        var nonce: [UInt8] = []
        if isTLS {
            if role == .dialer {
                setup.dialerCodeNonce = SecureRandom.bytes(Frame.Hello.codeNonceLength)
                commitment = VerificationCode.commitment(to: setup.dialerCodeNonce)
            } else {
                setup.acceptorCodeNonce = SecureRandom.bytes(Frame.Hello.codeNonceLength)
                nonce = setup.acceptorCodeNonce
            }
        }
        // Datagrams need keys from the TLS session: a plaintext connection sends unreliable messages reliably.
        let port = isTLS ? localDatagramPort : nil
        let hello = Frame.Hello(
            capabilities: port == nil ? [] : [.unreliableDatagrams], displayName: configuration.identity.displayName,
            fingerprint: configuration.identity.fingerprint.bytes, groupProof: proof, datagramPort: port,
            codeCommitment: commitment, codeNonce: nonce,
            maximumMessageLength: UInt32(configuration.maximumMessageLength))
        try enqueueControl(.hello(hello))
    }

    /// The TLS exporter label of ``sessionBinding``.
    static let sessionBindingLabel = "EXPORTER-swift-multipeer session"

    /// The group-proof binding: the TLS exporter value for the group label (group secrets require TLS).
    private func groupBinding(_ record: any RecordLayer) throws(ConnectionError) -> [UInt8] {
        guard let binding = try record.exportKeyingMaterial(label: GroupSecret.exporterLabel, length: 32) else {
            throw .groupSecretWithoutTLS()
        }
        return binding
    }

    private func handleHello(_ hello: Frame.Hello) throws(ConnectionError) {
        guard let record else { return }
        guard let claimed = PeerFingerprint(bytes: hello.fingerprint) else {
            throw .badHelloFingerprint(length: hello.fingerprint.count)
        }
        // The rule every display name follows (identities, gossip, trust stores): a name with a control character
        // never becomes a peer's, so no member later refuses gossip that names it, and no log or terminal shows it.
        do {
            try DisplayName.validate(hello.displayName)
        } catch {
            throw .badHelloDisplayName(error)
        }
        let proven = record.authenticatedPeer
        if let proven, proven != claimed { throw .helloContradictsCertificate(claimed: claimed, proven: proven) }
        // A dialer expecting someone never gets this far in plaintext (the preamble refused it); kept so the rule
        // holds here too.
        if proven == nil, let expectedPeer { throw .plaintextClaim(expected: expectedPeer, claimed: claimed) }
        guard let maximumMessageLength = hello.maximumMessageLength else { throw .helloWithoutMessageLimit() }
        var isGroupMember = false
        if let secret = configuration.groupSecret {
            let binding = try groupBinding(record)
            guard secret.verify(hello.groupProof, binding: binding, fromDialer: role == .acceptor) else {
                throw .groupProofRefused(sent: !hello.groupProof.isEmpty)
            }
            isGroupMember = true
        } else if !hello.groupProof.isEmpty {
            throw .unexpectedGroupProof()
        }
        if proven != nil {
            if role == .acceptor {
                guard hello.codeCommitment.count == Frame.Hello.codeNonceLength else {
                    throw .missingCodeField("commitment")
                }
                setup.dialerCommitment = hello.codeCommitment
            } else {
                guard hello.codeNonce.count == Frame.Hello.codeNonceLength else { throw .missingCodeField("nonce") }
                setup.acceptorCodeNonce = hello.codeNonce
            }
            setup.codeExporterValue =
                try record.exportKeyingMaterial(
                    label: VerificationCode.exporterLabel, length: VerificationCode.exporterLength) ?? []
            sessionBinding = try record.exportKeyingMaterial(label: Self.sessionBindingLabel, length: 32) ?? []
        }
        if localDatagramPort != nil, hello.capabilities.contains(.unreliableDatagrams),
            let port = hello.datagramPort, port != 0,
            let material = try record.exportKeyingMaterial(
                label: DatagramKeys.exporterLabel, length: DatagramKeys.exportedLength)
        {
            datagramPath = (port, DatagramKeys(exported: material, isDialer: role == .dialer))
        }
        var peer = ConnectedPeer(
            fingerprint: proven, claimedFingerprint: claimed, displayName: hello.displayName,
            isGroupMember: isGroupMember, protection: record.protectionDescription, verificationCode: nil,
            minorVersion: hello.minorVersion, capabilities: PeerCapabilities(hello.capabilities),
            maximumMessageLength: Int(maximumMessageLength))
        if role == .acceptor { try sendHello(record) }
        guard proven != nil else { return try established(peer) }
        if role == .dialer {
            peer.verificationCode = VerificationCode(
                exporterValue: setup.codeExporterValue, dialerNonce: setup.dialerCodeNonce,
                acceptorNonce: setup.acceptorCodeNonce)
            try enqueueControl(.codeReveal(nonce: setup.dialerCodeNonce))
            try established(peer)
        } else {
            setup.confirmedPeer = peer
            phase = .confirming
        }
    }

    /// The acceptor learns the dialer's nonce, checks it against the commitment, and derives the code.
    private func handleCodeReveal(_ nonce: [UInt8]) throws(ConnectionError) {
        guard var peer = setup.confirmedPeer,
            HMACSHA256.constantTimeEqual(VerificationCode.commitment(to: nonce), setup.dialerCommitment)
        else { throw .codeRevealMismatch() }
        setup.dialerCodeNonce = nonce
        peer.verificationCode = VerificationCode(
            exporterValue: setup.codeExporterValue, dialerNonce: nonce, acceptorNonce: setup.acceptorCodeNonce)
        try established(peer)
    }

    /// Both sides agree: open for frames, raise the connection window, open the default message channel. Every
    /// exporter value is computed by now (group binding, datagram keys, verification code), so OpenSSL's
    /// handshake state, with its copies of the secrets, is freed: our record layer needs none of it.
    private func established(_ peer: ConnectedPeer) throws(ConnectionError) {
        self.peer = peer
        setup.confirmedPeer = nil
        setup.codeExporterValue = []
        record?.releaseHandshakeState()
        phase = .established
        for frame in flow.connectionEstablished() { try enqueueControl(frame) }
        defaultMessageChannel = try openChannel(kind: .message, name: "")
        events.append(.established(peer))
    }
}
