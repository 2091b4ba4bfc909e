/// Why an identity operation failed: a display name broke a rule, a key could not be made, an identity file
/// was too open, unreadable or malformed, or OpenSSL refused an operation.
///
/// `code` says which kind of failure it was, for code to switch on; `reason` explains it to a person,
/// including OpenSSL's own error text where OpenSSL was involved; `file` and `line` say where in this library
/// the error was raised.
public struct IdentityError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Hashable, Sendable {
        /// The display name is empty.
        case displayNameEmpty
        /// The display name is longer than ``DisplayName/maximumByteCount`` bytes of UTF-8.
        case displayNameTooLong(byteCount: Int)
        /// The display name contains a control character.
        case displayNameInvalid
        /// OpenSSL could not generate an Ed25519 key pair.
        case keyGenerationFailed
        /// The identity file at `path` grants permissions to its group or to others (`mode` holds its
        /// permission bits); a private key must be readable by its owner only.
        case fileTooOpen(path: String, mode: UInt32)
        /// The identity file at `path` could not be opened, examined or read.
        case fileUnreadable(path: String)
        /// The identity file at `path` is not an identity file this library wrote, or is damaged.
        case fileMalformed(path: String)
        /// The identity file at `path` could not be written.
        case fileWriteFailed(path: String)
        /// A certificate could not be made, encoded or parsed.
        case certificateFailed
        /// A key or certificate holds a key that is not Ed25519.
        case notEd25519
        /// Another OpenSSL operation (signing, encoding a key) failed.
        case openSSL
    }

    /// The kind of failure.
    public let code: Code
    /// A sentence explaining what failed and why, for people.
    public let reason: String
    /// The source file in this library that raised the error.
    public let file: String
    /// The line in `file` that raised the error.
    public let line: Int

    /// Creates an error; the static factories below are the usual way.
    ///
    /// - Parameters:
    ///   - code: The kind of failure.
    ///   - reason: A sentence explaining it.
    ///   - file: The source file raising the error.
    ///   - line: The line raising the error.
    public init(code: Code, reason: String, file: String = #fileID, line: Int = #line) {
        self.code = code
        self.reason = reason
        self.file = file
        self.line = line
    }

    /// The reason, followed by where the error was raised.
    public var description: String {
        "IdentityError.\(code): \(reason) (\(file):\(line))"
    }
}

extension IdentityError {
    static func displayNameEmpty(file: String = #fileID, line: Int = #line) -> IdentityError {
        IdentityError(code: .displayNameEmpty, reason: "the display name is empty", file: file, line: line)
    }

    static func displayNameTooLong(
        byteCount: Int, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        IdentityError(
            code: .displayNameTooLong(byteCount: byteCount),
            reason: "the display name is \(byteCount) bytes of UTF-8; at most \(DisplayName.maximumByteCount) "
                + "are allowed", file: file, line: line)
    }

    static func displayNameInvalid(
        scalar: Unicode.Scalar, offset: Int, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        let padded = String(repeating: "0", count: max(0, 4 - hex.count)) + hex
        return IdentityError(
            code: .displayNameInvalid,
            reason: "the display name contains the control character U+\(padded) at Unicode scalar \(offset); "
                + "control characters are not allowed", file: file, line: line)
    }

    static func keyGenerationFailed(file: String = #fileID, line: Int = #line) -> IdentityError {
        IdentityError(
            code: .keyGenerationFailed,
            reason: "OpenSSL could not generate an Ed25519 key pair: \(OpenSSLErrorQueue.drain())",
            file: file, line: line)
    }

    static func fileTooOpen(
        path: String, mode: UInt32, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        let octal = String(mode & 0o7777, radix: 8)
        return IdentityError(
            code: .fileTooOpen(path: path, mode: mode & 0o7777),
            reason: "refusing to load the identity file '\(path)': its mode 0\(octal) lets its group or others "
                + "access the private key; run 'chmod 600 \(path)' if the file is yours", file: file, line: line)
    }

    static func fileUnreadable(
        path: String, detail: String, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        IdentityError(
            code: .fileUnreadable(path: path),
            reason: "cannot read the identity file '\(path)': \(detail)", file: file, line: line)
    }

    static func fileMalformed(
        path: String, detail: String, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        IdentityError(
            code: .fileMalformed(path: path),
            reason: "'\(path)' is not a valid identity file: \(detail)", file: file, line: line)
    }

    static func fileWriteFailed(
        path: String, detail: String, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        IdentityError(
            code: .fileWriteFailed(path: path),
            reason: "cannot write the identity file '\(path)': \(detail)", file: file, line: line)
    }

    static func certificateFailed(
        _ operation: String, file: String = #fileID, line: Int = #line
    ) -> IdentityError {
        IdentityError(
            code: .certificateFailed,
            reason: "\(operation) failed: \(OpenSSLErrorQueue.drain())", file: file, line: line)
    }

    static func notEd25519(_ what: String, file: String = #fileID, line: Int = #line) -> IdentityError {
        IdentityError(
            code: .notEd25519, reason: "\(what) does not hold an Ed25519 key", file: file, line: line)
    }

    static func openSSL(_ operation: String, file: String = #fileID, line: Int = #line) -> IdentityError {
        IdentityError(
            code: .openSSL, reason: "\(operation) failed: \(OpenSSLErrorQueue.drain())", file: file,
            line: line)
    }
}
