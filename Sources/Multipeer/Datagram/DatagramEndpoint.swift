internal import MultipeerIO

/// One UDP socket shared by every connection's unreliable datagrams: it sends sealed packets, and hands each
/// received packet to the connection whose receive id it carries, after the replay check and authentication.
///
/// Create and use it on its loop's thread. Like the `UDPSocket` it owns, it stays alive (the loop holds it through
/// the socket's receive handler) until ``close()`` or the loop's shutdown.
final class DatagramEndpoint: @unchecked Sendable {
    // Safety of @unchecked Sendable: every mutable property is touched only on `loop`'s thread, which each method
    // checks; the type is Sendable only so it can be handed back from `EventLoop.submit`.

    /// What the endpoint counted since it was created. `received` is the sum of `delivered` and the `dropped…`
    /// counters.
    struct Statistics: Hashable, Sendable {
        /// Datagrams that arrived on the socket.
        var received = 0
        /// Datagrams opened and handed to a connection's handler.
        var delivered = 0
        /// Dropped: not a well-formed packet (size, format byte, reserved bytes, counter range, truncated).
        var droppedMalformed = 0
        /// Dropped: no connection registered the receive id.
        var droppedUnknownReceiver = 0
        /// Dropped: failed authentication.
        var droppedAuthentication = 0
        /// Dropped: the counter was already delivered.
        var droppedReplay = 0
        /// Dropped: the counter was too far behind the replay window.
        var droppedTooOld = 0
        /// Dropped: the counter's key generation was beyond the next one.
        var droppedTooFarAhead = 0
        /// Packets handed to the kernel.
        var sent = 0
        /// Packets dropped on sending because the kernel pushed back (`EAGAIN`, `ENOBUFS`).
        var sendDrops = 0
    }

    private struct Registration {
        let opener: DatagramOpener
        let handler: ([UInt8]) -> Void
    }

    /// The loop the endpoint belongs to.
    let loop: EventLoop
    /// The address and port the socket is bound to (the real port when bound to port 0).
    let localAddress: SocketAddress
    private let socket: UDPSocket
    private var registrations: [UInt64: Registration] = [:]
    private var counters = Statistics()

    /// Creates the endpoint's socket and binds it. Loop thread only.
    /// - Parameters:
    ///   - address: The local address; port 0 picks a free port.
    ///   - loop: The owning loop.
    ///   - options: Socket options (for example a larger receive buffer).
    /// - Throws: `SystemCallError` if the socket cannot be created or bound.
    init(bindingTo address: SocketAddress, loop: EventLoop, options: UDPSocket.Options = .init())
        throws(SystemCallError)
    {
        precondition(loop.inEventLoop, "DatagramEndpoint must be created on its loop's thread")
        let socket = try UDPSocket(family: address.family, loop: loop, options: options)
        do {
            try socket.bind(to: address)
            localAddress = try socket.localAddress()
        } catch {
            socket.close()
            throw error
        }
        self.loop = loop
        self.socket = socket
        socket.setReceiveHandler { datagram in self.receive(datagram) }
    }

    /// What the endpoint counted so far. Loop thread only.
    var statistics: Statistics {
        precondition(loop.inEventLoop, "DatagramEndpoint used off its loop's thread")
        return counters
    }

    /// Routes packets carrying `receiverID` to `opener`, and their payloads to `handler`. Loop thread only.
    /// - Parameters:
    ///   - receiverID: The connection's own receive id (`DatagramKeys.receiving.receiverID`).
    ///   - opener: The connection's opener for that id.
    ///   - handler: Called on the loop thread with each delivered payload.
    /// - Returns: `false`, changing nothing, if another connection already registered `receiverID`.
    func register(receiverID: UInt64, opener: DatagramOpener, handler: @escaping ([UInt8]) -> Void) -> Bool {
        precondition(loop.inEventLoop, "DatagramEndpoint used off its loop's thread")
        precondition(opener.receiverID == receiverID, "the opener belongs to another receive id")
        guard registrations[receiverID] == nil else { return false }
        registrations[receiverID] = Registration(opener: opener, handler: handler)
        return true
    }

    /// Stops routing packets carrying `receiverID`; later ones count as unknown receivers. Loop thread only.
    /// - Parameter receiverID: A registered receive id; unknown ids are ignored.
    func unregister(receiverID: UInt64) {
        precondition(loop.inEventLoop, "DatagramEndpoint used off its loop's thread")
        registrations[receiverID] = nil
    }

    /// Sends one sealed packet. Loop thread only.
    ///
    /// Nothing is queued: if the kernel's buffer is full the packet is dropped and counted in `sendDrops`, which
    /// is what an unreliable message may suffer anyway.
    /// - Parameters:
    ///   - packet: A packet from `DatagramSealer.seal`.
    ///   - destination: The far side's endpoint address.
    /// - Returns: `true` if the kernel took the packet, `false` if it was dropped.
    /// - Throws: `SystemCallError` for failures other than push-back (for example an unreachable network).
    @discardableResult
    func send(_ packet: [UInt8], to destination: SocketAddress) throws(SystemCallError) -> Bool {
        precondition(loop.inEventLoop, "DatagramEndpoint used off its loop's thread")
        precondition(packet.count <= DatagramFormat.maximumPacketLength, "datagram packet too large")
        if try socket.send(packet, to: destination) {
            counters.sent += 1
            return true
        }
        counters.sendDrops += 1
        return false
    }

    /// Closes the socket and forgets every registration. Idempotent; loop thread only.
    func close() {
        precondition(loop.inEventLoop, "DatagramEndpoint used off its loop's thread")
        socket.close()
        registrations.removeAll()
    }

    // MARK: - Private

    /// Parses the header, finds the connection, and lets its opener check the replay window, decrypt and mark.
    private func receive(_ datagram: UDPDatagram) {
        counters.received += 1
        var handler: (([UInt8]) -> Void)?
        let result = datagram.bytes.withUnsafeBytes { packet -> Result<[UInt8], DatagramRejection> in
            guard !datagram.truncated, let header = DatagramHeader(parsing: packet) else { return .failure(.malformed) }
            guard let registration = registrations[header.receiverID] else { return .failure(.unknownReceiver) }
            handler = registration.handler
            return registration.opener.open(packet, header: header)
        }
        switch result {
        case .success(let payload):
            counters.delivered += 1
            handler?(payload)
        case .failure(.malformed): counters.droppedMalformed += 1
        case .failure(.unknownReceiver): counters.droppedUnknownReceiver += 1
        case .failure(.authenticationFailed): counters.droppedAuthentication += 1
        case .failure(.replayed): counters.droppedReplay += 1
        case .failure(.tooOld): counters.droppedTooOld += 1
        case .failure(.tooFarAhead): counters.droppedTooFarAhead += 1
        }
    }
}
