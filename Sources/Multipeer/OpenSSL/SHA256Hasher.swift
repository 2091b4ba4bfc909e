internal import COpenSSL
internal import MultipeerIO

/// SHA-256 over data that arrives in pieces (a file being sent or received), through OpenSSL's EVP interface.
final class SHA256Hasher: Sendable {
    private let context: Lock<DigestContextBox>

    private final class DigestContextBox: @unchecked Sendable {
        // Safety: only touched under the hasher's mutex.
        let context: DigestContext
        init(_ context: DigestContext) { self.context = context }
    }

    init() {
        OpenSSLLibrary.initialize()
        guard let context = DigestContext(), EVP_DigestInit_ex(context.pointer, EVP_sha256(), nil) == 1 else {
            preconditionFailure("OpenSSL SHA-256 init failed: \(OpenSSLErrorQueue.drain())")
        }
        self.context = Lock(DigestContextBox(context))
    }

    /// Adds bytes.
    func update<C: ContiguousCollection<UInt8>>(_ bytes: C) {
        context.withLock { box in
            let ok = bytes.withUnsafeBufferPointer { EVP_DigestUpdate(box.context.pointer, $0.baseAddress, $0.count) }
            precondition(ok == 1, "OpenSSL SHA-256 update failed")
        }
    }

    /// The digest of everything added (the hasher is spent afterwards).
    func finish() -> [UInt8] {
        context.withLock { box in
            var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
            var length: UInt32 = 0
            precondition(EVP_DigestFinal_ex(box.context.pointer, &digest, &length) == 1, "SHA-256 final failed")
            return Array(digest.prefix(Int(length)))
        }
    }
}

/// Collections whose elements are contiguous in memory.
protocol ContiguousCollection<Element>: Collection {
    func withUnsafeBufferPointer<R>(_ body: (UnsafeBufferPointer<Element>) throws -> R) rethrows -> R
}

extension Array: ContiguousCollection {}
extension ArraySlice: ContiguousCollection {}
