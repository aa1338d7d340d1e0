import ArgumentParser
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import TokendClient
import TokendConfig
import TokendOAuth
import TokendServer
import TokendSystemd

#if canImport(Glibc)
    import Glibc
#endif

/// The entry point: prepares the process before the first Swift task exists, then runs
/// ``Tokend``.
@main
enum TokendMain {
    /// How Swift-concurrency tasks run (see ``ConcurrencyExecutor``), decided before any task
    /// exists. An `async` main would already be a task, created on the main thread with priority
    /// user-initiated; its first job would go to the runtime's own pool, whose dispatch thread
    /// asks for nice -2, which the service may not set (a "Failed to set thread priority" line in
    /// the journal at every start).
    static let executor = ConcurrencyExecutor.useEventLoops()

    static func main() {
        // First, before any thread of the daemon's: with TZ unset, glibc's strftime (used by the
        // timestamps of plain log lines) stats /etc/localtime for every line; with it set to that
        // file it reads the zone once. A change of the system's zone then shows in those
        // timestamps after a restart. (The journal stamps entries itself.)
        setenv("TZ", ":/etc/localtime", 0)
        // The dispatch runtime (GRDB's queues, service-lifecycle's signal sources) sets each
        // worker thread's nice value from its queue's priority and logs to syslog when it may
        // not: under tokend.service's SystemCallFilter=~@resources setpriority(2) is refused,
        // and its event thread asks for nice -4, which needs CAP_SYS_NICE. That is a line in
        // tokend's journal per thread at each start, which operators read as errors. Its log is
        // off unless the environment asks for it; on Linux it logs nothing else but internal soft
        // assertions (its crashes are not logged at all). Read once, at its first log line.
        setenv("LIBDISPATCH_LOG", "NO", 0)
        _ = executor
        // The command runs on the event loops (detached: not on the main actor, this function's
        // isolation; nothing in tokend needs the main actor). It exits by itself with the status
        // of an error; after success the process ends here with 0. The main thread only waits:
        // not in dispatchMain(), whose sigsuspend blocks the signal glibc's setuid(2) sends every
        // thread, so --check-config's switch to the service user would wait for it forever.
        Task.detached {
            await Tokend.main()
            exit(0)
        }
        while true { pause() }
    }
}

/// `tokend`: keeps OAuth/JWT credentials fresh and serves them over a Varlink socket.
struct Tokend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokend",
        abstract: "Keeps OAuth/JWT credentials fresh for the programs on this host.",
        discussion: """
            Runs in the foreground (as a systemd service). Reads its configuration from --config, else \
            \(DaemonConfiguration.defaultConfigurationFile) when it exists, else uses the built-in defaults.

            --check-config reads the configuration and every file it names (secrets, keys) and exits. Run by \
            root on the installed configuration (no --config), it reads them as the user \(ServiceUser.name), \
            as tokend.service does, when that user exists; --as-user names another user (root: as root).

            --reload asks the running tokend (over its socket: --socket, else the configuration's \
            daemon.socket, else \(DaemonConfiguration.defaultSocketPath); for root the administrators' socket \
            first) to read its configuration again, \
            waits, and prints its verdict. tokend.service's ExecReload= runs it, so `systemctl reload tokend` \
            fails when tokend refuses the file (status 78), and tokend keeps the configuration it had. \
            Administrators only.

            Exit status:
               0  success: stopped on SIGTERM or SIGINT, configuration valid, or reloaded
               1  failed while running (see the journal), or --reload could not ask tokend
              64  usage error: an unknown option or argument
              78  invalid configuration: one line names the file, the key and the problem
            """,
        version: TokendDaemon.version
    )

    @Option(name: .long, help: "The configuration file (TOML).")
    var config: String?

    @Flag(name: .long, help: "Check the configuration and exit.")
    var checkConfig = false

    @Option(
        name: .customLong("as-user"),
        help: ArgumentHelp("With --check-config, run by root: read the files as this user.", valueName: "user"))
    var asUser: String?

    @Flag(name: .long, help: "Have the running tokend read its configuration again; print its verdict.")
    var reload = false

    @Option(name: .long, help: ArgumentHelp("With --reload: the running tokend's socket.", valueName: "path"))
    var socket: String?

    func validate() throws {
        if checkConfig && reload { throw ValidationError("--check-config and --reload exclude each other.") }
        if asUser != nil && !checkConfig { throw ValidationError("--as-user goes with --check-config.") }
        if socket != nil && !reload { throw ValidationError("--socket goes with --reload.") }
        if let socket, socket.isEmpty { throw ValidationError("--socket must not be empty.") }
    }

    func run() async throws {
        let executor = TokendMain.executor
        // Before any secret is in memory: no core dumps, no same-uid ptrace (issue 8).
        let hardeningProblem = ProcessHardening.disableCoreDumps()
        if reload { return try await reloadRunningDaemon() }
        let readAs = checkConfig ? try ServiceUser.checkingAs(explicit: asUser, installedConfiguration: config == nil) : nil
        let configuration: DaemonConfiguration
        do {
            configuration = try loadConfiguration()
        } catch {
            // One line naming the file, the key and the problem; EX_CONFIG.
            StandardError.write("tokend: \(error)\n")
            if let readAs { StandardError.write("tokend: (files read as user \(readAs), as tokend.service reads them)\n") }
            throw ExitCode(78)
        }
        if checkConfig {
            let how = readAs.map { " (files read as user \($0), as tokend.service reads them)" } ?? ""
            print("configuration OK: \(configuration.sourceFile ?? "built-in defaults")\(how)")
            return
        }
        let environment = ProcessEnvironment.current
        // Structured entries in the journal when stderr is the journal; plain lines otherwise.
        let level = LogLevelControl(Logger.Level(rawValue: configuration.logLevel) ?? .info)
        let destination = SystemdLogging.destination(environment: environment)
        LoggingSystem.bootstrap(SystemdLogging.handlerFactory(destination: destination, identifier: "tokend", level: level))
        let logger = Logger(label: "tokend")
        switch executor {
        case .nio, .linkedHook: logger.debug("Swift concurrency runs on the event loops", metadata: ["installed_by": "\(executor)"])
        case .notInstalled: logger.notice("Swift concurrency stays on its own thread pool: another executor hook is installed")
        }
        if let hardeningProblem { logger.warning("cannot disable core dumps (PR_SET_DUMPABLE): \(hardeningProblem)") }
        let metricsRegistry = configuration.metrics.isEnabled ? Self.bootstrapMetrics() : nil
        let daemon = TokendDaemon(
            configuration: configuration, logger: logger, environment: environment,
            options: .init(reloadConfiguration: reloader(), logLevel: level, metricsRegistry: metricsRegistry)
        )
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: daemon)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        do {
            try await group.run()
        } catch {
            logger.critical("tokend failed: \(error)")
            throw ExitCode(1)
        }
    }

    /// `--reload`: the running daemon's verdict on its configuration file, printed; exit 78
    /// when it refused the file, 1 when it could not be asked.
    private func reloadRunningDaemon() async throws {
        // The public socket, and for root without --socket the administrators' socket first (no
        // flood of other users' connections queues ahead of it), as tokenctl does.
        let configured = try? loadConfiguration()
        let path = socket ?? configured?.socketPath ?? DaemonConfiguration.defaultSocketPath
        let administrators =
            socket == nil && geteuid() == 0
            ? (configured.map { $0.adminSocketPath } ?? DaemonConfiguration.defaultSocketPath + DaemonConfiguration.adminSocketSuffix)
            : nil
        let client = TokendClient(socketPath: path, administratorsSocketPath: administrators, callTimeout: .seconds(60))
        let verdict: Result<ReloadedConfiguration, TokendClientError>
        do {
            verdict = .success(try await client.reload())
        } catch {
            verdict = .failure(error)
        }
        await client.close()
        switch verdict {
        case .success(let applied):
            let providers = applied.providers.isEmpty ? "none" : applied.providers.joined(separator: ", ")
            print("configuration reloaded: \(applied.file ?? "built-in defaults") (providers: \(providers))")
            if !applied.restartNeeded.isEmpty {
                print("take effect only after a restart: \(applied.restartNeeded.joined(separator: ", "))")
            }
        case .failure(let error):
            StandardError.write("tokend: \(error.message)\n")
            throw ExitCode(error.code == .configurationInvalid ? 78 : 1)
        }
    }

    /// Re-reads the file tokend started with (or the default file, if it has appeared since).
    private func reloader() -> @Sendable () throws -> DaemonConfiguration {
        let explicit = config
        return {
            let configuration: DaemonConfiguration
            if let explicit {
                configuration = try ConfigurationLoader.load(path: explicit)
            } else if access(DaemonConfiguration.defaultConfigurationFile, F_OK) == 0 {
                configuration = try ConfigurationLoader.load(path: DaemonConfiguration.defaultConfigurationFile)
            } else {
                configuration = DaemonConfiguration()
            }
            try ClientKeyCheck.check(configuration)
            return configuration
        }
    }

    /// Sends swift-metrics records to a Prometheus registry, which the daemon exposes.
    private static func bootstrapMetrics() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        // Grants are HTTP round trips (or a local command): milliseconds to tens of seconds.
        factory.durationHistogramBuckets["tokend_grant_duration_seconds"] = [
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
        ]
        MetricsSystem.bootstrap(factory)
        return registry
    }

    private func loadConfiguration() throws -> DaemonConfiguration { try reloader()() }
}

enum ProcessEnvironment {
    static var current: [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                result[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            pointer += 1
        }
        return result
    }
}
