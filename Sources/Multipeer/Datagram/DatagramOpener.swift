internal import COpenSSL

/// Opens the incoming datagrams of one connection: checks the header and the replay window, picks the keys of
/// the packet's generation, decrypts and authenticates, and only then records the counter as delivered.
///
/// It holds the keys of at most three generations: the one of the newest delivered counter (``ReplayWindow``'s
/// highest, generation 0 before any), the next one (derived when a packet of it first arrives), and the
/// previous one while the replay window still reaches into it (for stragglers). A packet of any other
/// generation is dropped before any cryptography (``DatagramRejection/tooOld`` behind,
/// ``DatagramRejection/tooFarAhead`` ahead), so a forged counter can make it derive keys at most once per
/// generation the genuine packets reach. Keys are dropped (their cipher contexts freed and cleared) as soon as
/// no deliverable packet can need them.
///
/// Loop-confined like the connection that owns it (not thread-safe, not `Sendable`): the replay window and the
/// reused cipher contexts change with every packet.
final class DatagramOpener {
    /// This side's receive id: packets carrying another are refused as ``DatagramRejection/unknownReceiver``.
    let receiverID: UInt64
    /// The counters delivered so far.
    private(set) var window = ReplayWindow()
    /// Packets that failed authentication. AES-GCM's forgery bound grows with the number of attempts (RFC 9147
    /// section 4.5.3 limits AES-GCM to 2^36); they are also counted in ``counters`` for the connection.
    private(set) var authenticationFailures: UInt64 = 0
    /// What arrived for this receive id and what became of it, readable from any thread.
    let counters: DatagramCounters
    /// The direction's base secret, kept to derive the next generations' keys; wiped on deinit.
    private var secret: [UInt8]
    /// The keys of the newest delivered counter's generation.
    private var current: DatagramGenerationKeys
    /// The keys of the generation after ``current``, once a packet of it arrived.
    private var next: DatagramGenerationKeys?
    /// The keys of the generation before ``current``, while the replay window still reaches into it.
    private var previous: DatagramGenerationKeys?

    /// Creates an opener.
    /// - Parameters:
    ///   - secret: The direction's 32-byte base secret.
    ///   - receiverID: This side's receive id.
    ///   - counters: Where to count received packets and their outcomes.
    /// - Throws: ``DatagramError/openSSL(_:)`` if the keys cannot be derived or the cipher set up.
    init(secret: [UInt8], receiverID: UInt64, counters: DatagramCounters = DatagramCounters()) throws(DatagramError) {
        precondition(secret.count == DatagramKeys.secretLength, "the datagram base secret must be 32 bytes")
        self.secret = secret.withUnsafeBytes { Array($0) }
        current = try DatagramGenerationKeys(secret: secret, generation: 0, direction: .open)
        self.receiverID = receiverID
        self.counters = counters
    }

    deinit {
        secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
    }

    /// The generations whose keys the opener holds, oldest first.
    var heldGenerations: [UInt64] {
        [previous?.generation, current.generation, next?.generation].compactMap { $0 }
    }

    /// Opens a received packet.
    /// - Parameter packet: The whole UDP payload.
    /// - Returns: The payload, or why the packet was dropped; only a delivered packet changes the replay window.
    func open(_ packet: UnsafeRawBufferPointer) -> Result<[UInt8], DatagramRejection> {
        guard let header = DatagramHeader(parsing: packet) else { return .failure(.malformed) }
        return open(packet, header: header)
    }

    /// Opens a received packet; see ``open(_:)-(UnsafeRawBufferPointer)``.
    func open(_ packet: [UInt8]) -> Result<[UInt8], DatagramRejection> {
        packet.withUnsafeBytes { open($0) }
    }

    /// Opens a received packet whose header was already parsed from it, and counts it in ``counters`` if it
    /// carries this side's receive id.
    /// - Parameters:
    ///   - packet: The whole UDP payload.
    ///   - header: `DatagramHeader(parsing: packet)`.
    func open(_ packet: UnsafeRawBufferPointer, header: DatagramHeader) -> Result<[UInt8], DatagramRejection> {
        guard header.receiverID == receiverID else { return .failure(.unknownReceiver) }
        let result = authenticate(packet, counter: header.counter)
        switch result {
        case .success: counters.count(nil)
        case .failure(let rejection): counters.count(rejection)
        }
        return result
    }

    // MARK: - Private

    private func authenticate(_ packet: UnsafeRawBufferPointer, counter: UInt64) -> Result<[UInt8], DatagramRejection> {
        switch window.check(counter) {
        case .fresh: break
        case .replayed: return .failure(.replayed)
        case .tooOld: return .failure(.tooOld)
        }
        let keys: DatagramGenerationKeys
        switch generationKeys(for: DatagramGenerationKeys.generation(of: counter)) {
        case .success(let found): keys = found
        case .failure(let rejection): return .failure(rejection)
        }
        let headerLength = DatagramFormat.headerLength
        let length = packet.count - DatagramFormat.overhead
        let tagStart = headerLength + length
        var authentic = false
        let payload = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            authentic = keys.nonce.withNonce(counter: counter) { nonce in
                keys.cipher.open(
                    nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: packet[..<headerLength]),
                    ciphertext: UnsafeRawBufferPointer(rebasing: packet[headerLength..<tagStart]),
                    tag: UnsafeRawBufferPointer(rebasing: packet[tagStart...]),
                    into: UnsafeMutableRawBufferPointer(buffer))
            }
            initialized = authentic ? length : 0
        }
        guard authentic else {
            authenticationFailures += 1
            // A forged packet must not leave an entry behind to be blamed on the next OpenSSL call.
            OpenSSLErrorQueue.clear()
            return .failure(.authenticationFailed)
        }
        window.mark(counter)
        advanceGenerations()
        return .success(payload)
    }

    /// The keys for `generation` if the opener may use them: the current, the previous while held, or the next
    /// (derived now if this is its first packet). Anything else is dropped without deriving keys.
    private func generationKeys(for generation: UInt64) -> Result<DatagramGenerationKeys, DatagramRejection> {
        if generation == current.generation { return .success(current) }
        if let previous, generation == previous.generation { return .success(previous) }
        // The replay window already refused counters of older generations (a generation is far wider than it).
        guard generation == current.generation + 1 else { return .failure(.tooFarAhead) }
        if let next { return .success(next) }
        do throws(DatagramError) {
            let derived = try DatagramGenerationKeys(secret: secret, generation: generation, direction: .open)
            next = derived
            return .success(derived)
        } catch {
            // Only an allocation failure in OpenSSL gets here; a packet without keys cannot be authenticated.
            OpenSSLErrorQueue.clear()
            return .failure(.authenticationFailed)
        }
    }

    /// After a delivery: moves to the next generation when the newest counter entered it, and drops the previous
    /// generation's keys once the replay window no longer reaches into it.
    private func advanceGenerations() {
        guard let highest = window.highest else { return }
        if DatagramGenerationKeys.generation(of: highest) != current.generation, let next {
            previous = current
            current = next
            self.next = nil
        }
        let oldestInWindow = highest - min(highest, UInt64(ReplayWindow.size - 1))
        if previous != nil, DatagramGenerationKeys.generation(of: oldestInWindow) == current.generation {
            previous = nil
        }
    }
}
