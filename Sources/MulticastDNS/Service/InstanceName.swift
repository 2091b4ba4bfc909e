/// Rules for DNS-SD service instance names (RFC 6763 section 4.1.1).
public enum InstanceName {
    /// The longest instance name in bytes of UTF-8: one DNS label.
    public static let maximumLength = DNSName.maximumLabelLength

    /// Checks that `name` can be published as an instance name: 1 to 63 bytes of UTF-8 with no control
    /// characters (RFC 6763 section 4.1.1 asks for Net-Unicode text, RFC 5198, which excludes them). Dots,
    /// spaces and any other printable characters are allowed.
    /// - Parameter name: The instance name, e.g. a peer's display name.
    /// - Throws: ``ServiceValidationError/instanceNameEmpty``,
    ///   ``ServiceValidationError/instanceNameTooLong(_:bytes:)`` or
    ///   ``ServiceValidationError/instanceNameInvalid(_:reason:)``.
    public static func validate(_ name: String) throws(ServiceValidationError) {
        guard !name.isEmpty else { throw .instanceNameEmpty }
        let bytes = name.utf8.count
        guard bytes <= maximumLength else { throw .instanceNameTooLong(name, bytes: bytes) }
        for scalar in name.unicodeScalars where scalar.properties.generalCategory == .control {
            let code = String(scalar.value, radix: 16, uppercase: true)
            let padded = String(repeating: "0", count: max(0, 4 - code.count)) + code
            throw .instanceNameInvalid(
                name,
                reason: "contains the control character U+\(padded); RFC 6763 section 4.1.1 requires "
                    + "Net-Unicode text (RFC 5198), which has no control characters")
        }
    }
}
