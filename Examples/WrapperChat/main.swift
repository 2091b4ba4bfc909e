// A chat on the wrapper in Transceiver.swift, as an app using such a library is written: a file that imports only
// MultipeerConnectivity, Codable messages, the main run loop. Lines typed are sent to every connected peer.
//   WrapperChat NAME      prints `connected NAME`, `NAME: TEXT`, `gone NAME`
import MultipeerConnectivity

struct ChatLine: Codable {
    let text: String
}

final class App: TransceiverDelegate {
    let transceiver: Transceiver

    init(name: String) {
        transceiver = Transceiver(displayName: name)
        transceiver.delegate = self
    }

    func transceiver(_ transceiver: Transceiver, didConnect peer: MCPeerID) {
        say("connected \(peer.displayName)")
    }

    func transceiver(_ transceiver: Transceiver, didDisconnect peer: MCPeerID) {
        say("gone \(peer.displayName)")
    }

    func transceiver(_ transceiver: Transceiver, didReceive envelope: Envelope, from peer: MCPeerID) {
        guard envelope.type == "chat", let line = try? JSONDecoder().decode(ChatLine.self, from: envelope.payload)
        else { return }
        say("\(peer.displayName): \(line.text)")
    }

    func say(_ line: String) {
        DispatchQueue.main.async {
            print(line)
            fflush(stdout)
        }
    }
}

guard CommandLine.arguments.count == 2 else {
    FileHandle.standardError.write("usage: WrapperChat NAME\n".data(using: .utf8)!)
    exit(2)
}
let app = App(name: CommandLine.arguments[1])
app.transceiver.start()
Thread.detachNewThread {
    while let line = readLine() {
        DispatchQueue.main.async {
            do {
                try app.transceiver.broadcast(ChatLine(text: line), type: "chat")
            } catch {
                print("cannot send: \(error)")
            }
        }
    }
    DispatchQueue.main.async {
        app.transceiver.stop()
        exit(0)
    }
}
RunLoop.main.run()
