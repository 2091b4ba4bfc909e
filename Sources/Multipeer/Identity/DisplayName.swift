/// The rules for a peer's display name, the human-readable name other peers show.
///
/// A display name is not empty, is at most ``maximumByteCount`` bytes of UTF-8 (the limit of Apple's
/// `MCPeerID`), and contains no control characters (Unicode general category Cc: C0, DEL and C1), which
/// could forge line breaks in logs or terminal output. Display names are not unique; the
/// ``PeerFingerprint`` identifies a peer.
public enum DisplayName {
    /// The longest display name, in bytes of UTF-8; `MCPeerID` allows 63.
    public static let maximumByteCount = 63

    /// Checks `name` against the display-name rules.
    ///
    /// - Parameter name: The proposed display name.
    /// - Throws: ``IdentityError`` with code `.displayNameEmpty`, `.displayNameTooLong(byteCount:)` or
    ///   `.displayNameInvalid`, naming the rule that was broken.
    public static func validate(_ name: String) throws(IdentityError) {
        if name.isEmpty { throw .displayNameEmpty() }
        let byteCount = name.utf8.count
        if byteCount > maximumByteCount { throw .displayNameTooLong(byteCount: byteCount) }
        for (offset, scalar) in name.unicodeScalars.enumerated() where scalar.properties.generalCategory == .control {
            throw .displayNameInvalid(scalar: scalar, offset: offset)
        }
    }
}
