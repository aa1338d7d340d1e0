#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import TokendConfig
import TokendCore
import TokendOAuth
import TokendStorage

/// The daemon as a service: opens the store, loads credentials into memory, listens, and on
/// graceful shutdown stops accepting, lets in-flight replies finish and closes the store.
public final class TokendDaemon: Service {
    private let configuration: DaemonConfiguration
    private let logger: Logger
    private let group: any EventLoopGroup
    private let environment: [String: String]

    /// - Parameters:
    ///   - configuration: the validated configuration.
    ///   - environment: the process environment (`CREDENTIALS_DIRECTORY`, later `LISTEN_FDS`).
    public init(configuration: DaemonConfiguration, logger: Logger, environment: [String: String], group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.configuration = configuration
        self.logger = logger
        self.environment = environment
        self.group = group
    }

    public func run() async throws {
        let startedAt = WallClock.now()
        try makeDirectory(configuration.stateDirectory)
        let lock = try StateDirectoryLock.acquire(directory: configuration.stateDirectory)
        defer { lock.release() }

        let loadedKeys = try KeyringLoader.load(
            credentialsDirectory: environment["CREDENTIALS_DIRECTORY"],
            keyFile: configuration.keyFile,
            expectedOwner: geteuid()
        )
        logger.info("master key loaded", metadata: ["key_id": "\(loadedKeys.keyring.current.id)", "source": "\(loadedKeys.source)"])
        let store = try SQLiteCredentialStore(stateDirectory: configuration.stateDirectory, keyring: loadedKeys.keyring, configuration: .init(productVersion: DaemonInfo.version))
        let resumption = try await KeyRotation.resumeIfNeeded(store: store, keyring: loadedKeys, logger: logger)

        let (values, unresolvedGroups) = RuntimeSettings.values(from: configuration)
        for name in unresolvedGroups {
            logger.warning("admin group does not exist; it grants nothing", metadata: ["group": "\(name)"])
        }
        let settings = RuntimeSettings(values)
        let view = CredentialView()
        let limits = configuration.refreshLimits
        let httpPool = HTTPClientPool(timeouts: .init(connect: limits.httpConnectTimeout, request: limits.httpTimeout), group: group)
        let registry = CredentialRegistry(
            store: store, view: view, settings: settings, keys: KeyManagement(resumption.keyring),
            limits: limits, httpPool: httpPool, logger: logger, now: WallClock.now
        )
        let count = try await registry.loadAll()
        let scheduler = Task { await registry.runScheduler() }

        let router = CallRouter(
            view: view, registry: registry, settings: settings,
            daemonInfo: DaemonInfo(version: DaemonInfo.version, startedAt: startedAt), logger: logger, now: WallClock.now
        )
        let listener = SocketListener(
            router: router,
            limiter: ConnectionLimiter(maximum: configuration.maxConnections),
            limits: .init(maximumMessageBytes: configuration.maxMessageBytes, maximumPendingCalls: configuration.maxPipelinedCalls),
            logger: logger
        )
        try makeDirectory(parentOf: configuration.socketPath, mode: 0o755)
        let channel = try await listener.bind(path: configuration.socketPath, mode: configuration.socketMode, group: group)
        logger.notice("tokend ready", metadata: [
            "socket": "\(configuration.socketPath)", "credentials": "\(count)", "version": "\(DaemonInfo.version)",
        ])

        // Serve until asked to stop.
        try? await gracefulShutdown()
        logger.notice("stopping")
        try? await channel.close()
        unlink(configuration.socketPath)
        scheduler.cancel()
        await scheduler.value
        await httpPool.shutdown()
        try await store.close()
        logger.notice("stopped")
    }

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

/// The system's wall clock, as a `Timestamp`.
enum WallClock {
    @Sendable static func now() -> Timestamp {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Timestamp(millisecondsSince1970: Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000)
    }
}
