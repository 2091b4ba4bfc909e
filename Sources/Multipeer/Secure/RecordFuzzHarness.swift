/// The libFuzzer oracle for this package's TLS record layer (``TLSRecordProtection``), with fixed keys (no
/// handshake), so the fuzzer reaches the record parser and the AEAD on every input.
///
/// An input's first byte picks the mode. Even: the rest is received ciphertext, opened record by record; it
/// must be refused (nothing authenticates by chance) without crashing or reading out of bounds. Odd: the rest
/// is plaintext, sealed into records, optionally with one bit flipped at a position the input chooses, then
/// opened; an untouched round trip must give the plaintext back and a touched one must be refused. Exposed as
/// Package access, for `mdns-fuzz`.
package enum RecordFuzzHarness {
    static let clientSecret = [UInt8](repeating: 0xC1, count: 32)
    static let serverSecret = [UInt8](repeating: 0x5E, count: 32)

    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let suites: [TLSRecordProtection.Suite] = [.aes128GCM, .aes256GCM, .chaCha20Poly1305]
        let suite = suites[Int(mode >> 1) % suites.count]
        let sender = makeProtection(suite, sending: clientSecret, receiving: serverSecret)
        let receiver = makeProtection(suite, sending: serverSecret, receiving: clientSecret)
        if mode & 1 == 0 {
            if let opened = try? openAll(Array(bytes.dropFirst()), with: receiver), !opened.isEmpty {
                fatalError("random bytes authenticated as \(opened.count) bytes of plaintext")
            }
            return
        }
        let header = 4
        let plaintext = Array(bytes.dropFirst(header))
        var sealed: [UInt8] = []
        do throws(ConnectionError) {
            try plaintext.withUnsafeBytesTyped { content throws(ConnectionError) in
                try sender.seal(content, contentType: TLSRecordProtection.applicationDataType, into: &sealed)
            }
        } catch {
            fatalError("sealing \(plaintext.count) bytes failed: \(error)")
        }
        let tamper = bytes.count >= header && bytes[1] != 0
        if tamper {
            let position = (Int(bytes[2]) << 8 | Int(bytes[3])) % sealed.count
            sealed[position] ^= 1 << (bytes[1] & 7)
        }
        let opened = try? openAll(sealed, with: receiver)
        if tamper {
            if opened == plaintext && !plaintext.isEmpty { fatalError("a flipped bit went unnoticed") }
        } else if opened != plaintext {
            fatalError(
                "round trip of \(plaintext.count) bytes gave \(opened.map { "\($0.count) bytes" } ?? "an error")")
        }
    }

    private static func makeProtection(_ suite: TLSRecordProtection.Suite, sending: [UInt8], receiving: [UInt8])
        -> TLSRecordProtection
    {
        // A secret is as long as the suite's hash: 32 bytes, or 48 for SHA-384 (padded alike on both sides).
        func sized(_ secret: [UInt8]) -> [UInt8] {
            Array((secret + [UInt8](repeating: 0x33, count: 48)).prefix(suite.hashLength))
        }
        do {
            return try TLSRecordProtection(
                suite: suite, sendingSecret: sized(sending), receivingSecret: sized(receiving))
        } catch {
            fatalError("record keys: \(error)")
        }
    }

    /// Opens every whole record of `bytes` in order; throws on the first refused one.
    static func openAll(_ bytes: [UInt8], with protection: TLSRecordProtection) throws(ConnectionError) -> [UInt8] {
        var output: [UInt8] = []
        try openAll(bytes, with: protection, into: &output)
        return output
    }

    /// Opens every whole record of `bytes` in order, appending the plaintext to `output`; throws on the first
    /// refused one.
    static func openAll(_ bytes: [UInt8], with protection: TLSRecordProtection, into output: inout [UInt8])
        throws(ConnectionError)
    {
        var offset = 0
        while offset < bytes.count {
            let next = bytes.withUnsafeBytes {
                all -> Result<(length: Int, opened: TLSRecordProtection.Opened)?, ConnectionError> in
                do throws(ConnectionError) {
                    return .success(
                        try protection.openNext(in: UnsafeRawBufferPointer(rebasing: all[offset...]), into: &output))
                } catch {
                    return .failure(error)
                }
            }
            guard let (length, opened) = try next.get() else { break }
            guard opened == .data || opened == .keyUpdate else {
                throw ConnectionError(code: .protocolViolation, reason: "unexpected alert")
            }
            offset += length
        }
    }

    /// Seed inputs: a few round trips of each suite (with and without a flipped bit) and raw records.
    package static func seeds() -> [[UInt8]] {
        var seeds: [[UInt8]] = []
        for suite in 0..<3 {
            let mode = UInt8(suite << 1)
            seeds.append([mode | 1, 0, 0, 0] + Array("hello, record".utf8))
            seeds.append([mode | 1, 3, 0, 9] + [UInt8](repeating: 0x42, count: 200))
            seeds.append([mode, 23, 3, 3, 0, 20] + [UInt8](repeating: 0, count: 20))
            seeds.append([mode, 23, 3, 3, 0x41, 0x00])
        }
        return seeds
    }
}
