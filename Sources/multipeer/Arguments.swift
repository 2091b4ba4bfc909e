import ArgumentParser
internal import Foundation
import Logging
import Multipeer
import MultipeerIO

// What each subcommand takes, declared for swift-argument-parser: it parses, writes `--help`, usage errors (exit
// status 64) and completion scripts. Values stay as written here; each command checks them where it is made
// (`init(_:)`), with the messages the tool always gave, and a check that fails is a usage error too.

/// A usage error: printed with the command's usage, exit status 64 (EX_USAGE).
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `--interface IFNAME`..., `--loopback`, `--ipv4-only`, `--ipv6-only`: where discovery runs.
struct DiscoveryArguments: ParsableArguments {
    @Option(
        name: .customLong("interface"),
        help: ArgumentHelp(
            "Discover on this interface (repeat for more); every interface by default.", valueName: "IFNAME"))
    var interfaces: [String] = []
    @Flag(help: "Loopback only: nothing leaves this machine.")
    var loopback = false
    @Flag(name: .customLong("ipv4-only"), help: "IPv4 only.")
    var ipv4Only = false
    @Flag(name: .customLong("ipv6-only"), help: "IPv6 only.")
    var ipv6Only = false
}

/// `--name`, `--identity`, `--encryption`, `--secret-file`, `--silence-timeout`, `--connect-timeout`: who this peer
/// is and how it connects.
struct ConnectionArguments: ParsableArguments {
    @Option(help: ArgumentHelp("The name others see (the identity's, or this host's, by default).", valueName: "NAME"))
    var name: String?
    @Option(
        help: ArgumentHelp(
            "The identity file (made at mode 0600 when missing; default $XDG_DATA_HOME/swift-multipeer/identity).",
            valueName: "FILE"))
    var identity: String?
    @Option(help: ArgumentHelp("required (the default), optional or none.", valueName: "required|optional|none"))
    var encryption: String?
    @Option(
        name: .customLong("secret-file"),
        help: ArgumentHelp("A group secret every member must prove (at least 32 bytes).", valueName: "FILE"))
    var secretFile: String?
    @Option(
        name: .customLong("silence-timeout"),
        help: ArgumentHelp("How long a silent peer counts as there (default 6, at least 0.3).", valueName: "SECONDS"))
    var silenceTimeout: String?
    @Option(
        name: .customLong("connect-timeout"),
        help: ArgumentHelp(
            "How long setting up a connection may take, every address tried (default 15, at least 1); each handshake "
                + "gets two thirds of it.",
            valueName: "SECONDS"))
    var connectTimeout: String?
}

/// `--domain`, `--dns-server`, `--dns-key`: discovery beyond the link, through a DNS server (wide-area DNS-SD).
struct WideAreaArguments: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Also register in and browse this DNS-SD domain through a DNS server (wide-area DNS-SD).",
            valueName: "DOMAIN"))
    var domain: String?
    @Option(
        name: .customLong("dns-server"),
        help: ArgumentHelp(
            "The DNS server of --domain (default: /etc/resolv.conf's; no --domain: its domain enumerated).",
            valueName: "ADDRESS[:PORT]"))
    var dnsServer: String?
    @Option(
        name: .customLong("dns-key"),
        help: ArgumentHelp(
            "The key that signs updates, one line hmac-sha256:KEYNAME:BASE64SECRET, mode 0600 (without it: browse only).",
            valueName: "FILE"))
    var dnsKey: String?

    /// The wide-area configuration these options ask for, nil when none is given.
    func configuration() throws(UsageError) -> WideAreaConfiguration? {
        guard domain != nil || dnsServer != nil || dnsKey != nil else { return nil }
        do {
            return try WideAreaConfiguration(domain: domain, server: dnsServer, keyFile: dnsKey)
        } catch {
            throw UsageError(error.reason)
        }
    }
}

/// `--relay`, `--relay-user`, `--relay-password-file`: a TURN relay for peers that cannot reach each other.
struct RelayArguments: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "A TURN relay (coturn, say) for peers not reachable directly; tried after direct addresses.",
            valueName: "HOST:PORT"))
    var relay: String?
    @Option(name: .customLong("relay-user"), help: ArgumentHelp("The relay's user name.", valueName: "NAME"))
    var relayUser: String?
    @Option(
        name: .customLong("relay-password-file"),
        help: ArgumentHelp("A file holding the relay password (first line), mode 0600.", valueName: "FILE"))
    var relayPasswordFile: String?

    /// The relay these options ask for, nil when none is given.
    func configuration() throws(UsageError) -> RelayConfiguration? {
        guard let relay else {
            if relayUser != nil || relayPasswordFile != nil {
                throw UsageError("--relay-user and --relay-password-file go with --relay HOST:PORT")
            }
            return nil
        }
        do {
            return try RelayConfiguration(relay: relay, username: relayUser, passwordFile: relayPasswordFile)
        } catch {
            throw UsageError(error.reason)
        }
    }
}

/// `--log-level LEVEL`: the library's log on standard error.
struct LogArguments: ParsableArguments {
    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp(
            "Write what the library does to stderr: off (the default, or MULTIPEER_LOG), error, warning, info, debug, trace.",
            valueName: "LEVEL"))
    var level: String?

    /// Bootstraps swift-log's `LoggingSystem` with ``LineLogHandler`` lines on stderr at the level asked for (or
    /// the environment's `MULTIPEER_LOG`; nothing for `off`) and gives the library a logger of it.
    func apply() throws(UsageError) {
        var chosen = MultipeerLogging.environmentLevel
        if let level {
            guard let parsed = LogLevel(name: level) else {
                throw UsageError("--log-level wants off, error, warning, info, debug or trace, not '\(level)'")
            }
            chosen = parsed
        }
        let logLevel = chosen.loggerLevel
        LoggingSystem.bootstrap { label in
            guard let logLevel else { return SwiftLogNoOpLogHandler() }
            var handler = LineLogHandler(label: label)
            handler.logLevel = logLevel
            return handler
        }
        ToolLog.logger = Logger(label: MultipeerLogging.label)
    }
}

/// Runs a command made from parsed arguments: a `UsageError` (while making it or running it) is a usage error, told
/// as swift-argument-parser tells its own (the message, the command's usage, exit status 64); another error is
/// printed as `multipeer: ...` with status 1; the command's own status is the exit status.
func runCommand(_ command: any ParsableCommand.Type, _ body: () async throws -> Int32) async throws {
    let status: Int32
    do {
        status = try await body()
    } catch let error as UsageError {
        let name = command.configuration.commandName ?? command._commandName
        Output.error("Error: \(error.description)")
        Output.error("Usage: \(MultipeerTool.usageString(for: command))")
        Output.error("  See 'multipeer \(name) --help' for more information.")
        throw ExitCode.validationFailure
    } catch {
        Output.error("multipeer: \(error)")
        throw ExitCode(1)
    }
    if status != 0 { throw ExitCode(status) }
}

/// A command that takes `--log-level`: the level is applied, then the command made and run (``runCommand(_:_:)``).
protocol LoggingCommand: AsyncParsableCommand {
    var log: LogArguments { get }
    /// Makes the command from the parsed arguments and runs it; returns its exit status.
    func start() async throws -> Int32
}

extension LoggingCommand {
    func run() async throws {
        try await runCommand(Self.self) {
            try log.apply()
            return try await start()
        }
    }
}

extension MultipeerTool {
    /// `multipeer demo`.
    struct Demo: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: DemoCommand.summary)
        @Option(
            help: ArgumentHelp(
                "The service type (a new one per run by default, so demos never meet).", valueName: "SERVICE"))
        var service: String?
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await DemoCommand(self).run() }
    }

    /// `multipeer advertise`.
    struct Advertise: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: AdvertiseCommand.summary)
        @Argument(help: "The service type, such as chat (for _chat._tcp).")
        var service: String
        @Option(help: ArgumentHelp("The instance name (required).", valueName: "NAME"))
        var name: String?
        @Option(help: ArgumentHelp("A TXT entry (repeat for more).", valueName: "KEY=VALUE"))
        var info: [String] = []
        @Option(
            name: .customLong("info-file"),
            help: ArgumentHelp("KEY=VALUE lines, read again on SIGHUP.", valueName: "PATH"))
        var infoFile: String?
        @Option(help: ArgumentHelp("The port advertised (default 49400).", valueName: "PORT"))
        var port: String?
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await AdvertiseCommand(self).run() }
    }

    /// `multipeer browse`.
    struct Browse: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: BrowseCommand.summary)
        @Argument(help: "The service type, such as chat (for _chat._tcp).")
        var service: String
        @Flag(help: "One JSON object per event.")
        var json = false
        @Flag(help: "One line per event, even on a terminal.")
        var line = false
        @Option(help: ArgumentHelp("Stop after this long (default: at SIGINT or SIGTERM).", valueName: "SECONDS"))
        var timeout: String?
        @Option(
            name: .customLong("lost-timeout"),
            help: ArgumentHelp("Report a peer lost after it is silent this long (default 10).", valueName: "SECONDS"))
        var lostTimeout: String?
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await BrowseCommand(self).run() }
    }

    /// `multipeer listen`.
    struct Listen: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: ListenCommand.summary)
        @Option(help: ArgumentHelp("The address to listen on (default ::).", valueName: "IP"))
        var address: String?
        @Option(help: ArgumentHelp("The port (default 0: the system chooses).", valueName: "PORT"))
        var port: String?
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await ListenCommand(self).run() }
    }

    /// `multipeer connect`.
    struct Connect: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: ConnectCommand.summary)
        @Argument(help: ArgumentHelp("The listener's address.", valueName: "HOST:PORT"))
        var address: String
        @Option(help: ArgumentHelp("The fingerprint the peer must prove.", valueName: "FINGERPRINT"))
        var expect: String?
        @Option(help: ArgumentHelp("A message to send (repeat for more).", valueName: "TEXT"))
        var send: [String] = []
        @Option(name: .customLong("repeat"), help: ArgumentHelp("Send the messages this many times.", valueName: "N"))
        var repetitions: String?
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await ConnectCommand(self).run() }
    }

    /// `multipeer chat`.
    struct Chat: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: ChatCommand.summary)
        @Argument(help: "The service type, such as chat (for _chat._tcp).")
        var service: String
        @Option(help: ArgumentHelp("Invite this peer when found (repeat for more).", valueName: "NAME"))
        var invite: [String] = []
        @Option(help: ArgumentHelp("Answer invitations: all, none or ask (the default).", valueName: "all|none|ask"))
        var accept: String?
        @Option(help: ArgumentHelp("The message sent with invitations.", valueName: "TEXT"))
        var context: String?
        @Option(help: ArgumentHelp("How long an invitation waits for an answer (default 30).", valueName: "SECONDS"))
        var timeout: String?
        @Option(
            name: .customLong("max-peers"),
            help: ArgumentHelp("The most members of the session (default 64, at least 2).", valueName: "N"))
        var maxPeers: String?
        @Option(help: ArgumentHelp("Where received files go (default: a private folder).", valueName: "DIR"))
        var dir: String?
        @Flag(help: "One line per event, even on a terminal.")
        var line = false
        @Flag(help: "One JSON object per event.")
        var json = false
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var relay: RelayArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await ChatCommand(self).run() }
    }

    /// `multipeer colors`.
    struct Colors: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: ColorsCommand.summary)
        @Argument(help: "The service type, such as colors (for _colors._tcp).")
        var service: String
        @Flag(help: "One line per event, even on a terminal.")
        var line = false
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var relay: RelayArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await ColorsCommand(self).run() }
    }

    /// `multipeer send`.
    struct Send: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: FilesCommand.sendSummary)
        @Argument(help: ArgumentHelp("The file, or an http(s) URL to fetch and send.", valueName: "FILE"))
        var file: String
        @Option(help: ArgumentHelp("The receiver's name (required).", valueName: "NAME"))
        var to: String?
        @Option(help: ArgumentHelp("The service type (default mp-files).", valueName: "SERVICE"))
        var service: String?
        @Option(help: ArgumentHelp("How long to look for the receiver (default 30).", valueName: "SECONDS"))
        var timeout: String?
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var relay: RelayArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await SendCommand(self).run() }
    }

    /// `multipeer receive`.
    struct Receive: LoggingCommand {
        static let configuration = CommandConfiguration(abstract: FilesCommand.receiveSummary)
        @Option(help: ArgumentHelp("Where files go (default: the current folder).", valueName: "DIR"))
        var dir: String?
        @Flag(help: "Accept every sender without asking.")
        var yes = false
        @Flag(name: .customLong("keep-going"), help: "Keep receiving after the first file.")
        var keepGoing = false
        @Option(help: ArgumentHelp("The service type (default mp-files).", valueName: "SERVICE"))
        var service: String?
        @OptionGroup var connection: ConnectionArguments
        @OptionGroup var discovery: DiscoveryArguments
        @OptionGroup var wideArea: WideAreaArguments
        @OptionGroup var relay: RelayArguments
        @OptionGroup var log: LogArguments

        func start() async throws -> Int32 { try await ReceiveCommand(self).run() }
    }

    /// `multipeer identity`.
    struct Identity: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: IdentityCommand.summary)
        @Argument(help: ArgumentHelp("show (the default), create or export.", valueName: "ACTION"))
        var action: String?
        @Argument(help: ArgumentHelp("The file export writes.", valueName: "FILE"))
        var file: String?
        @Option(help: ArgumentHelp("The name of an identity made by create.", valueName: "NAME"))
        var name: String?
        @Flag(help: "Let create replace an existing identity.")
        var force = false
        @Option(
            help: ArgumentHelp(
                "The identity file (default $XDG_DATA_HOME/swift-multipeer/identity).", valueName: "FILE"))
        var identity: String?

        func run() async throws {
            try await runCommand(Self.self) { try IdentityCommand(self).run() }
        }
    }
}
