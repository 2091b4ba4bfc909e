import MulticastDNS
import Multipeer
import MultipeerConnectivity
import PeerConnectivity

/// The property every input must keep: decoding never crashes, and a decoded message survives
/// encode → decode unchanged. Any other outcome traps so libFuzzer records the input.
enum FuzzOracle {
    static let decoder = DNSMessageDecoder()
    static let encoder = DNSMessageEncoder()

    /// Runs one input; returns `true` if it decoded as a message.
    @discardableResult
    static func check(_ bytes: [UInt8]) -> Bool {
        guard let first = try? decoder.decode(bytes) else { return false }
        for record in first.answers + first.authorities + first.additionals {
            if case .txt(let strings) = record.data { _ = TXTRecord(decoding: strings).dictionary }
        }
        let encoded: [UInt8]
        do {
            encoded = try encoder.encode(first)
        } catch .messageTooLarge {
            // Our compression can be weaker than the sender's (a pointer into header bytes or into raw
            // data of an unknown type), so a 9000-byte input may not fit again. Not a decoder bug.
            return true
        } catch {
            fatalError("decoded message does not encode: \(error)\n\(first)")
        }
        let second: DNSMessage
        do {
            second = try decoder.decode(encoded)
        } catch {
            fatalError("re-encoded message does not decode: \(error)\n\(first)\n\(encoded)")
        }
        guard second == first else {
            fatalError("round trip changed the message:\n\(first)\n\(second)")
        }
        return true
    }
}

/// A harness that only traps, as a check that counts every input as decoded.
func trapping(_ check: @escaping @Sendable ([UInt8]) -> Void) -> @Sendable ([UInt8]) -> Bool {
    { bytes in
        check(bytes)
        return true
    }
}

/// Every fuzz target but the mDNS decoder (the default), by the name `MULTIPEER_FUZZ_TARGET`, `--NAME` and
/// `--write-NAME-seeds` use: its check (whether the input decoded; harnesses that only trap count every input) and
/// its seed corpus.
let fuzzTargets: [String: (check: @Sendable ([UInt8]) -> Bool, seeds: @Sendable () -> [[UInt8]])] = [
    "wire": (WireFuzzOracle.check, WireFuzzOracle.seeds),
    "handshake": (trapping(HandshakeFuzzHarness.check), HandshakeFuzzHarness.seeds),
    "record": (trapping(RecordFuzzHarness.check), RecordFuzzHarness.seeds),
    "unicast": (trapping(WideAreaFuzzHarness.check), WideAreaFuzzHarness.seeds),
    "turn": (trapping(RelayFuzzHarness.check), RelayFuzzHarness.seeds),
    "session": (trapping(SessionFuzzHarness.check), SessionFuzzHarness.seeds),
    "offer": (trapping(OfferFuzzHarness.check), OfferFuzzHarness.seeds),
    "peerid": (trapping(PeerIDFuzzHarness.check), PeerIDFuzzHarness.seeds),
    "events": (trapping(EventFuzzHarness.check), EventFuzzHarness.seeds),
]

#if FUZZING
    import Glibc

    /// libFuzzer entry point.
    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
        let bytes = Array(UnsafeBufferPointer(start: data, count: size))
        _ = (fuzzTargets[fuzzTarget]?.check ?? FuzzOracle.check)(bytes)
        return 0
    }

    /// `MULTIPEER_FUZZ_TARGET=wire` fuzzes the wire-frame decoder, `handshake` the preamble and hello parsers
    /// with the connection state machine behind them, `record` the TLS record layer, `unicast` a DNS server's
    /// answers (unicast limits, transaction signatures, what a wide-area poll reads), `turn` a relay's STUN
    /// messages (the codec and the TURN client), `session` a member's session control messages and connection
    /// data, `offer` a member's resource offers and the names files are saved under, `peerid` archived `MCPeerID`s,
    /// `events` what a peer sends a PeerConnectivity manager (events, typed messages), anything else the mDNS
    /// decoder.
    let fuzzTarget = getenv("MULTIPEER_FUZZ_TARGET").map { String(cString: $0) } ?? "dns"

    /// libFuzzer's driver (compiler-rt, LLVM 11 and later).
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<CInt>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
    ) -> CInt

    /// SwiftPM links executables with `main` aliased to `<module>_main`, so libFuzzer's own `main` is never used;
    /// this stands in for it and hands control to the libFuzzer driver.
    @_cdecl("MDNSFuzz_main")
    func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        var count = argc
        var arguments = argv
        return runFuzzerDriver(&count, &arguments) { data, size in fuzz(data, size) }
    }
#else
    import Foundation

    /// Regression runner: replays files (or every file in directories) through the fuzz oracle.
    @main struct MDNSFuzzMain {
        static func main() {
            var files: [String] = []
            let manager = FileManager.default
            var arguments = Array(CommandLine.arguments.dropFirst())
            // `--wire`, `--handshake`, ... replay through that target's oracle (the mDNS decoder's without one);
            // `--write-wire-seeds DIR` and the like write a target's seed corpus.
            let target = fuzzTargets.first { arguments.contains("--\($0.key)") }?.value
            arguments.removeAll { fuzzTargets.keys.map { "--\($0)" }.contains($0) }
            var seedWriters: [String: (name: String, seeds: () -> [[UInt8]])] = [:]
            for (name, target) in fuzzTargets { seedWriters["--write-\(name)-seeds"] = (name, target.seeds) }
            if let option = arguments.first, let writer = seedWriters[option], arguments.count == 2 {
                try? manager.createDirectory(atPath: arguments[1], withIntermediateDirectories: true)
                let seeds = writer.seeds()
                for (index, seed) in seeds.enumerated() {
                    _ = manager.createFile(atPath: "\(arguments[1])/seed-\(index)", contents: Data(seed))
                }
                print("wrote \(seeds.count) \(writer.name) seeds to \(arguments[1])")
                return
            }
            for path in arguments {
                var isDirectory: ObjCBool = false
                guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else {
                    FileHandle.standardError.write(Data("no such file: \(path)\n".utf8))
                    exit(66)
                }
                if isDirectory.boolValue {
                    let names = (try? manager.contentsOfDirectory(atPath: path)) ?? []
                    files += names.sorted().map { (path as NSString).appendingPathComponent($0) }
                } else {
                    files.append(path)
                }
            }
            if files.isEmpty {
                print(
                    "usage: mdns-fuzz [--wire|--handshake|--record|--unicast|--turn|--session|--offer|--peerid|"
                        + "--events] FILE_OR_DIRECTORY... | mdns-fuzz --write-TARGET-seeds DIR (TARGET: wire, "
                        + "handshake, record, unicast, turn, session, offer, peerid or events)")
                exit(64)
            }
            var decoded = 0
            for file in files {
                guard let data = manager.contents(atPath: file) else { continue }
                if (target?.check ?? FuzzOracle.check)(Array(data)) { decoded += 1 }
            }
            print("replayed \(files.count) inputs: \(decoded) decoded, \(files.count - decoded) rejected, 0 crashes")
        }
    }
#endif
