import Foundation
import TestIsolation
import Testing

extension CompatibilitySuites {
    /// Apple's API, used the way apps use it (`Tests/Compatibility/AppleAPIUsage.swift`), type-checks against the
    /// built `MultipeerConnectivity` module in Swift 5 and Swift 6 language modes, with no warning. On threads of
    /// their own: each waits seconds for the compiler, and on the shared pool's two threads that stalled every
    /// other test in the process meanwhile.
    @Suite("MultipeerConnectivity source compatibility", .ownThread)
    struct MCSourceCompatibilityTests {
        static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        /// The build's products: where the running test executable is (`.build/<triple>/debug`, or the sanitizer
        /// builds' scratch paths), with the modules in `Modules`.
        static let products = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            .deletingLastPathComponent()

        /// Runs `swiftc -typecheck` on `file` against the modules of this build; returns the exit status and output.
        static func typecheck(_ file: URL, languageMode: String) throws -> (Int32, String) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                "swiftc", "-typecheck", "-swift-version", languageMode,
                "-I", products.appendingPathComponent("Modules").path,
                "-I", root.appendingPathComponent("Sources/COpenSSL").path,
                // What SwiftPM gives a target that depends on the module: the Clang module map of its submodules.
                "-I", root.appendingPathComponent("Sources/MultipeerConnectivitySubmodules").path, file.path,
            ]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            let text = try process.runToExit {
                String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            }
            return (process.terminationStatus, text)
        }

        @Test(arguments: ["5", "6"])
        func everyMemberWithApplesLabelsTypeChecks(languageMode: String) throws {
            let modules = Self.products.appendingPathComponent("Modules/MultipeerConnectivity.swiftmodule")
            try #require(FileManager.default.fileExists(atPath: modules.path), "build the package first")
            let (status, output) = try Self.typecheck(
                Self.root.appendingPathComponent("Tests/Compatibility/AppleAPIUsage.swift"), languageMode: languageMode)
            #expect(status == 0, "\(output)")
            #expect(!output.contains("warning:"), "\(output)")
        }

        /// A file that imports only MultipeerConnectivity (Apple's re-exports Foundation), or one of its
        /// submodules as a wrapper library does, compiles in both language modes.
        @Test(arguments: ["import MultipeerConnectivity", "import MultipeerConnectivity.MCPeerID"])
        func importingOnlyMultipeerConnectivityBringsFoundation(importLine: String) throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent(
                "mc-import-\(UUID().uuidString).swift")
            try """
            \(importLine)
            import MultipeerConnectivity.MCSession

            final class Manager: NSObject {
                let peer = MCPeerID(displayName: "x")
                let id = UUID()
                var timer: Timer?
                var started = Date()
                let progress = Progress(totalUnitCount: 1)
                func decode(_ data: Data) throws -> Any { try JSONSerialization.jsonObject(with: data) }
                func url() -> URL { URL(fileURLWithPath: NSTemporaryDirectory()) }
                func stream(_ stream: InputStream) { stream.open() }
            }
            """.write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            for languageMode in ["5", "6"] {
                let (status, output) = try Self.typecheck(file, languageMode: languageMode)
                #expect(status == 0, "\(output)")
            }
        }

        /// The check can fail: a label Apple's API does not have is refused.
        @Test func aWrongLabelIsRefused() throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent(
                "mc-wrong-\(UUID().uuidString).swift")
            try """
            import MultipeerConnectivity
            let peer = MCPeerID(name: "x")
            """.write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let (status, output) = try Self.typecheck(file, languageMode: "6")
            #expect(status != 0)
            #expect(output.contains("displayName"), "\(output)")
        }
    }
}
