import Foundation
import TestIsolation

/// Runs a short command in the test process's own namespace, for inspection only (`ip -o link`, `--help`):
/// nothing that sends packets may run here, everything else goes through `NetLab.spawn`.
enum Subprocess {
    /// Runs `executable` to completion and returns its status and output; `environment` adds to (or replaces
    /// entries of) the test process's environment.
    static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        // Both pipes are drained before waiting; outputs here are small, so reading one first cannot deadlock.
        let (stdout, stderr) = try process.runToExit {
            (out.fileHandleForReading.readDataToEndOfFile(), err.fileHandleForReading.readDataToEndOfFile())
        }
        return (
            process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self)
        )
    }
}
