extension BrowserStateMachine {
    /// What the browser did.
    public struct Statistics: Hashable, Sendable {
        /// Query messages sent.
        public var queriesSent = 0
        /// Response messages handled.
        public var responsesReceived = 0
        /// Records dropped because the cache was full.
        public var recordsDroppedCacheFull = 0
        /// Instances dropped because too many were tracked.
        public var instancesDroppedLimit = 0
        /// Liveness queries sent.
        public var livenessQueries = 0
    }
}
