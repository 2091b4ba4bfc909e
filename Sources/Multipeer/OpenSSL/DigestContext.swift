internal import COpenSSL

/// Owns an `EVP_MD_CTX`, the context of one signing or verification.
final class DigestContext {
    let pointer: OpaquePointer

    init?() {
        guard let context = EVP_MD_CTX_new() else { return nil }
        pointer = context
    }

    deinit {
        EVP_MD_CTX_free(pointer)
    }
}
