import Testing

@testable import Multipeer

@Suite("Connection configuration rules")
struct ConnectionConfigurationTests {
    @Test(arguments: [Int.max, Int.max - 100, Int(UInt32.max) + 1, -1])
    func aMessageLimitOutOfRangeIsAnErrorNamingTheRuleNotACrash(limit: Int) {
        // Found by review: the window check ran before the range check, and computing the message window of a
        // limit near Int.max (an application's way of saying "no limit") overflowed and trapped.
        var configuration = TestPeers.configuration(TestPeers.ada)
        configuration.maximumMessageLength = limit
        let error = #expect(throws: ConnectionError.self) { try configuration.validate() }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.reason.contains("maximumMessageLength") == true)
    }

    @Test func theLargestMessageTheWindowAllowsIsValidAndOneByteMoreIsNot() throws {
        var configuration = TestPeers.configuration(TestPeers.ada)
        configuration.connectionWindow = 1 << 20
        configuration.maximumMessageLength = FlowController.maximumMessageLength(messageWindow: 1 << 20)
        try configuration.validate()
        configuration.maximumMessageLength += 1
        #expect(throws: ConnectionError.self) { try configuration.validate() }
    }
}
