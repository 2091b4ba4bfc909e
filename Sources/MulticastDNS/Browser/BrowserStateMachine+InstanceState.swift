import MultipeerIO

extension BrowserStateMachine {
    /// What the browser knows about one instance named by a PTR record: what it last reported, and when the
    /// instance needs resolving or a liveness check.
    struct InstanceState {
        var reported: DiscoveredInstance?
        var lastHeard: IOInstant
        var resolveAttempts = 0
        var nextResolve: IOInstant?
        /// The latest liveness check already covered by a sent query.
        var lastLivenessQuery: IOInstant?
        /// What resolution last asked for; new information that changes it asks again at once.
        var lastResolveQuestions: [DNSQuestion] = []
    }
}
