extension ResponderStateMachine {
    /// What the responder did.
    public struct Statistics: Hashable, Sendable {
        /// Queries received.
        public var queriesReceived = 0
        /// Responses received.
        public var responsesReceived = 0
        /// Messages sent (multicast and unicast).
        public var messagesSent = 0
        /// Answers held back because the record went out on that link less than a second ago.
        public var rateLimitedAnswers = 0
        /// Unicast answers refused by the unicast budget.
        public var unicastAnswersRefused = 0
        /// Answers suppressed by known answers or duplicate answers.
        public var suppressedAnswers = 0
        /// Conflicts that caused a rename.
        public var conflicts = 0
    }
}
