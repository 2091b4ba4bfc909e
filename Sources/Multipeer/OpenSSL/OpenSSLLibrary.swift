internal import COpenSSL

/// OpenSSL's process-wide set-up, done once before the first OpenSSL call of the library.
///
/// By default OpenSSL registers an `atexit` handler that frees its global state when the process exits. The
/// library's event loops keep running while `exit` runs those handlers (an app whose `main` simply returns, as
/// the Multipeer Connectivity tutorials do, exits with its sessions still open and its peers still sending), so a
/// loop thread decrypting a record then would use freed memory. Initializing with `OPENSSL_INIT_NO_ATEXIT`
/// leaves that state to the operating system, which reclaims it with the process.
enum OpenSSLLibrary {
    private static let initialized: Bool = {
        OPENSSL_init_ssl(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1
    }()

    /// Initializes OpenSSL without its exit handler, the first time only; later calls cost one load.
    static func initialize() {
        _ = initialized
    }
}
