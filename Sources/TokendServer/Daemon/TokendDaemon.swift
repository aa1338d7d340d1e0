import Logging
import NIOCore
import NIOPosix
import Prometheus
import ServiceLifecycle
import TokendConfig
import TokendCore
import TokendOAuth
import TokendStorage
import TokendSystemd
import UnixSignals

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon as a service: opens the store, loads credentials into memory, listens (or adopts
/// the socket systemd passed), tells systemd it is ready, reloads on SIGHUP, and on graceful
/// shutdown stops accepting, lets in-flight replies and grants finish and closes the store.
public final class TokendDaemon: Service {
    /// This build's version, as `GetInfo` reports it and `tokend --version` prints it.
    public static var version: String { DaemonInfo.version }

    /// What the executable supplies beyond the configuration.
    public struct Options: Sendable {
        /// Reads the configuration again, for SIGHUP; `nil` when there is nothing to re-read.
        public var reloadConfiguration: (@Sendable () throws -> DaemonConfiguration)?
        /// The log level shared by every logger, changed by a reload.
        public var logLevel: LogLevelControl?
        /// Where swift-metrics records go when metrics are enabled (see `MetricsConfiguration`).
        public var metricsRegistry: PrometheusCollectorRegistry?

        /// Creates options; by default nothing is reloadable and there are no metrics.
        public init(
            reloadConfiguration: (@Sendable () throws -> DaemonConfiguration)? = nil, logLevel: LogLevelControl? = nil,
            metricsRegistry: PrometheusCollectorRegistry? = nil
        ) {
            self.reloadConfiguration = reloadConfiguration
            self.logLevel = logLevel
            self.metricsRegistry = metricsRegistry
        }
    }

    let configuration: DaemonConfiguration
    let logger: Logger
    let group: any EventLoopGroup
    let environment: [String: String]
    let options: Options
    let notifier: SystemdNotifier
    /// What start-up found that does not do what the configuration says (also in `Status`).
    let setupWarnings = SetupWarnings()

    /// - Parameters:
    ///   - configuration: the validated configuration.
    ///   - environment: the process environment (`CREDENTIALS_DIRECTORY`, `LISTEN_FDS`,
    ///     `NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    ///   - options: reload, log level and metrics hooks.
    public init(
        configuration: DaemonConfiguration, logger: Logger, environment: [String: String],
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, options: Options = Options()
    ) {
        self.configuration = configuration
        self.logger = logger
        self.environment = environment
        self.group = group
        self.options = options
        self.notifier = SystemdNotifier(environment: environment)
    }

    public func run() async throws {
        // Trap SIGHUP first: its default action would end the daemon.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let startedAt = WallClock.now()
        try makeDirectory(configuration.stateDirectory)
        let lock = try StateDirectoryLock.acquire(directory: configuration.stateDirectory)
        defer { lock.release() }

        let loadedKeys = try KeyringLoader.load(
            credentialsDirectory: environment["CREDENTIALS_DIRECTORY"],
            keyFile: configuration.keyFile,
            expectedOwner: geteuid()
        )
        logger.info(
            "master key loaded",
            metadata: ["key_id": "\(loadedKeys.keyring.current.id)", "source": "\(loadedKeys.source)"])
        // SQLite in the state directory, or the PostgreSQL store shared with other nodes.
        let opened = try await openStore(keyring: loadedKeys.keyring)
        let store = opened.store
        let resumption = try await KeyRotation.resumeIfNeeded(store: store, keyring: loadedKeys, logger: logger)

        let (values, unresolvedGroups) = RuntimeSettings.values(from: configuration)
        for name in unresolvedGroups {
            logger.warning("admin group does not exist; it grants nothing", metadata: ["group": "\(name)"])
        }
        let settings = RuntimeSettings(values)
        let view = CredentialView()
        let limits = configuration.refreshLimits
        // Its own event loop for provider I/O (see HTTPClientPool), not the daemon's `group`.
        // https_proxy and no_proxy from the unit's Environment=, for providers without a `proxy` key.
        let proxies = try ProxyEnvironment(environment: environment)
        if let proxy = proxies.httpsProxy {
            logger.info(
                "providers are reached through the environment's proxy", metadata: ["proxy": "\(proxy)", "no_proxy": "\(proxies.noProxy)"])
        }
        let httpPool = HTTPClientPool(timeouts: .init(connect: limits.httpConnectTimeout, request: limits.httpTimeout), proxies: proxies)
        let registry = CredentialRegistry(
            store: store, view: view, settings: settings, keys: KeyManagement(resumption.keyring),
            limits: limits, httpPool: httpPool, logger: logger, now: WallClock.now
        )
        await registry.useCoordination(opened.coordination)
        let auditTrail = AuditTrail(logger: logger, enabled: configuration.audit.enabled)
        registry.tokenFiles.useAudit(auditTrail)
        let count = try await registry.loadAll()
        Self.returnMemoryFreedByTheLoad()
        let sharedFeed = startSharedStoreFeed(opened, registry: registry, view: view)
        let scheduler = Task { await registry.runScheduler() }
        let clockMonitor = ClockStepMonitor { [logger] in
            logger.notice("the wall clock was set; re-checking refresh times")
            Task { await registry.wake() }
        }
        clockMonitor.start()

        let limiter = ConnectionLimiter(maximum: configuration.maxConnections, quotas: configuration.quotas)
        let administratorsLimiter = ConnectionLimiter.forAdministratorsSocket(quotas: configuration.quotas)
        let reloads = ConfigurationReloads()
        var router = CallRouter(
            view: view, registry: registry, settings: settings,
            daemonInfo: DaemonInfo(version: DaemonInfo.version, startedAt: startedAt), logger: logger,
            now: WallClock.now, connections: limiter, reloads: reloads, coordination: opened.coordination
        )
        router.administratorsConnections = administratorsLimiter
        router.auditTrail = auditTrail
        let readerWarnings = ReaderWarnings(availability: ProgramFactsProbe.probe())
        router.readerWarnings = readerWarnings
        router.setupWarnings = setupWarnings
        reportReaders(readerWarnings, in: view)
        var loadCredentials = LoadCredentialService(view: view, registry: registry, settings: settings, logger: logger, now: WallClock.now)
        loadCredentials.auditTrail = auditTrail
        let listener = SocketListener(
            router: router,
            limiter: limiter,
            administratorsLimiter: administratorsLimiter,
            limits: .init(
                maximumMessageBytes: configuration.maxMessageBytes, maximumPendingCalls: configuration.maxPipelinedCalls,
                messageTimeout: TimeAmount(configuration.messageTimeout)
            ),
            logger: logger,
            loadCredentials: loadCredentials
        )
        // The administrators' socket accepts and serves on a thread of its own: no other user's
        // connections, accepted or refused, queue ahead of an administrator's there. So does the
        // LoadCredential= socket, root's too: a unit starting does not wait behind a flood.
        let administratorsLoop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { administratorsLoop.shutdownGracefully { _ in } }
        // Metrics first: once a client can connect, everything tokend serves is up.
        let metrics = try await startMetrics(view: view, limiters: [limiter, administratorsLimiter])
        let sockets: [ListeningSocket]
        do {
            sockets = try await listen(listener, administratorsLoop: administratorsLoop)
        } catch {
            await stopMetrics(metrics)
            throw error
        }

        // Ready: the socket listens and the store is open.
        let status = StatusReporter(
            view: view, changes: view.changes, notifier: notifier, now: WallClock.now,
            storeHealth: { [coordination = opened.coordination] in coordination.health() })
        let seen = view.changes.generation
        let statusText = status.summary().text
        notifier.notify(.ready, .status(statusText))
        var readyMetadata: Logger.Metadata = ["credentials": "\(count)", "version": "\(DaemonInfo.version)"]
        for socket in sockets {
            readyMetadata[socket.role.logKey] = "\(socket.description)"
        }
        logger.notice("tokend ready", metadata: readyMetadata)

        let watchdog = WatchdogSettings.parse(environment: environment, pid: getpid()).map { settings in
            Watchdog(interval: settings.interval, logger: logger, probe: healthProbe(store: store, registry: registry)) { [notifier] in
                notifier.notify(.watchdog)
            }
        }
        let reloader = Reloader(
            daemon: self, current: configuration, settings: settings, registry: registry, limiter: limiter,
            administratorsLimiter: administratorsLimiter, auditTrail: auditTrail
        )

        await withDiscardingTaskGroup { tasks in
            if notifier.isEnabled { tasks.addTask { await status.run(sent: statusText, seen: seen) } }
            if let watchdog { tasks.addTask { await watchdog.run() } }
            if let textfile = metrics.textfile { tasks.addTask { await textfile.run() } }
            tasks.addTask {
                for await _ in hangups.cancelOnGracefulShutdown() { reloads.request() }
            }
            tasks.addTask { await reloads.run { await reloader.reload() } }

            // Serve until asked to stop.
            try? await gracefulShutdown()
            reloads.finish()
            await stop(
                shutdownTimeout: reloader.configuration.shutdownTimeout, sockets: sockets, listener: listener,
                registry: registry,
                scheduler: scheduler, clockMonitor: clockMonitor, metrics: metrics
            )
            tasks.cancelAll()
        }
        sharedFeed?.cancel()
        await sharedFeed?.value
        await httpPool.shutdown()
        try await store.close()
        logger.notice("stopped")
    }

    // MARK: Listening

    /// A Varlink socket: passed by systemd (socket activation) or bound here.
    struct ListeningSocket {
        let role: SocketRole
        let channel: any Channel
        /// The socket file this process created (nil when socket-activated).
        let ownedFile: OwnedSocketFile?
        let description: String
    }

    /// The sockets to serve: those systemd passed, by name, or else the public socket, (unless
    /// `daemon.admin_socket` is empty) the administrators' socket and (when
    /// `load_credential.socket` is set) the `LoadCredential=` socket, bound here.
    private func listen(_ listener: SocketListener, administratorsLoop: any EventLoopGroup) async throws -> [ListeningSocket] {
        func group(for role: SocketRole) -> any EventLoopGroup {
            switch role {
            case .varlink: self.group
            case .administrators, .loadCredential: administratorsLoop
            }
        }
        if ListenFDs.parse(environment: environment, pid: getpid()) != nil, let passed = try ListenFDs.take() {
            return try await adopt(passed, listener: listener, group: group(for:))
        }
        var sockets: [ListeningSocket] = []
        var wanted: [(SocketRole, String, UInt32)] = [(.varlink, configuration.socketPath, configuration.socketMode)]
        if let path = configuration.adminSocketPath { wanted.append((.administrators, path, SocketRole.administratorsMode)) }
        if let path = configuration.loadCredentialSocketPath { wanted.append((.loadCredential, path, SocketRole.loadCredentialMode)) }
        do {
            for (role, path, mode) in wanted {
                try makeDirectory(parentOf: path, mode: 0o755)
                let (channel, file) = try await listener.bind(path: path, mode: mode, role: role, group: group(for: role))
                sockets.append(ListeningSocket(role: role, channel: channel, ownedFile: file, description: path))
            }
        } catch {
            for socket in sockets {
                try? await socket.channel.close()
                socket.ownedFile?.remove()
            }
            throw error
        }
        return sockets
    }

    /// Serves the sockets systemd passed: each by the role its name gives (``SocketRole``), the
    /// first of each role; a public one is required.
    private func adopt(
        _ passed: ListenFDs, listener: SocketListener, group: (SocketRole) -> any EventLoopGroup
    ) async throws -> [ListeningSocket] {
        var sockets: [ListeningSocket] = []
        var extra = 0
        do {
            for (index, descriptor) in passed.descriptors.enumerated() {
                let role = SocketRole.passed(named: passed.names.isEmpty ? nil : passed.names[index])
                guard !sockets.contains(where: { $0.role == role }) else {
                    extra += 1
                    continue
                }
                guard ListenFDs.isListeningUnixStreamSocket(descriptor) else {
                    throw ListenerError(
                        "the socket passed by the service manager (fd \(descriptor)) is not a listening Unix stream socket")
                }
                let channel = try await listener.adopt(descriptor: descriptor, role: role, group: group(role))
                let path = ListenFDs.boundPath(of: descriptor) ?? "fd \(descriptor)"
                if role == .varlink { checkSocketMode(ofPassed: path) }
                sockets.append(
                    ListeningSocket(role: role, channel: channel, ownedFile: nil, description: "\(path) (socket activation)"))
                if role == .varlink, path != configuration.socketPath {
                    logger.info(
                        "serving on the socket passed by the service manager, not the configured one",
                        metadata: ["passed": "\(path)", "configured": "\(configuration.socketPath)"])
                }
            }
            guard sockets.contains(where: { $0.role == .varlink }) else {
                throw ListenerError(
                    "the service manager passed no public socket, only "
                        + sockets.map { "FileDescriptorName=\($0.role.descriptorName)" }.joined(separator: " and "))
            }
        } catch {
            for socket in sockets { try? await socket.channel.close() }
            throw error
        }
        if extra > 0 {
            logger.warning(
                "the service manager passed several sockets of one kind; serving on the first of each",
                metadata: ["count": "\(passed.descriptors.count)", "names": "\(passed.names.joined(separator: ":"))"])
        }
        if !sockets.contains(where: { $0.role == .administrators }) {
            logger.info(
                "no administrators' socket was passed (tokend-admin.socket); administrators use the public socket",
                metadata: ["names": "\(passed.names.joined(separator: ":"))"])
        }
        return sockets
    }

    /// `daemon.socket_mode` does nothing when systemd makes the socket: said when it asks for
    /// another mode than the default and the passed socket does not have it (`SocketMode=` of the
    /// socket unit is the place).
    private func checkSocketMode(ofPassed path: String) {
        guard configuration.socketMode != DaemonConfiguration.defaultSocketMode else { return }
        let wanted = String(configuration.socketMode, radix: 8)
        var info = stat()
        let actual = path.hasPrefix("/") && stat(path, &info) == 0 ? String(info.st_mode & 0o777, radix: 8) : nil
        guard actual.map({ UInt32($0, radix: 8) != configuration.socketMode }) ?? true else { return }
        let warning =
            "daemon.socket_mode is \"0\(wanted)\" but the socket systemd passed (\(path)) has mode "
            + (actual.map { "0\($0)" } ?? "unknown")
            + ": with socket activation the socket unit makes the socket, so set SocketMode= (and SocketGroup=) in tokend.socket "
            + "(systemctl edit tokend.socket); socket_mode applies only when tokend binds the socket itself"
        logger.warning("\(warning)")
        setupWarnings.add(warning)
    }

    /// Says at start which credentials have readers that grant nothing on this host.
    private func reportReaders(_ readers: ReaderWarnings, in view: CredentialView) {
        // Only program readers can grant nothing here: without any, no credential is walked
        // (sorting a million at start-up took seconds).
        guard view.programReaders.isPresent else { return }
        for entry in view.snapshot() {
            let problems = readers.problems(entry.readers)
            guard !problems.isEmpty else { continue }
            logger.warning(
                "credential has readers that grant nothing here",
                metadata: ["user_identifier": "\(entry.userIdentifier)", "problems": "\(problems.joined(separator: "; "))"])
        }
    }

    // MARK: Metrics

    private struct RunningMetrics {
        var channel: (any Channel)?
        var socketFile: OwnedSocketFile?
        var textfile: MetricsTextfile?
    }

    private func startMetrics(view: CredentialView, limiters: [ConnectionLimiter]) async throws -> RunningMetrics {
        guard configuration.metrics.isEnabled, let registry = options.metricsRegistry else { return RunningMetrics() }
        let gauges = StateGauges(perCredentialLabels: configuration.metrics.perCredentialLabels)
        let exporter = MetricsExporter(registry: registry) {
            gauges.update(view: view, limiters: limiters, now: WallClock.now())
        }
        var running = RunningMetrics()
        if let listen = configuration.metrics.listen {
            do {
                (running.channel, running.socketFile) = try await MetricsEndpoint.start(
                    listen, exporter: exporter, group: group)
            } catch {
                throw ListenerError("cannot listen for metrics on \(listen): \(error)")
            }
            logger.info("metrics endpoint listening", metadata: ["listen": "\(listen)"])
        }
        if let path = configuration.metrics.textfile {
            running.textfile = MetricsTextfile(
                path: path, interval: configuration.metrics.textfileInterval, exporter: exporter, changes: view.changes,
                logger: logger
            )
        }
        return running
    }

    // MARK: Watchdog

    /// Passes through every event loop, the registry actor and the store's writer.
    private func healthProbe(store: any CredentialStore, registry: CredentialRegistry)
        -> @Sendable () async throws -> Void
    {
        let group = self.group
        return {
            try await withThrowingTaskGroup(of: Void.self) { probes in
                for loop in group.makeIterator() {
                    probes.addTask { try await loop.submit {}.get() }
                }
                try await probes.waitForAll()
            }
            _ = await registry.grantsInFlightHighWater
            try await store.probeWriter()
        }
    }

    // MARK: Stopping

    private func stop(
        shutdownTimeout: Duration, sockets: [ListeningSocket], listener: SocketListener, registry: CredentialRegistry,
        scheduler: Task<Void, Never>,
        clockMonitor: ClockStepMonitor, metrics: RunningMetrics
    ) async {
        notifier.notify(.stopping)
        let deadline = ContinuousClock.now + shutdownTimeout
        logger.notice(
            "stopping",
            metadata: [
                "connections": "\(listener.connections.count)",
                "timeout": "\(DurationFormat.humanReadable(shutdownTimeout))",
            ])
        // Stop accepting, without closing the listening sockets yet: a connection accepted just
        // before is still on its way (its setup hops between event loops), and NIO closes one
        // whose listening socket closed meanwhile, unread (its caller got ECONNRESET in a
        // restart). A socket passed by systemd stays with the socket unit, which keeps listening
        // (and queues callers) for the next tokend; a socket file of our own goes now.
        for socket in sockets {
            try? await socket.channel.setOption(ChannelOptions.autoRead, value: false)
            socket.ownedFile?.remove()
        }
        // A few passes through every event loop let those connections arrive and be counted, so
        // that the stop answers their calls.
        // (The administrators' socket has a loop of its own: its listening channel's.)
        let loops = Array(group.makeIterator()) + sockets.map { $0.channel.eventLoop }
        _ = await waitUntil(deadline: deadline) {
            for _ in 0..<3 {
                await withTaskGroup(of: Void.self) { passes in
                    for loop in loops { passes.addTask { try? await loop.submit {}.get() } }
                }
            }
        }
        // No new proactive refreshes; those under way finish below.
        scheduler.cancel()
        await registry.stopStartingProactiveGrants()
        clockMonitor.stop()
        // Calls already received are answered (their grants included), then each connection closes.
        let forced = await listener.connections.quiesce(deadline: deadline)
        if forced > 0 {
            logger.warning(
                "closed connections that were still waiting at the shutdown deadline",
                metadata: ["connections": "\(forced)"])
        }
        for socket in sockets { try? await socket.channel.close() }
        // Grants that no caller waits for (proactive ones) still commit their result, so a rotated
        // refresh token is never lost to a stop.
        let grants = await registry.grantsInFlight
        if !grants.isEmpty {
            let finished = await waitUntil(deadline: deadline) {
                for grant in grants { _ = await grant.value }
            }
            if !finished {
                logger.warning(
                    "grants still in flight at the shutdown deadline", metadata: ["grants": "\(grants.count)"])
            }
        }
        await scheduler.value
        await stopMetrics(metrics)
    }

    private func stopMetrics(_ metrics: RunningMetrics) async {
        if let channel = metrics.channel { try? await channel.close() }
        metrics.socketFile?.remove()
    }

    // MARK: Helpers

    private func makeDirectory(_ path: String, mode: mode_t = 0o700) throws {
        var info = stat()
        if stat(path, &info) == 0 { return }
        try makeDirectory(parentOf: path, mode: mode)
        guard mkdir(path, mode) == 0 || errno == EEXIST else {
            throw ListenerError("cannot create directory \(path): \(String(cString: strerror(errno)))")
        }
    }

    private func makeDirectory(parentOf path: String, mode: mode_t) throws {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return }
        try makeDirectory(String(path[..<slash]), mode: mode)
    }
}
