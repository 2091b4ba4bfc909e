import Foundation
import MulticastDNS
import Testing

/// Writes the fuzzing seed corpus (`Fuzz/corpus/dns/`) from the golden vectors when `MDNS_FUZZ_SEED_DIR` is
/// set; otherwise does nothing. `scripts/fuzz.sh` runs it when the corpus folder is empty.
@Suite struct FuzzSeedTests {
    @Test func writeSeeds() throws {
        guard let directory = ProcessInfo.processInfo.environment["MDNS_FUZZ_SEED_DIR"] else { return }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var seeds = GoldenVectors.all.map { ($0.name, $0.bytes) }
        seeds.append(("zeroconf-malformed-nsec", GoldenVectors.zeroconfMalformedNSEC))
        let encoder = DNSMessageEncoder()
        var generator = MessageGenerator(seed: 0xf022)
        for index in 0..<8 {
            seeds.append(("random-\(index)", try encoder.encode(generator.message())))
        }
        for (name, bytes) in seeds {
            let url = URL(fileURLWithPath: directory).appendingPathComponent("\(name).bin")
            try Data(bytes).write(to: url)
        }
    }
}
