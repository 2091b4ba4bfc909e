import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// multipeer-chaos: `run` (the driver: N peers in a lab, faults, invariants; see ChaosDriver) or `peer` (one peer,
// started by the driver in a lab namespace; see ChaosPeer). docs/TESTING.md says how to read a run.

let usage = """
    usage: multipeer-chaos run [--peers N] [--minutes M] [--seed S] [--soak] [--samples FILE.csv] [--sample-every SECONDS]
                               [--log FILE]
           multipeer-chaos peer --name NAME --interface IF --incarnation K --directory DIR [--resources DIR]
    """

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("multipeer-chaos: \(text)\n\(usage)\n".utf8))
    exit(2)
}

/// `--name value` pairs after the command.
func options(_ arguments: ArraySlice<String>, flags: Set<String>) -> [String: String] {
    var result: [String: String] = [:]
    var rest = arguments
    while let key = rest.popFirst() {
        guard key.hasPrefix("--") else { fail("unexpected \(key)") }
        if flags.contains(key) {
            result[key] = ""
            continue
        }
        guard let value = rest.popFirst() else { fail("\(key) needs a value") }
        result[key] = value
    }
    return result
}

let arguments = CommandLine.arguments
switch arguments.dropFirst().first {
case "peer":
    let given = options(arguments.dropFirst(2), flags: [])
    var peerOptions = ChaosPeer.Options()
    peerOptions.name = given["--name"] ?? peerOptions.name
    peerOptions.interface = given["--interface"] ?? peerOptions.interface
    peerOptions.incarnation = given["--incarnation"].flatMap(Int.init) ?? 1
    peerOptions.directory = given["--directory"] ?? peerOptions.directory
    peerOptions.resources = given["--resources"]
    do {
        let peer = try await ChaosPeer(peerOptions)
        await peer.run()
    } catch {
        FileHandle.standardError.write(Data("multipeer-chaos peer: \(error)\n".utf8))
        exit(1)
    }
    exit(0)
case "run":
    let given = options(arguments.dropFirst(2), flags: ["--soak"])
    var driverOptions = ChaosDriver.Options()
    driverOptions.soak = given["--soak"] != nil
    if driverOptions.soak {
        driverOptions.peers = 8
        driverOptions.minutes = 60
        driverOptions.sampleInterval = 60
    }
    if let peers = given["--peers"] {
        guard let count = Int(peers), (2...64).contains(count) else { fail("--peers takes 2 to 64") }
        driverOptions.peers = count
    }
    if let minutes = given["--minutes"] {
        guard let value = Double(minutes), value >= 1 else { fail("--minutes takes 1 or more") }
        driverOptions.minutes = value
    }
    if let seed = given["--seed"] {
        guard let value = UInt64(seed) else { fail("--seed takes a number") }
        driverOptions.seed = value
    }
    if let every = given["--sample-every"] {
        guard let value = Double(every), value > 0 else { fail("--sample-every takes seconds") }
        driverOptions.sampleInterval = value
    }
    driverOptions.samples = given["--samples"]
    driverOptions.log = given["--log"]
    guard getuid() == 0 else { fail("needs root (network namespaces, a tmpfs mount)") }
    do {
        let driver = try ChaosDriver(driverOptions)
        exit(try driver.run() ? 0 : 1)
    } catch {
        fail("\(error)")
    }
default:
    fail("which command?")
}
