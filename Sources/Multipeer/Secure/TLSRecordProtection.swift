internal import COpenSSL

/// The TLS 1.3 record layer for application data (RFC 8446 section 5.2), run by this package once OpenSSL has
/// finished the handshake: the same records OpenSSL would write, byte for byte, made with the application
/// traffic keys of the session through OpenSSL's AEAD (EVP), without OpenSSL's record buffers in between.
///
/// Why: OpenSSL's `SSL_write`/`SSL_read` copy every byte through its record buffers and our BIO and cost a few
/// microseconds per record; here a record is sealed straight into the output buffer and opened straight into
/// the frame decoder's, with one AEAD context per direction set up once.
///
/// What it covers: application data and alerts in both directions (close_notify included), the nonce from the
/// per-direction sequence number (section 5.3), the inner content type and zero padding (accepted when
/// received, never sent), the length limit (a record whose inner plaintext, content type and padding included,
/// exceeds 2^14 + 1 bytes is refused with `record_overflow`, section 5.4), and key updates (section 4.6.3): sent every
/// ``keyUpdateInterval`` records, followed when received, answered when asked for. What it refuses: other
/// post-handshake messages (NewSessionTicket: both sides disable tickets), a KeyUpdate split over records, any
/// outer record type but application_data, and a sequence number that would wrap. Every refusal ends the
/// session.
///
/// Not thread-safe: it belongs to its ``TLSSession``'s thread.
final class TLSRecordProtection {
    /// The cipher suites this record layer implements (all that ``TLSContext`` offers).
    enum Suite: Sendable {
        case aes128GCM
        case aes256GCM
        case chaCha20Poly1305

        /// The suite for an IANA name such as `TLS_AES_128_GCM_SHA256`, or nil.
        init?(name: String) {
            switch name {
            case "TLS_AES_128_GCM_SHA256": self = .aes128GCM
            case "TLS_AES_256_GCM_SHA384": self = .aes256GCM
            case "TLS_CHACHA20_POLY1305_SHA256": self = .chaCha20Poly1305
            default: return nil
            }
        }

        var keyLength: Int { self == .aes128GCM ? 16 : 32 }
        var cipher: OpaquePointer? {
            switch self {
            case .aes128GCM: EVP_aes_128_gcm()
            case .aes256GCM: EVP_aes_256_gcm()
            case .chaCha20Poly1305: EVP_chacha20_poly1305()
            }
        }
        var digest: OpaquePointer? { self == .aes256GCM ? EVP_sha384() : EVP_sha256() }
        var hashLength: Int { self == .aes256GCM ? 48 : 32 }
    }

    /// Outer record type of every protected record.
    static let applicationDataType: UInt8 = 23
    /// Inner content types.
    static let alertType: UInt8 = 21
    static let handshakeType: UInt8 = 22
    static let headerLength = 5
    static let tagLength = 16
    static let nonceLength = 12
    static let maximumPlaintext = 16_384
    /// The most inner plaintext one record may carry: content, the content type byte and zero padding together
    /// (section 5.4: 2^14 + 1). Every suite's AEAD adds exactly ``tagLength`` bytes, so a record's ciphertext
    /// length says how long its inner plaintext is before anything is decrypted.
    static let maximumInnerPlaintext = maximumPlaintext + 1

    /// What one received record held.
    enum Opened: Equatable {
        /// Application data, appended to the output.
        case data
        /// The peer's close_notify alert.
        case closeNotify
        /// Another alert: (level << 8) | description, as OpenSSL's info callback reports them.
        case alert(Int32)
        /// A KeyUpdate: the peer's later records use its next keys (already installed). If it asked for ours to
        /// change too, ``keyUpdateRequested`` is set until ``sealKeyUpdate(into:)`` answers.
        case keyUpdate
    }

    private let sealing: AEAD
    private let opening: AEAD
    private var sealSequence: UInt64 = 0
    private var openSequence: UInt64 = 0
    /// Records sealed with one key before this side moves to the next (section 5.5: AES-GCM keeps its safety
    /// margin for 2^24.5 full records; this updates at 2^23, every 128 GiB). Settable for tests.
    var keyUpdateInterval: UInt64 = 1 << 23
    /// Whether the peer asked for a KeyUpdate that this side has not sent yet (it must, before more data).
    private(set) var keyUpdateRequested = false
    /// The alert description for the last refused record: bad_record_mac (20), record_overflow (22), decode_error
    /// (50), illegal_parameter (47) or unexpected_message (10).
    private(set) var refusalAlert: UInt8 = 10
    /// KeyUpdates received in a row with fewer than ``quietRecordsBetweenKeyUpdates`` records between them.
    private var rapidKeyUpdates = 0
    static let quietRecordsBetweenKeyUpdates: UInt64 = 1024
    static let rapidKeyUpdateLimit = 8

    /// Derives the keys and IVs (section 7.3) from the two application traffic secrets.
    init(suite: Suite, sendingSecret: [UInt8], receivingSecret: [UInt8]) throws(ConnectionError) {
        sealing = try AEAD(suite: suite, secret: sendingSecret, encrypt: true)
        opening = try AEAD(suite: suite, secret: receivingSecret, encrypt: false)
    }

    /// The bytes `count` bytes of plaintext take once sealed (records of at most 16 KiB each).
    static func sealedLength(of count: Int) -> Int {
        let records = max(1, (count + maximumPlaintext - 1) / maximumPlaintext)
        return count + records * (headerLength + 1 + tagLength)
    }

    /// Appends `plaintext` to `output` as records of inner type `contentType`, at most 16 KiB of plaintext each:
    /// each record is encrypted straight from `plaintext` into `output`'s new storage (one pass, no copy).
    func seal(_ plaintext: UnsafeRawBufferPointer, contentType: UInt8, into output: inout [UInt8])
        throws(ConnectionError)
    {
        var offset = 0
        repeat {
            if contentType == Self.applicationDataType
                && (keyUpdateRequested || sealSequence >= keyUpdateInterval)
            {
                try sealKeyUpdate(into: &output)
            }
            let count = min(Self.maximumPlaintext, plaintext.count - offset)
            guard sealSequence < UInt64.max else {
                throw ConnectionError(code: .internalFailure, reason: "the TLS record sequence number would wrap")
            }
            let length = count + 1 + Self.tagLength
            var sealed = false
            let content = UnsafeRawBufferPointer(rebasing: plaintext[offset..<offset + count])
            output.append(addingCapacity: Self.headerLength + length) { span in
                span.withUnsafeMutableBufferPointer { buffer, initialized in
                    let record = UnsafeMutableRawBufferPointer(buffer)
                    record[0] = Self.applicationDataType
                    record[1] = 0x03
                    record[2] = 0x03
                    record[3] = UInt8(truncatingIfNeeded: length >> 8)
                    record[4] = UInt8(truncatingIfNeeded: length)
                    sealed = sealing.seal(
                        sequence: sealSequence, header: UnsafeRawBufferPointer(rebasing: record[0..<Self.headerLength]),
                        content: content, contentType: contentType,
                        into: UnsafeMutableRawBufferPointer(rebasing: record[Self.headerLength...]))
                    initialized = Self.headerLength + length
                }
            }
            guard sealed else {
                output.removeSubrange((output.count - Self.headerLength - length)...)
                throw ConnectionError(
                    code: .internalFailure, reason: "TLS record encryption failed: \(OpenSSLErrorQueue.drain())")
            }
            sealSequence += 1
            offset += count
        } while offset < plaintext.count
    }

    /// Appends a KeyUpdate handshake message (section 4.6.3, update_not_requested) sealed with the current
    /// keys, then moves this side to its next keys. Called when the interval is reached, and to answer a peer's
    /// request.
    func sealKeyUpdate(into output: inout [UInt8]) throws(ConnectionError) {
        let message: [UInt8] = [24, 0, 0, 1, 0]
        // Cleared first: sealing the message must not trigger another update.
        keyUpdateRequested = false
        let interval = keyUpdateInterval
        keyUpdateInterval = .max
        defer { keyUpdateInterval = interval }
        try message.withUnsafeBytesTyped { bytes throws(ConnectionError) in
            try seal(bytes, contentType: Self.handshakeType, into: &output)
        }
        try sealing.update()
        sealSequence = 0
    }

    /// Appends an alert record (level 1 warning, 2 fatal; description 0 is close_notify) to `output`.
    func sealAlert(level: UInt8, description: UInt8, into output: inout [UInt8]) throws(ConnectionError) {
        let alert: [UInt8] = [level, description]
        try alert.withUnsafeBytesTyped { bytes throws(ConnectionError) in
            try seal(bytes, contentType: Self.alertType, into: &output)
        }
    }

    /// The length of the record starting at `header` (its 5 header bytes), checked; the caller waits until
    /// that many bytes after the header are there.
    func recordBodyLength(header: UnsafeRawBufferPointer) throws(ConnectionError) -> Int {
        guard header[0] == Self.applicationDataType else {
            throw refuse("a record of type \(header[0]) after the handshake (only application_data is)", alert: 10)
        }
        guard header[1] == 0x03, header[2] == 0x03 else {
            throw refuse("a record with version \(header[1]).\(header[2]), not 3.3", alert: 50)
        }
        let length = Int(header[3]) << 8 | Int(header[4])
        // Section 5.2 allows 2^14 + 256 bytes of ciphertext for AEADs that expand more; ours add the tag only, so
        // anything beyond 2^14 + 1 + 16 carries too much inner plaintext (section 5.4) and is refused unread.
        guard length > Self.tagLength, length <= Self.maximumInnerPlaintext + Self.tagLength else {
            throw refuse(
                "a record of \(length) bytes of ciphertext: \(length - Self.tagLength) bytes of inner plaintext "
                    + "(record_overflow above \(Self.maximumInnerPlaintext)) or too short", alert: 22)
        }
        return length
    }

    /// Opens the record at the start of `bytes` if all of it is there: its length (header included) and what it
    /// held, or nil when more bytes are needed. Application data is appended to `output`.
    func openNext(in bytes: UnsafeRawBufferPointer, into output: inout [UInt8]) throws(ConnectionError)
        -> (length: Int, opened: Opened)?
    {
        guard bytes.count >= Self.headerLength else { return nil }
        let length =
            Self.headerLength
            + (try recordBodyLength(header: UnsafeRawBufferPointer(rebasing: bytes[0..<Self.headerLength])))
        guard bytes.count >= length else { return nil }
        return (length, try open(record: UnsafeRawBufferPointer(rebasing: bytes[0..<length]), into: &output))
    }

    /// Opens one record: `record` is its header and body. Application data is appended to `output`.
    func open(record: UnsafeRawBufferPointer, into output: inout [UInt8]) throws(ConnectionError) -> Opened {
        let bodyLength = record.count - Self.headerLength - Self.tagLength
        // The inner plaintext with its padding (section 5.4), checked before the padding is stripped; the callers'
        // recordBodyLength already refused it at the header, this keeps open(record:) safe on its own.
        guard bodyLength <= Self.maximumInnerPlaintext else {
            throw refuse("a record of \(bodyLength) bytes of inner plaintext (record_overflow)", alert: 22)
        }
        guard openSequence < UInt64.max else { throw refuse("the TLS record sequence number would wrap", alert: 10) }
        let start = output.count
        var opened = false
        output.append(addingCapacity: bodyLength) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                let destination = UnsafeMutableRawBufferPointer(buffer)
                opened = opening.open(
                    sequence: openSequence, aad: UnsafeRawBufferPointer(rebasing: record[0..<Self.headerLength]),
                    ciphertext: UnsafeRawBufferPointer(
                        rebasing: record[Self.headerLength..<(Self.headerLength + bodyLength)]),
                    tag: UnsafeRawBufferPointer(rebasing: record[(Self.headerLength + bodyLength)...]),
                    into: destination)
                initialized = bodyLength
            }
        }
        guard opened else {
            output.removeSubrange(start...)
            throw refuse("a record failed authentication (bad_record_mac)", alert: 20)
        }
        openSequence += 1
        // The inner content type is the last non-zero byte; zeros after it are padding.
        var end = output.count
        while end > start && output[end - 1] == 0 { end -= 1 }
        guard end > start else {
            output.removeSubrange(start...)
            throw refuse("a record with no content type (all padding)", alert: 10)
        }
        let type = output[end - 1]
        let contentLength = end - 1 - start
        switch type {
        case Self.applicationDataType:
            output.removeSubrange((end - 1)...)
            return .data
        case Self.alertType:
            defer { output.removeSubrange(start...) }
            guard contentLength == 2 else { throw refuse("an alert of \(contentLength) bytes", alert: 50) }
            let level = Int32(output[start])
            let description = Int32(output[start + 1])
            return description == 0 ? .closeNotify : .alert(level << 8 | description)
        case Self.handshakeType:
            // Only KeyUpdate is expected (no tickets are used), whole in one record: type 24, length 1, and
            // update_requested (1) or not (0).
            let message = Array(output[start..<end - 1])
            output.removeSubrange(start...)
            guard message.count == 5, message[0] == 24, message[1] == 0, message[2] == 0, message[3] == 1 else {
                throw refuse(
                    "a handshake message after the handshake that is not a whole KeyUpdate (type \(message.first ?? 0), "
                        + "\(message.count) bytes)", alert: 10)
            }
            guard message[4] <= 1 else { throw refuse("a KeyUpdate with request \(message[4])", alert: 47) }
            // Each update costs key derivations: a peer may not make us do them back to back for long.
            rapidKeyUpdates = openSequence < Self.quietRecordsBetweenKeyUpdates ? rapidKeyUpdates + 1 : 0
            guard rapidKeyUpdates <= Self.rapidKeyUpdateLimit else {
                throw refuse(
                    "\(rapidKeyUpdates) KeyUpdates within \(Self.quietRecordsBetweenKeyUpdates) records each", alert: 10
                )
            }
            try opening.update()
            openSequence = 0
            if message[4] == 1 { keyUpdateRequested = true }
            return .keyUpdate
        default:
            output.removeSubrange(start...)
            throw refuse("a record of inner content type \(type)", alert: 10)
        }
    }

    /// The error for a refused record, remembering the alert that tells the peer why (``refusalAlert``).
    private func refuse(_ what: String, alert: UInt8) -> ConnectionError {
        refusalAlert = alert
        return ConnectionError(code: .protocolViolation, reason: "a TLS record was rejected: the peer sent \(what)")
    }

    /// One direction's AEAD: the context with its key, and the IV the sequence number is mixed into. Internal
    /// (not private) so tests can seal records this layer never sends, such as padded ones.
    final class AEAD {
        private let context: OpaquePointer
        private let suite: Suite
        /// The traffic secret the key and IV come from, kept for the next key update; wiped when replaced.
        private var secret: [UInt8]
        private var iv: [UInt8] = []
        private let encrypt: Bool

        init(suite: Suite, secret: [UInt8], encrypt: Bool) throws(ConnectionError) {
            self.suite = suite
            // A copy of its own (not storage shared with the caller's array), so that each side can wipe its own.
            self.secret = secret.withUnsafeBytes { Array($0) }
            self.encrypt = encrypt
            OpenSSLErrorQueue.clear()
            guard let context = EVP_CIPHER_CTX_new() else { throw .tlsSetup("allocating a record cipher") }
            self.context = context
            guard EVP_CipherInit_ex(context, suite.cipher, nil, nil, nil, encrypt ? 1 : 0) == 1,
                multipeer_aead_set_iv_length(context, Int32(TLSRecordProtection.nonceLength)) == 1
            else { throw .tlsSetup("setting up the record cipher") }
            try installKeys()
        }

        deinit {
            EVP_CIPHER_CTX_free(context)
            secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        }

        /// Derives the key and IV from ``secret`` (section 7.3) and keys the context with them.
        private func installKeys() throws(ConnectionError) {
            var key = try Self.expandLabel(suite: suite, secret: secret, label: "key", length: suite.keyLength)
            defer { key.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
            iv = try Self.expandLabel(
                suite: suite, secret: secret, label: "iv", length: TLSRecordProtection.nonceLength)
            let mode: Int32 = encrypt ? 1 : 0
            guard key.withUnsafeBufferPointer({ EVP_CipherInit_ex(context, nil, nil, $0.baseAddress, nil, mode) }) == 1
            else { throw .tlsSetup("keying the record cipher") }
        }

        /// Moves to the next traffic secret (section 7.2: HKDF-Expand-Label(secret, "traffic upd", "", hash
        /// length)) and its key and IV.
        func update() throws(ConnectionError) {
            var next = try Self.expandLabel(
                suite: suite, secret: secret, label: "traffic upd", length: suite.hashLength)
            swap(&next, &secret)
            next.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
            try installKeys()
        }

        /// Seals record `sequence`: `content` then the inner `contentType` byte, encrypted into `body` (which
        /// holds both, then the tag), with the record `header` as additional data.
        func seal(
            sequence: UInt64, header: UnsafeRawBufferPointer, content: UnsafeRawBufferPointer, contentType: UInt8,
            into body: UnsafeMutableRawBufferPointer
        ) -> Bool {
            guard start(sequence: sequence, aad: header), let base = body.baseAddress else { return false }
            let output = base.assumingMemoryBound(to: UInt8.self)
            var written: Int32 = 0
            if !content.isEmpty {
                guard EVP_CipherUpdate(context, output, &written, bytes(content), Int32(content.count)) == 1,
                    Int(written) == content.count
                else { return false }
            }
            var type = contentType
            guard EVP_CipherUpdate(context, output + content.count, &written, &type, 1) == 1, written == 1 else {
                return false
            }
            var scratch: UInt8 = 0
            guard EVP_CipherFinal_ex(context, &scratch, &written) == 1, written == 0 else { return false }
            return multipeer_aead_get_tag(context, output + content.count + 1, Int32(TLSRecordProtection.tagLength))
                == 1
        }

        /// Sets the nonce for record `sequence` (the IV with the sequence number XORed into its last 8 bytes,
        /// section 5.3) and feeds the additional data.
        private func start(sequence: UInt64, aad: UnsafeRawBufferPointer) -> Bool {
            let mode: Int32 = encrypt ? 1 : 0
            let keyed = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: TLSRecordProtection.nonceLength) {
                nonce in
                for index in 0..<4 { nonce[index] = iv[index] }
                for index in 0..<8 {
                    nonce[4 + index] = iv[4 + index] ^ UInt8(truncatingIfNeeded: sequence >> (56 - 8 * index))
                }
                return EVP_CipherInit_ex(context, nil, nil, nil, nonce.baseAddress, mode) == 1
            }
            var written: Int32 = 0
            return keyed && EVP_CipherUpdate(context, nil, &written, bytes(aad), Int32(aad.count)) == 1
        }

        /// Opens record `sequence`: decrypts `ciphertext` into `output` (same length) and checks `tag`, with the
        /// record header as `aad`. False if the record is not authentic (then `output` holds garbage).
        func open(
            sequence: UInt64, aad: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
            tag: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) -> Bool {
            var written: Int32 = 0
            guard start(sequence: sequence, aad: aad) else { return false }
            if !ciphertext.isEmpty {
                guard
                    EVP_CipherUpdate(
                        context, output.baseAddress?.assumingMemoryBound(to: UInt8.self), &written,
                        bytes(ciphertext), Int32(ciphertext.count)) == 1, Int(written) == ciphertext.count
                else { return false }
            }
            guard multipeer_aead_set_tag(context, bytes(tag), Int32(TLSRecordProtection.tagLength)) == 1 else {
                return false
            }
            var scratch: UInt8 = 0
            return EVP_CipherFinal_ex(context, &scratch, &written) == 1 && written == 0
        }

        private func bytes(_ buffer: UnsafeRawBufferPointer) -> UnsafePointer<UInt8>? {
            buffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
        }

        /// HKDF-Expand-Label(secret, label, "", length) of RFC 8446 section 7.1, for lengths up to one hash
        /// output (HKDF-Expand's first block, T(1) = HMAC(secret, info || 0x01)).
        static func expandLabel(suite: Suite, secret: [UInt8], label: String, length: Int) throws(ConnectionError)
            -> [UInt8]
        {
            precondition(length <= suite.hashLength, "one HKDF block only")
            let fullLabel = Array("tls13 \(label)".utf8)
            var info: [UInt8] = [UInt8(length >> 8), UInt8(length & 0xFF), UInt8(fullLabel.count)]
            info += fullLabel
            info += [0, 1]  // empty context, then HKDF's block counter
            var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
            var written: UInt32 = 0
            let result = secret.withUnsafeBytes { key in
                HMAC(suite.digest, key.baseAddress, Int32(key.count), info, info.count, &output, &written)
            }
            guard result != nil, Int(written) == suite.hashLength else {
                throw .tlsSetup("deriving the record \(label)")
            }
            defer { output.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
            return Array(output.prefix(length))
        }
    }
}
