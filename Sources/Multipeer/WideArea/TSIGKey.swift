internal import Foundation
public import MulticastDNS

/// A shared secret that signs DNS updates with a transaction signature (RFC 8945, HMAC-SHA256): the key a DNS
/// server's administrator made for the zone, such as with `keymgr -t NAME hmac-sha256` (Knot) or
/// `tsig-keygen -a hmac-sha256 NAME` (BIND).
///
/// Written as one line, `hmac-sha256:KEYNAME:BASE64SECRET`, the form `nsupdate -y` and `knsupdate -y` take.
/// Its description never shows the secret.
public struct TSIGKey: Sendable, Hashable, CustomStringConvertible {
    /// The only algorithm this library signs with.
    public static let algorithm = "hmac-sha256"
    /// The longest key file read (a line of a 255-byte name and a base64 secret is far shorter).
    static let maximumFileSize = 4096

    /// The key's name, as the server knows it.
    public let name: DNSName
    /// The secret.
    let secret: [UInt8]

    /// Creates a key.
    /// - Parameters:
    ///   - name: The key's name, as the server knows it.
    ///   - secret: The secret: at least 16 bytes (RFC 8945 section 6 asks for a key as long as the hash output;
    ///     shorter ones are refused as guessable).
    /// - Throws: ``WideAreaError`` with `invalidConfiguration` for a short secret.
    public init(name: DNSName, secret: [UInt8]) throws(WideAreaError) {
        guard secret.count >= 16 else {
            throw WideAreaError(
                .invalidConfiguration,
                "the TSIG key '\(name)' has a \(secret.count)-byte secret; at least 16 bytes are needed")
        }
        guard !name.labels.isEmpty else {
            throw WideAreaError(.invalidConfiguration, "a TSIG key needs a name")
        }
        self.name = name
        self.secret = secret
    }

    /// Parses `hmac-sha256:KEYNAME:BASE64SECRET` (surrounding white space ignored).
    /// - Parameter line: The line.
    /// - Throws: ``WideAreaError`` with `invalidConfiguration` saying which part is wrong (never quoting the
    ///   secret).
    public init(parsing line: String) throws(WideAreaError) {
        let text = line.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw WideAreaError(
                .invalidConfiguration,
                "a TSIG key is written 'hmac-sha256:KEYNAME:BASE64SECRET' (the form nsupdate -y takes); this has "
                    + "\(parts.count) part\(parts.count == 1 ? "" : "s") separated by ':'")
        }
        guard parts[0].lowercased() == Self.algorithm else {
            throw WideAreaError(
                .invalidConfiguration,
                "the TSIG key's algorithm is '\(parts[0].prefix(32))'; only \(Self.algorithm) is supported")
        }
        let name: DNSName
        do {
            name = try DNSName(String(parts[1]))
        } catch {
            throw WideAreaError(.invalidConfiguration, "the TSIG key's name is not a DNS name: \(error)")
        }
        guard let secret = Data(base64Encoded: String(parts[2])), !secret.isEmpty else {
            throw WideAreaError(.invalidConfiguration, "the TSIG key '\(name)' has a secret that is not base64")
        }
        try self.init(name: name, secret: [UInt8](secret))
    }

    /// Reads a key file: one line `hmac-sha256:KEYNAME:BASE64SECRET`, in a file only its owner can read.
    /// - Parameter path: The file.
    /// - Throws: ``WideAreaError`` with `invalidConfiguration` when the file is missing, larger than 4 KiB,
    ///   readable or writable by its group or others (the secret would not be secret), or malformed.
    public static func load(contentsOf path: String) throws(WideAreaError) -> TSIGKey {
        let text: String
        switch SecretFile.read(path, what: "TSIG key file", maximumSize: maximumFileSize) {
        case .success(let read): text = read
        case .failure(let refusal): throw WideAreaError(.invalidConfiguration, refusal.reason)
        }
        let lines = text.split(whereSeparator: \.isNewline).filter {
            !$0.allSatisfy(\.isWhitespace) && !$0.hasPrefix("#")
        }
        guard lines.count == 1 else {
            throw WideAreaError(
                .invalidConfiguration,
                "the TSIG key file \(path) has \(lines.count) key lines; it holds one, "
                    + "'hmac-sha256:KEYNAME:BASE64SECRET'")
        }
        do {
            return try TSIGKey(parsing: String(lines[0]))
        } catch {
            throw WideAreaError(.invalidConfiguration, "\(path): \(error.reason)")
        }
    }

    public var description: String { "TSIG key \(name) (\(Self.algorithm))" }
}
