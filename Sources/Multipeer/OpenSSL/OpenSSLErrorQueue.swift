internal import COpenSSL

/// Reads OpenSSL's per-thread error queue so a failure can say what OpenSSL said.
enum OpenSSLErrorQueue {
    /// The most errors one message reports; the queue is emptied either way.
    static let maximumReported = 8

    /// Empties the calling thread's error queue, so an old failure is not blamed on the next operation.
    /// Every operation that can fail starts here, so this also makes sure OpenSSL is set up (``OpenSSLLibrary``).
    static func clear() {
        OpenSSLLibrary.initialize()
        ERR_clear_error()
    }

    /// Empties the calling thread's error queue and returns its entries joined by "; ", oldest first,
    /// or a fixed phrase when OpenSSL queued nothing.
    static func drain() -> String {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            if messages.count < maximumReported {
                // ERR_error_string_n documents 256 bytes as enough for any message.
                var buffer = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &buffer, buffer.count)
                messages.append(
                    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        return messages.isEmpty ? "OpenSSL reported no error detail" : messages.joined(separator: "; ")
    }
}
