import Foundation
import MultipeerIO

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Starts processes with `posix_spawn`, stdout and stderr on pipes, stdin from /dev/null (or given bytes).
///
/// `posix_spawn` rather than Foundation's `Process`: it gives the child a process group of its own (so a
/// wrapper's children can be signalled together), resets signal dispositions the test process changed (the
/// lab ignores SIGINT/SIGTERM to clean up first, and ignored signals survive `exec`), and leaves reaping to us.
public enum ProcessLauncher {
    /// Signals whose disposition is reset to the default in every child.
    private static let resetSignals: [Int32] = [SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2]

    /// Starts a process (in this namespace: only for what sends nothing outside the machine, or runs inside a lab
    /// through `ip netns exec`).
    public static func launch(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil, stdin: [UInt8]? = nil,
        interactive: Bool = false
    ) throws -> LabProcess {
        // Pipes are made close-on-exec in two steps (pipe2 is not imported); spawning under one lock keeps a
        // concurrent spawn from inheriting another child's pipe end, which would delay that child's EOF.
        try spawnLock.withLock { _ in
            try spawnLocked(executable, arguments, environment: environment, stdin: stdin, interactive: interactive)
        }
    }

    private static let spawnLock = Lock(())

    private static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw NetLabError.spawnFailed("pipe", errno: errno) }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        return (fds[0], fds[1])
    }

    private static func spawnLocked(
        _ executable: String, _ arguments: [String], environment: [String: String]?, stdin: [UInt8]?,
        interactive: Bool
    ) throws -> LabProcess {
        let out = try makePipe()
        let err: (read: Int32, write: Int32)
        do { err = try makePipe() } catch {
            close(out.read)
            close(out.write)
            throw error
        }
        var input: (read: Int32, write: Int32)?
        if stdin != nil || interactive {
            do { input = try makePipe() } catch {
                [out.read, out.write, err.read, err.write].forEach { close($0) }
                throw error
            }
        }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let input {
            posix_spawn_file_actions_adddup2(&actions, input.read, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, out.write, 1)
        posix_spawn_file_actions_adddup2(&actions, err.write, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in resetSignals { sigaddset(&defaults, signal) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = [executable] + arguments
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let result = withCStrings(argv) { cArgv in
            withCStrings(env) { cEnv in
                posix_spawnp(&pid, executable, &actions, &attributes, cArgv, cEnv)
            }
        }
        close(out.write)
        close(err.write)
        if let input { close(input.read) }
        guard result == 0 else {
            close(out.read)
            close(err.read)
            if let input { close(input.write) }
            throw NetLabError.spawnFailed(executable, errno: result)
        }
        if let stdin, let fd = input?.write {
            // Small inputs (setup scripts) fit the pipe buffer; a writer thread would only matter for large ones.
            Thread.detachNewThread {
                var offset = 0
                while offset < stdin.count {
                    let written = stdin[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                    if written < 0 && errno == EINTR { continue }
                    if written <= 0 { break }
                    offset += written
                }
                close(fd)
            }
        }
        return LabProcess(
            pid: pid, commandLine: argv.joined(separator: " "), stdout: out.read, stderr: err.read,
            stdin: interactive ? input?.write : nil)
    }

    /// Runs a command to completion and returns its status and output.
    /// - Throws: ``NetLabError`` if it cannot start or does not finish within `timeout` (it is killed then).
    public static func run(
        _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, timeout: Duration = .seconds(30)
    ) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try launch(executable, arguments, stdin: stdin)
        guard let status = process.waitForExit(timeout: timeout) else {
            process.forceKill()
            throw NetLabError.timedOut(process.commandLine, after: timeout)
        }
        // The status is set after stdout reached end of file, so every line is in; stderr has its own thread.
        process.waitForStandardErrorClosed(timeout: .seconds(1))
        return (status, process.lines.joined(separator: "\n"), process.standardError)
    }

    /// Runs a command and throws unless it exits with status 0.
    @discardableResult
    static func check(
        _ executable: String, _ arguments: [String], stdin: [UInt8]? = nil, timeout: Duration = .seconds(30)
    ) throws -> String {
        let result = try run(executable, arguments, stdin: stdin, timeout: timeout)
        guard result.status == 0 else {
            throw NetLabError.commandFailed(
                ([executable] + arguments).joined(separator: " "), status: result.status, stderr: result.stderr)
        }
        return result.stdout
    }

    private static func withCStrings<R>(
        _ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R
    ) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { pointers.forEach { free($0) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
