// swift-tools-version:6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "swift-multipeer",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "MultipeerIO", targets: ["MultipeerIO"]),
        .library(name: "MulticastDNS", targets: ["MulticastDNS"]),
        .library(name: "Multipeer", targets: ["Multipeer"]),
        .library(name: "MultipeerConnectivity", targets: ["MultipeerConnectivity"]),
        .library(name: "PeerConnectivity", targets: ["PeerConnectivity"]),
        .executable(name: "multipeer", targets: ["multipeer"]),
        .executable(name: "multipeer-bench", targets: ["MultipeerBenchmarks"]),
        .executable(name: "mdns-fuzz", targets: ["MDNSFuzz"]),
        .executable(name: "multipeer-chaos", targets: ["MultipeerChaos"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.14.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
    ],
    targets: [
        .target(
            name: "MultipeerIO",
            dependencies: [
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: strict),
        .target(
            name: "MulticastDNS",
            dependencies: ["MultipeerIO", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        // System OpenSSL 3 (Debian: libssl-dev) plus a header-only shim for what Swift cannot import.
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        .target(
            name: "Multipeer",
            dependencies: [
                "COpenSSL", "MultipeerIO", "MulticastDNS",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: strict),
        // Apple's MultipeerConnectivity API on the native one (a facade: no engine logic).
        .target(
            name: "MultipeerConnectivity",
            dependencies: [
                "Multipeer", "MulticastDNS", "MultipeerIO", "MultipeerConnectivitySubmodules",
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: strict),
        // A Clang module named MultipeerConnectivity with Apple's submodules (empty headers), so that
        // `import MultipeerConnectivity.MCPeerID` works as against Apple's framework.
        .systemLibrary(name: "MultipeerConnectivitySubmodules"),
        // The PeerConnectivity library's API on the MultipeerConnectivity facade (a facade: no engine logic).
        .target(
            name: "PeerConnectivity",
            dependencies: [
                "MultipeerConnectivity", "MulticastDNS", "MultipeerIO",
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: strict),
        // The classic tutorial apps with their UI replaced by lines, as apps written for Apple's platforms are
        // (Swift 5 language mode); the end-to-end tests run them across namespaces.
        .executableTarget(
            name: "ConnectedColors", dependencies: ["MultipeerConnectivity"], path: "Examples/ConnectedColors",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(
            name: "PeerLists", dependencies: ["MultipeerConnectivity"], path: "Examples/PeerLists",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(
            name: "DataSession", dependencies: ["MultipeerConnectivity"], path: "Examples/DataSession",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(
            name: "Chat", dependencies: ["MultipeerConnectivity"], path: "Examples/Chat",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        // Programs written the way public apps and wrapper libraries write theirs (files that import only
        // MultipeerConnectivity or a submodule, delegate forwarding, streams on run loops), built unchanged.
        .executableTarget(
            name: "WrapperChat", dependencies: ["MultipeerConnectivity"], path: "Examples/WrapperChat",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(
            name: "StreamShare", dependencies: ["MultipeerConnectivity"], path: "Examples/StreamShare",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        // The PeerConnectivity README's usage as a program.
        .executableTarget(
            name: "PeerConnectivityDemo", dependencies: ["PeerConnectivity"], path: "Examples/PeerConnectivityDemo",
            swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(
            name: "multipeer",
            dependencies: [
                "MulticastDNS", "MultipeerIO", "Multipeer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ], swiftSettings: strict),
        // Network-namespace test lab shared by the end-to-end tests and the benchmarks.
        .target(
            name: "NetLab", dependencies: ["MultipeerIO", .product(name: "DequeModule", package: "swift-collections")],
            swiftSettings: strict),
        .executableTarget(
            name: "MultipeerBenchmarks",
            dependencies: ["NetLab", "MulticastDNS", "MultipeerIO", "Multipeer", "MultipeerConnectivity"],
            swiftSettings: strict),
        // The chaos run and the soak (scripts/chaos.sh): a driver that harms peers in a lab, and the peers.
        .executableTarget(
            name: "MultipeerChaos",
            dependencies: [
                "NetLab", "MulticastDNS", "MultipeerIO", "Multipeer",
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: strict),
        // libFuzzer entry point for the decoders of what peers send (mDNS, wire frames, session messages, archived
        // peer IDs, events...); built with -sanitize=fuzzer by scripts/fuzz.sh.
        .executableTarget(
            name: "MDNSFuzz", dependencies: ["MulticastDNS", "Multipeer", "MultipeerConnectivity", "PeerConnectivity"],
            swiftSettings: strict + [.unsafeFlags(["-parse-as-library"])]),
        // Traits the test targets share: the lock that keeps tests counting process-wide resources apart from busy
        // ones, and a thread of its own for a test that computes or blocks for long.
        .target(name: "TestIsolation", path: "Tests/TestIsolation", swiftSettings: strict),
        .testTarget(
            name: "MultipeerIOTests", dependencies: ["MultipeerIO", "TestIsolation", "NetLab"], swiftSettings: strict),
        .testTarget(
            name: "MulticastDNSTests", dependencies: ["MulticastDNS", "MultipeerIO", "TestIsolation", "NetLab"],
            swiftSettings: strict),
        .testTarget(
            name: "MultipeerTests",
            dependencies: [
                "Multipeer", "MultipeerIO", "COpenSSL", "MultipeerConnectivity", "PeerConnectivity", "TestIsolation",
                "NetLab",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "NetLab", "multipeer", "MulticastDNS", "ConnectedColors", "PeerLists", "DataSession", "Chat",
                "PeerConnectivityDemo", "WrapperChat", "StreamShare", "TestIsolation", "MultipeerChaos",
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: strict),
    ]
)
