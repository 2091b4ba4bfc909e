import Testing

@testable import Multipeer

@Suite("Flow control windows")
struct FlowControlWindowTests {
    @Test("a sender is blocked at zero credit and unblocked by grants")
    func blockedUntilGranted() throws {
        var window = SendWindow(channel: 1, credit: 100)
        #expect(window.reserve(upTo: 60) == 60)
        #expect(window.reserve(upTo: 60) == 40)
        #expect(window.isBlocked)
        #expect(window.reserve(upTo: 1) == 0)
        try window.grant(10)
        #expect(!window.isBlocked)
        #expect(window.reserve(upTo: 60) == 10)
        #expect(window.reserve(upTo: 0) == 0)
    }

    @Test("a grant that would raise credit above 2^31-1 is an error and changes nothing")
    func sendOverflow() throws {
        var window = SendWindow(channel: 7, credit: SendWindow.maximumCredit - 10)
        try window.grant(10)
        #expect(window.credit == Int(SendWindow.maximumCredit))
        #expect(throws: FlowControlError.windowOverflow(channel: 7, credit: 0x7FFF_FFFF, increment: 1)) {
            try window.grant(1)
        }
        #expect(window.credit == Int(SendWindow.maximumCredit))
        var empty = SendWindow(channel: 0, credit: 0)
        #expect(throws: FlowControlError.windowOverflow(channel: 0, credit: 0, increment: .max)) {
            try empty.grant(.max)
        }
    }

    @Test("receiving beyond the granted credit is a violation and accounts nothing")
    func violation() throws {
        var window = ReceiveWindow(channel: 3, window: 1000, advertised: 1000)
        try window.received(600)
        #expect(throws: FlowControlError.flowControlViolation(channel: 3, received: 401, credit: 400)) {
            try window.received(401)
        }
        #expect(window.buffered == 600)
        try window.received(400)
        #expect(throws: FlowControlError.flowControlViolation(channel: 3, received: 1, credit: 0)) {
            try window.received(1)
        }
    }

    @Test("credit is granted back once half the window is consumed")
    func grantThreshold() throws {
        var window = ReceiveWindow(channel: 1, window: 1000, advertised: 1000)
        try window.received(1000)
        #expect(window.consumed(300) == nil)
        #expect(window.consumed(199) == nil)
        #expect(window.consumed(1) == 500)
        #expect(window.credit == 500)
        #expect(window.consumed(500) == 500)
        #expect(window.credit == 1000)
        #expect(window.buffered == 0)
    }

    @Test("the part of the window not yet advertised is granted by takeGrant")
    func topUp() throws {
        var window = ReceiveWindow(channel: 0, window: 1000, advertised: 100)
        #expect(window.credit == 100)
        #expect(window.takeGrant() == 900)
        #expect(window.takeGrant() == nil)
        #expect(window.credit == 1000)
    }
}

@Suite("Flow controller")
struct FlowControllerTests {
    static let initial = Int(FlowController.Configuration.initialCredit)

    @Test("sending is limited by the channel's credit and by the connection's")
    func channelAndConnectionLimits() throws {
        let small = FlowController.Configuration(
            connectionWindow: FlowController.Configuration.initialCredit,
            channelWindow: FlowController.Configuration.initialCredit)
        var sender = FlowController(configuration: small)
        _ = try sender.openLocalChannel(1)
        _ = try sender.openLocalChannel(2)
        // Channel 1 is limited by its own credit...
        #expect(try sender.reserve(channel: 1, upTo: 1 << 30) == Self.initial)
        #expect(try sender.reserve(channel: 1, upTo: 1) == 0)
        // ...and channel 2, with all its channel credit left, by the connection's.
        #expect(try sender.reserve(channel: 2, upTo: 10) == 0)
        try sender.receivedWindowUpdate(channel: 0, increment: 100)
        #expect(try sender.reserve(channel: 2, upTo: 1000) == 100)
        // A channel grant alone does not unblock channel 1 while the connection is exhausted.
        try sender.receivedWindowUpdate(channel: 1, increment: 50)
        #expect(try sender.reserve(channel: 1, upTo: 1000) == 0)
        try sender.receivedWindowUpdate(channel: 0, increment: 1000)
        #expect(try sender.reserve(channel: 1, upTo: 1000) == 50)
        #expect(sender.connectionSend.credit == 950)
    }

    @Test("the opener announces its window; the acceptor tops up from the initial credit")
    func channelOpening() throws {
        var opener = FlowController()
        var acceptor = FlowController()
        let window = try opener.openLocalChannel(5)
        #expect(window == 4 << 20)
        let updates = try acceptor.openRemoteChannel(5, initialWindow: window)
        #expect(updates == [.windowUpdate(channel: 5, increment: (4 << 20) - UInt32(Self.initial))])
        #expect(acceptor.sendWindow(5)?.credit == 4 << 20)
        #expect(opener.sendWindow(5)?.credit == Self.initial)
        for case .windowUpdate(let channel, let increment) in updates {
            try opener.receivedWindowUpdate(channel: channel, increment: increment)
        }
        #expect(opener.sendWindow(5)?.credit == 4 << 20)
        #expect(
            acceptor.connectionEstablished() == [
                .windowUpdate(channel: 0, increment: (16 << 20) - UInt32(Self.initial))
            ])
        #expect(acceptor.connectionEstablished() == [])
    }

    @Test("channels: duplicates, channel 0, the channel limit and unknown channels are refused")
    func channelBookkeeping() throws {
        var controller = FlowController(configuration: .init(maximumChannels: 2))
        _ = try controller.openLocalChannel(1)
        #expect(throws: FlowControlError.channelRefused(channel: 1, reason: "already open")) {
            _ = try controller.openLocalChannel(1)
        }
        #expect(throws: FlowControlError.channelRefused(channel: 0, reason: "channel 0 is the connection")) {
            _ = try controller.openRemoteChannel(0, initialWindow: 10)
        }
        _ = try controller.openRemoteChannel(2, initialWindow: 10)
        #expect(throws: FlowControlError.channelRefused(channel: 3, reason: "2 channels already open")) {
            _ = try controller.openLocalChannel(3)
        }
        #expect(throws: FlowControlError.unknownChannel(9)) { _ = try controller.reserve(channel: 9, upTo: 1) }
        #expect(throws: FlowControlError.unknownChannel(9)) { try controller.received(channel: 9, count: 1) }
        // An update for a channel that is gone may have crossed a reset: ignored.
        try controller.receivedWindowUpdate(channel: 9, increment: 1)
        _ = controller.closeChannel(1)
        #expect(controller.channelCount == 1)
        _ = try controller.openLocalChannel(3)
    }

    @Test("a peer exceeding the channel or the connection credit is caught, naming which")
    func violations() throws {
        var receiver = FlowController(
            configuration: .init(connectionWindow: FlowController.Configuration.initialCredit))
        _ = try receiver.openLocalChannel(1)  // announces 4 MiB for the channel
        _ = try receiver.openRemoteChannel(2, initialWindow: 0)  // assumes the peer has 256 KiB on it
        try receiver.received(channel: 2, count: Self.initial - 10)
        #expect(throws: FlowControlError.flowControlViolation(channel: 0, received: 11, credit: 10)) {
            try receiver.received(channel: 1, count: 11)
        }
        // Nothing was accounted on channel 1 for the refused frame.
        #expect(receiver.receiveWindow(1)?.buffered == 0)
        #expect(receiver.connectionReceive.buffered == Self.initial - 10)

        var other = FlowController(configuration: .init(channelWindow: FlowController.Configuration.initialCredit))
        _ = try other.openRemoteChannel(4, initialWindow: 0)
        _ = other.connectionEstablished()
        #expect(
            throws: FlowControlError.flowControlViolation(channel: 4, received: Self.initial + 1, credit: Self.initial)
        ) {
            try other.received(channel: 4, count: Self.initial + 1)
        }
    }

    @Test("a peer's window update overflowing 2^31-1 is caught")
    func updateOverflow() throws {
        var sender = FlowController()
        _ = try sender.openLocalChannel(1)
        try sender.receivedWindowUpdate(channel: 1, increment: SendWindow.maximumCredit - UInt32(Self.initial))
        #expect(throws: FlowControlError.windowOverflow(channel: 1, credit: 0x7FFF_FFFF, increment: 1)) {
            try sender.receivedWindowUpdate(channel: 1, increment: 1)
        }
        #expect(throws: FlowControlError.windowOverflow(channel: 0, credit: Self.initial, increment: 0x7FFF_FFFF)) {
            try sender.receivedWindowUpdate(channel: 0, increment: 0x7FFF_FFFF)
        }
    }

    @Test("closing a channel with unread bytes gives them back to the connection")
    func closeReturnsCredit() throws {
        var receiver = FlowController(configuration: .init(connectionWindow: 1 << 20))
        _ = receiver.connectionEstablished()
        _ = try receiver.openLocalChannel(1)
        try receiver.received(channel: 1, count: 600_000)
        #expect(receiver.closeChannel(1) == [.windowUpdate(channel: 0, increment: 600_000)])
        #expect(receiver.connectionReceive.credit == 1 << 20)
        // Data that was in flight for the closed channel still counts against the connection.
        #expect(try receiver.discard(500_000) == [])
        #expect(try receiver.discard(100_000) == [.windowUpdate(channel: 0, increment: 600_000)])
    }

    @Test("consuming returns channel and connection updates at their thresholds")
    func consumption() throws {
        var receiver = FlowController(configuration: .init(connectionWindow: 1 << 20, channelWindow: 512 << 10))
        _ = receiver.connectionEstablished()
        _ = try receiver.openLocalChannel(1)
        try receiver.received(channel: 1, count: 300_000)
        #expect(receiver.consumed(channel: 1, count: 262_143) == [])
        #expect(receiver.consumed(channel: 1, count: 1) == [.windowUpdate(channel: 1, increment: 262_144)])
        #expect(receiver.consumed(channel: 1, count: 35_856) == [])
        // The connection has 298,000 consumed bytes pending; the next 300,000 cross its half-window mark.
        try receiver.received(channel: 1, count: 300_000)
        #expect(
            receiver.consumed(channel: 1, count: 300_000)
                == [.windowUpdate(channel: 0, increment: 598_000), .windowUpdate(channel: 1, increment: 335_856)])
    }

    @Test("below the half-window mark, pending credit is granted at once when the peer could not start a message")
    func eagerGrantWhenThePeerIsShortOfOneMessage() throws {
        var receiver = FlowController()  // 16 MiB connection, 4 MiB streams, a message window for 4 MiB messages
        _ = receiver.connectionEstablished()
        for channel: UInt32 in [1, 3, 5] {
            _ = try receiver.openLocalChannel(channel)
            try receiver.received(channel: channel, count: 4 << 20)
        }
        // 12 MiB received; the application reads 3 MiB of one stream: pending 3 MiB, far below the 8 MiB mark,
        // but the peer is left 4 MiB, less than the largest message costs with its batch: it gets the 3 MiB now.
        let updates = receiver.consumed(channel: 1, count: 3 << 20)
        #expect(updates.contains(.windowUpdate(channel: 0, increment: 3 << 20)))
        // With the peer's credit comfortable, consumption waits for the mark as before.
        var relaxed = FlowController()
        _ = relaxed.connectionEstablished()
        _ = try relaxed.openLocalChannel(1)
        try relaxed.received(channel: 1, count: 4 << 20)
        #expect(!relaxed.consumed(channel: 1, count: 3 << 20).contains { $0.channel == 0 })
    }

    /// A fast writer and a slow reader exchanging frames through a wire with latency: the receiver never
    /// buffers more than its windows, and the sender never has more unacknowledged than the window.
    @Test("a slow reader bounds what is buffered by the window", arguments: [1, 7, 50])
    func slowReader(latency: Int) throws {
        let configuration = FlowController.Configuration(connectionWindow: 1 << 20, channelWindow: 300_000)
        var sender = FlowController(configuration: configuration)
        var receiver = FlowController(configuration: configuration)
        let encoder = FrameEncoder()
        var toReceiver: [(due: Int, frame: Frame)] = []
        var toSender: [(due: Int, frame: Frame)] = []
        func send(_ frames: [Frame], _ queue: inout [(due: Int, frame: Frame)], now: Int) {
            queue += frames.map { (now + latency, $0) }
        }

        send(receiver.connectionEstablished(), &toSender, now: 0)
        send(sender.connectionEstablished(), &toReceiver, now: 0)
        var remaining: [UInt32: Int] = [:]
        for channel: UInt32 in [1, 3] {
            let window = try sender.openLocalChannel(channel)
            send([.channelOpen(channel: channel, kind: .stream, name: "", initialWindow: window)], &toReceiver, now: 0)
            remaining[channel] = 5_000_000
        }
        var delivered: [UInt32: Int] = [1: 0, 3: 0]
        var maxInFlight = 0
        var now = 0
        while delivered.values.reduce(0, +) < 10_000_000 {
            now += 1
            precondition(now < 1_000_000, "no progress")
            // The writer always has data: it sends whatever credit allows, in 64 KiB frames.
            for channel: UInt32 in [1, 3] where remaining[channel]! > 0 {
                while true {
                    let count = try sender.reserve(channel: channel, upTo: min(65_536, remaining[channel]!))
                    guard count > 0 else { break }
                    remaining[channel]! -= count
                    send(
                        [.channelData(channel: channel, bytes: [UInt8](repeating: 0, count: count))], &toReceiver,
                        now: now)
                }
            }
            let inFlight = toReceiver.reduce(0) { total, item in
                if case .channelData(_, let bytes) = item.frame { return total + bytes.count }
                return total
            }
            maxInFlight = max(maxInFlight, inFlight)
            #expect(inFlight + receiver.connectionReceive.buffered <= Int(configuration.connectionWindow))

            // The wire delivers what is due; every frame passes through the codec.
            while let first = toReceiver.first, first.due <= now {
                toReceiver.removeFirst()
                var decoder = FrameDecoder()
                decoder.append(try encoder.encode(first.frame))
                switch try decoder.next() {
                case .channelOpen(let channel, _, _, let window)?:
                    send(try receiver.openRemoteChannel(channel, initialWindow: window), &toSender, now: now)
                case .channelData(let channel, let bytes)?:
                    try receiver.received(channel: channel, count: bytes.count)
                case .windowUpdate(let channel, let increment)?:
                    try receiver.receivedWindowUpdate(channel: channel, increment: increment)
                default:
                    Issue.record("unexpected frame")
                }
            }
            while let first = toSender.first, first.due <= now {
                toSender.removeFirst()
                guard case .windowUpdate(let channel, let increment) = first.frame else { continue }
                try sender.receivedWindowUpdate(channel: channel, increment: increment)
            }
            for channel: UInt32 in [1, 3] {
                // The channel exists at the receiver once its channelOpen has crossed the wire.
                guard let buffered = receiver.receiveWindow(channel)?.buffered else { continue }
                #expect(buffered <= Int(configuration.channelWindow))
                // The slow reader takes 3000 bytes per tick from each channel.
                let count = min(3000, buffered)
                delivered[channel]! += count
                send(receiver.consumed(channel: channel, count: count), &toSender, now: now)
            }
            #expect(receiver.connectionReceive.buffered <= Int(configuration.connectionWindow))
        }
        #expect(delivered == [1: 5_000_000, 3: 5_000_000])
        // What was on the wire never exceeded the two channels' windows.
        #expect(maxInFlight <= 2 * Int(configuration.channelWindow))
    }
}
