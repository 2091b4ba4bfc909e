/// What a connection learns and decides while it is set up: the preamble each way, whether TLS is required
/// and why, the hello exchange, and the verification code's commitment and nonces.
struct SetupState {
    /// The preference the application configured.
    let preference: EncryptionPreference
    /// Why this connection must use TLS whatever the preference allows (it expects a particular peer, or has a
    /// group secret), as the end of a sentence; nil when nothing requires it.
    let tlsRequirement: String?
    /// The preamble nonce: random bytes, part of the preamble's fixed layout.
    let preambleNonce: [UInt8]
    /// Bytes of the peer's preamble received so far.
    var preambleInput: [UInt8] = []
    var helloSent = false
    /// The dialer's verification-code nonce (its own on the dialer, revealed by the dialer on the acceptor).
    var dialerCodeNonce: [UInt8] = []
    /// The dialer's commitment to its nonce, as the acceptor received it.
    var dialerCommitment: [UInt8] = []
    /// The acceptor's verification-code nonce.
    var acceptorCodeNonce: [UInt8] = []
    /// The TLS exporter value the verification code is derived from.
    var codeExporterValue: [UInt8] = []
    /// The acceptor's view of the peer while it waits for the dialer's nonce.
    var confirmedPeer: ConnectedPeer?

    init(preference: EncryptionPreference, tlsRequirement: String?) {
        self.preference = preference
        self.tlsRequirement = tlsRequirement
        preambleNonce = SecureRandom.bytes(Preamble.nonceLength)
    }

    /// Why a connection with these settings must use TLS, or nil: only TLS proves a peer's identity, and a
    /// group proof sent in plaintext could be relayed by anyone in the middle.
    static func tlsRequirement(expecting: PeerFingerprint?, groupSecret: GroupSecret?) -> String? {
        if let expecting { return "it expects the peer \(expecting), whose identity only TLS proves" }
        if groupSecret != nil { return "it has a group secret, which only TLS can keep from a relaying attacker" }
        return nil
    }

    /// The preference this side announces and negotiates with: `.required` whenever TLS is required.
    var effectivePreference: EncryptionPreference { tlsRequirement == nil ? preference : .required }

    /// The dialer's offer.
    func offer() -> Preamble {
        Preamble(kind: .offer, preference: effectivePreference, outcome: .none, nonce: preambleNonce)
    }

    /// An acceptor's answer with `outcome`.
    func answer(_ outcome: Preamble.Outcome) -> Preamble {
        Preamble(kind: .answer, preference: effectivePreference, outcome: outcome, nonce: preambleNonce)
    }
}
