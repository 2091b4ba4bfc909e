internal import Foundation
internal import MulticastDNS
internal import MultipeerIO

/// Asks one DNS server questions and sends it updates, over UDP with TCP when an answer is truncated
/// (RFC 1035 section 4.2, RFC 7766), on an event loop.
///
/// Every exchange uses a fresh UDP socket (a random source port) and a random message ID, and accepts only an
/// answer from the server's address with that ID and the same question: someone off the path must guess both to
/// forge one. Updates are signed (``TSIGKey``) and their responses verified, so a forged answer to an update is
/// refused however it was made. Every answer is decoded with ``DNSLimits/unicast`` bounds.
final class UnicastDNSClient: Sendable {
    /// How many times a UDP question is sent before the server counts as unreachable, and how long each try
    /// waits (doubling): 1 s, 2 s, 4 s, as resolvers do.
    struct Timing: Sendable {
        var tries = 3
        var firstWait: Duration = .seconds(1)
        /// The whole of a TCP exchange (connect, send, answer).
        var tcpTimeout: Duration = .seconds(5)
    }

    /// The EDNS(0) UDP payload size advertised with questions: 1232 bytes, the size the DNS flag day 2020 chose
    /// to avoid fragmentation; a longer answer comes truncated and is asked again over TCP.
    static let udpPayloadSize: UInt16 = 1232

    let server: SocketAddress
    let loop: EventLoop
    let timing: Timing

    init(server: SocketAddress, loop: EventLoop, timing: Timing = Timing()) {
        self.server = server
        self.loop = loop
        self.timing = timing
    }

    /// Asks for the records of one name and type.
    /// - Returns: The server's response, whatever its response code (the caller decides what NXDOMAIN means).
    /// - Throws: ``WideAreaError`` with `unreachable` when no answer came, `badResponse` when it did not decode.
    func query(_ name: DNSName, _ type: DNSRecordType) async throws(WideAreaError) -> DNSMessage {
        let id = UInt16.random(in: 0...UInt16.max)
        let question = DNSQuestion(name: name, type: type)
        // RD set: a recursive resolver in between answers for the authoritative server as well.
        var message = DNSMessage(id: id, flags: 0x0100, questions: [question])
        message.additionals = [Self.ednsRecord]
        let bytes: [UInt8]
        do {
            var encoder = DNSMessageEncoder(limits: .unicast)
            encoder.usesNameCompression = false
            bytes = try encoder.encode(message)
        } catch {
            throw WideAreaError(.invalidConfiguration, "cannot ask for \(name) \(type): \(error)")
        }
        let answer = try await exchange(bytes, id: id, question: question, what: "\(name) \(type)")
        do {
            let response = try DNSMessageDecoder(limits: .unicast).decode(answer)
            return response
        } catch {
            throw WideAreaError(.badResponse, "the answer of \(server) for \(name) \(type) does not decode: \(error)")
        }
    }

    /// Sends an update (RFC 2136) signed with `key` and verifies the response's signature.
    /// - Returns: The verified response.
    /// - Throws: ``WideAreaError``: `refused` with the response code and signature error when the server
    ///   refused, `unreachable`, or `badResponse` for a response that is unsigned or does not verify.
    func update(_ message: DNSMessage, key: TSIGKey, zone: DNSName) async throws(WideAreaError) -> DNSMessage {
        var message = message
        message.id = UInt16.random(in: 0...UInt16.max)
        let encoded: [UInt8]
        do {
            var encoder = DNSMessageEncoder(limits: .unicast)
            // RFC 2782: SRV targets are never compressed; without compression no server can misread one.
            encoder.usesNameCompression = false
            encoded = try encoder.encode(message)
        } catch {
            throw WideAreaError(.invalidConfiguration, "cannot encode the update of \(zone): \(error)")
        }
        let signed = TransactionSignature.sign(encoded, key: key, timeSigned: Self.unixTime())
        let answer = try await exchange(
            signed.bytes, id: message.id, question: message.questions.first, what: "the update of \(zone)")
        let verified = try TransactionSignature.verify(
            answer, requestMAC: signed.mac, key: key, now: Self.unixTime())
        let code = verified.message.responseCode
        guard code == 0, verified.error == 0 else {
            var reason =
                "the DNS server \(server) refused the update of \(zone) with \(key): "
                + WideAreaError.responseCodeName(code)
            if verified.error != 0 { reason += ", \(WideAreaError.signatureErrorName(verified.error))" }
            reason += Self.explanation(of: code)
            throw WideAreaError(
                .refused(responseCode: code, signatureError: verified.error == 0 ? nil : verified.error), reason)
        }
        return verified.message
    }

    /// Seconds since the Unix epoch, as transaction signatures count time.
    static func unixTime() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970)) }

    /// What an update's response code means for a registration.
    private static func explanation(of code: UInt8) -> String {
        switch code {
        case 5: " (the server does not allow this key to change this zone)"
        case 9: " (the server is not authoritative for the zone, or did not accept the signature)"
        case 10: " (a name is outside the zone)"
        default: ""
        }
    }

    /// The OPT pseudo-record of a question: the UDP payload size in its class field.
    static let ednsRecord = DNSResourceRecord(
        name: .root, ttl: 0, recordClass: udpPayloadSize, data: .unknown(type: .opt, bytes: []))

    // MARK: Exchanges

    /// Sends `bytes` over UDP (retrying) and, if the answer is truncated, over TCP; returns the answer's bytes.
    private func exchange(_ bytes: [UInt8], id: UInt16, question: DNSQuestion?, what: String)
        async throws(WideAreaError) -> [UInt8]
    {
        let answer = try await run(UDPExchange(client: self, bytes: bytes, id: id, question: question, what: what))
        // TC is bit 9 of the flags word (RFC 1035 section 4.1.1).
        guard answer.count >= 4, answer[2] & 0x02 != 0 else { return answer }
        return try await run(TCPExchange(client: self, bytes: bytes, id: id, question: question, what: what))
    }

    private func run(_ exchange: Exchange) async throws(WideAreaError) -> [UInt8] {
        let loop = loop
        let result: Result<[UInt8], WideAreaError> = await withCheckedContinuation { continuation in
            exchange.setCompletion { continuation.resume(returning: $0) }
            if !loop.execute({ exchange.start() }) {
                exchange.finish(.failure(WideAreaError(.unreachable, "the event loop stopped")))
            }
        }
        return try result.get()
    }

    /// Whether a received message answers ours: our ID, a response, and our question (when one was asked).
    static func matches(_ bytes: [UInt8], id: UInt16, question: DNSQuestion?) -> Bool {
        guard bytes.count >= 12, UInt16(bytes[0]) << 8 | UInt16(bytes[1]) == id, bytes[2] & 0x80 != 0 else {
            return false
        }
        guard let question else { return true }
        // The question is compared decoded; a response too large or malformed to decode is not ours.
        guard let message = try? DNSMessageDecoder(limits: .unicast).decode(bytes) else {
            // A truncated UDP answer may end mid-record: its header and question still have to match.
            return bytes[2] & 0x02 != 0
        }
        return message.questions.first.map { $0.name == question.name && $0.type == question.type } ?? true
    }
}

/// One exchange with the server: started on the loop, ends once (whichever thread ends it). The UDP and TCP
/// exchanges differ in how they send and read.
private class Exchange: @unchecked Sendable {
    // Safety of @unchecked Sendable: the subclasses' state is touched only on the client's loop thread; the
    // completion is behind a lock.
    let client: UnicastDNSClient
    let bytes: [UInt8]
    let id: UInt16
    let question: DNSQuestion?
    let what: String
    private let completion = Lock<(@Sendable (Result<[UInt8], WideAreaError>) -> Void)?>(nil)

    init(client: UnicastDNSClient, bytes: [UInt8], id: UInt16, question: DNSQuestion?, what: String) {
        self.client = client
        self.bytes = bytes
        self.id = id
        self.question = question
        self.what = what
    }

    func setCompletion(_ handler: @escaping @Sendable (Result<[UInt8], WideAreaError>) -> Void) {
        completion.withLock { $0 = handler }
    }

    /// Starts on the loop.
    func start() {}

    /// Closes the exchange's socket and timer (on the loop).
    func cleanUp() {}

    /// Ends the exchange once: cleans up when on the loop, and calls the completion unless it was called already.
    func finish(_ result: Result<[UInt8], WideAreaError>) {
        if client.loop.inEventLoop { cleanUp() }
        guard let handler = completion.withLock({ $0.take() }) else { return }
        handler(result)
    }
}

/// A UDP exchange: a socket of its own, the message sent up to `tries` times with doubling waits.
private final class UDPExchange: Exchange, @unchecked Sendable {
    private var socket: UDPSocket?
    private var timer: TimerID?
    private var sent = 0

    override func start() {
        let server = client.server
        do {
            let socket = try UDPSocket(family: server.family, loop: client.loop)
            try socket.bind(to: SocketAddress(server.family == .ipv4 ? .v4(.any) : .v6(.any), port: 0))
            self.socket = socket
            socket.setReceiveHandler { [self] datagram in receive(datagram) }
        } catch {
            return finish(.failure(WideAreaError(.unreachable, "cannot open a UDP socket for \(what): \(error)")))
        }
        send()
    }

    private func send() {
        guard let socket else { return }
        let timing = client.timing
        guard sent < timing.tries else {
            return finish(
                .failure(
                    WideAreaError(
                        .unreachable,
                        "the DNS server \(client.server) did not answer \(what) (\(sent) tries over UDP in "
                            + "\(totalWait(tries: sent)))")))
        }
        do {
            try socket.send(bytes, to: client.server)
        } catch {
            return finish(
                .failure(WideAreaError(.unreachable, "cannot send \(what) to \(client.server): \(error)")))
        }
        let wait = timing.firstWait * (1 << sent)
        sent += 1
        timer = client.loop.scheduleTimer(after: wait) { [self] in
            timer = nil
            send()
        }
    }

    private func totalWait(tries: Int) -> Duration {
        (0..<tries).reduce(Duration.zero) { $0 + client.timing.firstWait * (1 << $1) }
    }

    private func receive(_ datagram: UDPDatagram) {
        // Only the server's address and port, our ID and our question: anything else is someone else's.
        guard datagram.source.address == client.server.address, datagram.source.port == client.server.port,
            !datagram.truncated, UnicastDNSClient.matches(datagram.bytes, id: id, question: question)
        else { return }
        finish(.success(datagram.bytes))
    }

    override func cleanUp() {
        if let timer { client.loop.cancelTimer(timer) }
        timer = nil
        socket?.close()
        socket = nil
    }
}

/// A TCP exchange: one connection, the message with its two-byte length, one answer of at most 65,535 bytes.
private final class TCPExchange: Exchange, @unchecked Sendable {
    private var connection: TCPConnection?
    private var timer: TimerID?
    private var received: [UInt8] = []

    override func start() {
        let server = client.server
        let what = what
        timer = client.loop.scheduleTimer(after: client.timing.tcpTimeout) { [self] in
            timer = nil
            finish(
                .failure(
                    WideAreaError(
                        .unreachable,
                        "the DNS server \(server) did not answer \(what) over TCP within \(client.timing.tcpTimeout)")))
        }
        connection = TCPConnection.beginConnect(to: server, loop: client.loop) { [self] result in
            switch result {
            case .success(let connection):
                self.connection = connection
                connection.setHandlers(
                    onData: { [self] data in receive(data) },
                    onClose: { [self] error in
                        finish(
                            .failure(
                                WideAreaError(
                                    .unreachable,
                                    "the DNS server \(server) closed the TCP connection before answering \(what)"
                                        + (error.map { ": \($0)" } ?? ""))))
                    })
                connection.write([UInt8(bytes.count >> 8), UInt8(bytes.count & 0xff)] + bytes)
            case .failure(let error):
                finish(
                    .failure(WideAreaError(.unreachable, "cannot reach the DNS server \(server) over TCP: \(error)")))
            }
        }
    }

    private func receive(_ data: [UInt8]) {
        received += data
        guard received.count >= 2 else { return }
        let length = Int(received[0]) << 8 | Int(received[1])
        guard received.count >= 2 + length else { return }
        let answer = Array(received[2..<2 + length])
        guard UnicastDNSClient.matches(answer, id: id, question: question) else {
            return finish(
                .failure(
                    WideAreaError(.badResponse, "the DNS server \(client.server) answered \(what) with another message")
                ))
        }
        finish(.success(answer))
    }

    override func cleanUp() {
        if let timer { client.loop.cancelTimer(timer) }
        timer = nil
        connection?.close()
        connection = nil
    }
}
