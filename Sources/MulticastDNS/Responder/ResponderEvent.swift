/// What the responder tells its user.
public enum ResponderEvent: Hashable, Sendable {
    /// The service's name was claimed and first announced.
    case registered(ResponderStateMachine.ServiceID, name: String)
    /// Another host owns the name, so the service now uses a new one (RFC 6763 appendix D).
    case renamed(ResponderStateMachine.ServiceID, from: String, to: String)
    /// Another host owns our host name, so address records now use a new one.
    case hostRenamed(from: String, to: String)
    /// The service's goodbye packets went out; it is gone.
    case unregistered(ResponderStateMachine.ServiceID)
}
