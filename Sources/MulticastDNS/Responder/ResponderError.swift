/// Why the responder refused a request.
public enum ResponderError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The instance name and service type do not form a valid DNS name.
    case invalidName(DNSNameError)
    /// The responder already publishes its limit of services.
    case tooManyServices(limit: Int)

    /// What was refused and why.
    public var description: String {
        switch self {
        case .invalidName(let error): "invalid service name: \(error)"
        case .tooManyServices(let limit): "a responder publishes at most \(limit) services"
        }
    }
}
