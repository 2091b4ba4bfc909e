import Glibc
import MultipeerIO
import Testing

@Suite struct SystemCallErrorTests {
    @Test func descriptionNamesCallTextAndNumber() {
        let error = SystemCallError(call: "bind", errno: EADDRINUSE)
        #expect(error.description == "bind: Address already in use (errno \(EADDRINUSE))")
    }

    @Test func bindingATakenPortThrowsEADDRINUSE() async throws {
        try await withLoop { loop in
            let error = try await loop.submit { () -> SystemCallError? in
                let first = try TCPListener(loop: loop, address: SocketAddress(.v4(.loopback), port: 0))
                defer { first.close() }
                do {
                    let second = try TCPListener(loop: loop, address: try first.localAddress())
                    second.close()
                    return nil
                } catch let error as SystemCallError {
                    return error
                }
            }
            let thrown = try #require(error)
            #expect(thrown.call == "bind")
            #expect(thrown.errno == EADDRINUSE)
        }
    }
}
