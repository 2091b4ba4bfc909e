internal import COpenSSL

/// Owns an OpenSSL memory BIO, used to move PEM text between Swift and OpenSSL without files.
final class MemoryBIO {
    let pointer: OpaquePointer

    /// An empty, writable memory BIO.
    init?() {
        guard let method = BIO_s_mem(), let bio = BIO_new(method) else { return nil }
        pointer = bio
    }

    /// A memory BIO holding a copy of `bytes`, ready to be read.
    init?(copying bytes: [UInt8]) {
        guard let method = BIO_s_mem(), let bio = BIO_new(method) else { return nil }
        pointer = bio
        guard
            bytes.isEmpty
                || bytes.withUnsafeBytes({ BIO_write(bio, $0.baseAddress, Int32($0.count)) }) == Int32(bytes.count)
        else { return nil }
    }

    deinit {
        BIO_free(pointer)
    }

    /// Everything written to the BIO and not read yet, removed from it.
    func readAll() -> [UInt8] {
        let pending = BIO_ctrl_pending(pointer)
        guard pending > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = bytes.withUnsafeMutableBytes { BIO_read(pointer, $0.baseAddress, Int32($0.count)) }
        return Array(bytes.prefix(max(0, Int(read))))
    }
}
