import MultipeerIO

/// Why discovery failed.
///
/// `code` says which kind of failure it was, for code to switch on; `reason` explains it to a person (with the
/// system's own text when a system call failed, and the rule a name breaks when it was refused); `file` and
/// `line` say where in this library the error was raised.
public struct DiscoveryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Hashable, Sendable {
        /// A socket, interface or event-loop call failed: `call` is the system call, `errno` its error number
        /// (`EADDRINUSE` from `bind` means another program holds UDP port 5353 without sharing it).
        case socket(call: String, errno: Int32)
        /// The host label (``DiscoveryConfiguration/hostLabel``, or the one made from the host name) is not a
        /// valid DNS label.
        case invalidHostLabel(label: String, DNSNameError)
        /// A service type, instance name or TXT record breaks a DNS-SD rule.
        case invalidService(ServiceValidationError)
        /// The instance name and the service type do not form a valid DNS name together.
        case invalidServiceName(DNSNameError)
        /// The stack already advertises its limit of services (``ResponderConfiguration/maximumServices``).
        case tooManyServices(limit: Int)
        /// The stack was shut down.
        case shutDown
    }

    /// The kind of failure.
    public let code: Code
    /// A sentence explaining what failed and why, for people.
    public let reason: String
    /// The source file in this library that raised the error.
    public let file: String
    /// The line in `file` that raised the error.
    public let line: Int

    /// Creates an error.
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

    /// The code, the reason, and where the error was raised.
    public var description: String {
        "DiscoveryError.\(code): \(reason) (\(file):\(line))"
    }

    // The factories below give every kind its sentence in one place; they take the caller's location so the
    // error points at the line that threw it, not at this file.

    /// A system call failed while `doing` something (a phrase such as "opening the mDNS sockets").
    static func socket(_ error: SystemCallError, while doing: String, file: String = #fileID, line: Int = #line)
        -> DiscoveryError
    {
        DiscoveryError(
            code: .socket(call: error.call, errno: error.errno), reason: "\(doing) failed: \(error)", file: file,
            line: line)
    }

    /// The host label is not a valid DNS label.
    static func invalidHostLabel(_ label: String, _ error: DNSNameError, file: String = #fileID, line: Int = #line)
        -> DiscoveryError
    {
        DiscoveryError(
            code: .invalidHostLabel(label: label, error),
            reason: "the host label \"\(label)\" is not a valid DNS label: \(error)", file: file, line: line)
    }

    /// A name, type or TXT record breaks a rule; the validation error's own text names the rule.
    static func invalidService(_ error: ServiceValidationError, file: String = #fileID, line: Int = #line)
        -> DiscoveryError
    {
        DiscoveryError(code: .invalidService(error), reason: error.description, file: file, line: line)
    }

    /// The responder refused a registration.
    static func refused(_ error: ResponderError, file: String = #fileID, line: Int = #line) -> DiscoveryError {
        switch error {
        case .invalidName(let nameError):
            DiscoveryError(
                code: .invalidServiceName(nameError),
                reason: "the instance name and the service type do not form a valid DNS name: \(nameError)",
                file: file, line: line)
        case .tooManyServices(let limit):
            DiscoveryError(
                code: .tooManyServices(limit: limit),
                reason: "this stack already advertises \(limit) services, its limit (ResponderConfiguration."
                    + "maximumServices)", file: file, line: line)
        }
    }

    /// The stack was shut down before or during the call.
    static func shutDown(file: String = #fileID, line: Int = #line) -> DiscoveryError {
        DiscoveryError(code: .shutDown, reason: "the mDNS stack was shut down", file: file, line: line)
    }
}
