import ArgumentParser
import Logging
import Metrics
import Prometheus
import ServiceLifecycle
import TokendConfig
import TokendOAuth
import TokendServer
import TokendSystemd

#if canImport(Glibc)
    import Glibc
#endif

/// `tokend`: keeps OAuth/JWT credentials fresh and serves them over a Varlink socket.
@main
struct Tokend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokend",
        abstract: "Keeps OAuth/JWT credentials fresh for the programs on this host.",
        discussion:
            "Runs in the foreground (as a systemd service). Reads its configuration from --config, else \(DaemonConfiguration.defaultConfigurationFile) when it exists, else uses the built-in defaults.",
        version: TokendDaemon.version
    )

    @Option(name: .long, help: "The configuration file (TOML).")
    var config: String?

    @Flag(name: .long, help: "Check the configuration and exit.")
    var checkConfig = false

    func run() async throws {
        // First, before the daemon starts its own threads: with TZ unset, glibc's strftime
        // (used by the timestamps of plain log lines) stats /etc/localtime for every line; with
        // it set to that file it reads the zone once. A change of the system's zone then shows
        // in those timestamps after a restart. (The journal stamps entries itself.)
        setenv("TZ", ":/etc/localtime", 0)
        // Tasks on the event loops: see ConcurrencyExecutor for why.
        let executor = ConcurrencyExecutor.useEventLoops()
        // Before any secret is in memory: no core dumps, no same-uid ptrace (issue 8).
        let hardeningProblem = ProcessHardening.disableCoreDumps()
        let configuration: DaemonConfiguration
        do {
            configuration = try loadConfiguration()
        } catch {
            // One line naming the file, the key and the problem; EX_CONFIG.
            StandardError.write("tokend: \(error)\n")
            throw ExitCode(78)
        }
        if checkConfig {
            print("configuration OK: \(configuration.sourceFile ?? "built-in defaults")")
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
