internal import MultipeerIO

/// The libFuzzer oracle for what a TURN relay (or someone spoofing it) sends: STUN messages on the control
/// connection, read by a client that holds an allocation.
///
/// The properties: nothing crashes; a message that decodes encodes back to the same attributes; the client's
/// answer to any input is bounded (a few actions, each a message of at most the STUN limit), and never an
/// allocation or a bound connection it did not ask for. Package access, for `mdns-fuzz`.
package enum RelayFuzzHarness {
    static let credentials = TURNClientStateMachine.Credentials(username: "fuzz", password: "fuzz")

    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        if let message = try? STUNMessage(decoding: bytes) {
            let again = try? STUNMessage(decoding: message.encoded())
            precondition(again?.attributes == message.attributes, "a decoded STUN message does not round-trip")
            _ = message.errorCode
            _ = message.text(STUNMessage.AttributeType.realm)
            _ = message.address(STUNMessage.AttributeType.xorPeerAddress)
        }
        // The input as a stream of frames on a control connection of a client that is allocating.
        var client = TURNClientStateMachine(
            credentials: credentials, makeTransactionID: { [UInt8](repeating: 9, count: 12) })
        let now = IOInstant(nanoseconds: 1_000_000_000)
        _ = client.start(now: now)
        var rest = bytes[...]
        var frames = 0
        while frames < 16, let length = (try? STUNMessage.frameLength(rest)) ?? nil, rest.count >= length {
            let actions = client.received(Array(rest.prefix(length)), now: now)
            precondition(actions.count <= 3, "one message made \(actions.count) actions")
            for action in actions {
                switch action {
                case .send(let message): precondition(message.count <= STUNMessage.maximumLength)
                case .connected: preconditionFailure("a connect nobody asked for was answered")
                default: break
                }
            }
            rest = rest.dropFirst(length)
            frames += 1
        }
    }

    /// Seeds: the relay's answers to an allocation (the challenge, the success) and a connection attempt.
    package static func seeds() -> [[UInt8]] {
        let id = [UInt8](repeating: 9, count: 12)
        let challenge = STUNMessage(
            method: .allocate, messageClass: .error, transactionID: id,
            attributes: [
                STUNMessage.Attribute(type: STUNMessage.AttributeType.errorCode, value: [0, 0, 4, 1]),
                STUNMessage.textAttribute(STUNMessage.AttributeType.realm, "lab.test"),
                STUNMessage.textAttribute(STUNMessage.AttributeType.nonce, "abc"),
            ]
        ).encoded()
        let key = STUNCrypto.longTermKey(username: "fuzz", realm: "lab.test", password: "fuzz")
        let relayed = SocketAddress(.v4(IPv4Address(192, 0, 2, 50)), port: 49_200)
        let success = STUNMessage(
            method: .allocate, messageClass: .success, transactionID: id,
            attributes: [
                STUNMessage.xorAddress(STUNMessage.AttributeType.xorRelayedAddress, relayed, transactionID: id),
                STUNMessage.numberAttribute(STUNMessage.AttributeType.lifetime, 600),
            ]
        ).encoded(integrityKey: key, fingerprint: true)
        let attempt = STUNMessage(
            method: .connectionAttempt, messageClass: .indication, transactionID: id,
            attributes: [
                STUNMessage.xorAddress(STUNMessage.AttributeType.xorPeerAddress, relayed, transactionID: id),
                STUNMessage.numberAttribute(STUNMessage.AttributeType.connectionID, 7),
            ]
        ).encoded()
        return [challenge, challenge + success, challenge + success + attempt]
    }
}
