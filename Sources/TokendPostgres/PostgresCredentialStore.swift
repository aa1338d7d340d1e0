import Logging
import NIOCore
import PostgresNIO
import Synchronization
import TokendCore
import TokendStorage

/// The shared credential store: one PostgreSQL database that several tokend nodes use at once.
///
/// Same concepts as ``SQLiteCredentialStore``: one row per credential, tokens sealed with
/// ``CredentialCipher`` under the master key every node loads, and a store-wide generation (a
/// PostgreSQL sequence, so it only grows, across nodes and across remove and re-insert) for
/// compare-and-swap. On top:
///
/// - Refresh leases (`tokend_leases`, see ``PostgresRefreshCoordination``). While this node
///   holds the lease of a credential, every write of that credential also requires that the lease
///   still carries the fencing counter it was taken with, so a node whose lease was taken over
///   never overwrites the newer holder's token.
/// - A trigger announces every committed change on the `tokend_changes` channel (user
///   identifier and generation, never a secret) for the other nodes' `LISTEN`.
///
/// Every operation is bounded by `operationTimeoutMilliseconds`; a failure to reach the server
/// marks the store unavailable until an operation succeeds again. The password is only handed
/// to postgres-nio, never logged or put in an error.
public final class PostgresCredentialStore: CredentialStore {
    public let settings: PostgresStoreSettings
    public let address: PostgresURL
    let client: PostgresClient
    /// The same server, user and TLS as `client`'s, for start-up's single connection.
    let startupConnection: PostgresConnection.Configuration
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger
    let now: @Sendable () -> Timestamp
    let monitor: HealthMonitor
    private let runTask: Task<Void, Never>
    private let keyringBox: Mutex<Keyring>
    private let isClosed = Mutex(false)
    /// Leases this node holds, by user identifier → fencing counter; writes of those credentials
    /// are fenced by it.
    let leaseBook = Mutex<[String: Int64]>([:])
    /// Per credential, the newest row this node has read or written, authenticated: its
    /// generation and its content digest (so that a status-only write can authenticate the row
    /// without reading it again).
    let seenRows = Mutex<[String: SeenRow]>([:])
    /// What this node remembers of the store outside the database: the store's id and schema
    /// version, and the newest generation of each credential (its floor), durable before a row
    /// is served or a write acknowledged.
    let memory: SharedStoreMemory
    /// The store's id (`tokend_meta.store_id`), which every row tag names; set when the store
    /// is admitted.
    let storeIDBox = Mutex<String>("")
    /// Why this node serves none of the store's rows until an administrator confirms the store
    /// (``StoreAdmission/hold(reason:)``), or nil.
    let heldReason = Mutex<String?>(nil)
    /// The rows without a tag that this node's last adoption dry run listed, by user identifier,
    /// as the tags adoption would give them: an adoption tags only those, unchanged since
    /// (``adopt(_:)``).
    let previewedTags = Mutex<[String: [UInt8]]>([:])
    /// Refused rows already reported, as "kind generation user", so a reconciliation does not
    /// report the same one again every interval.
    private let reportedRefusals = Mutex<Set<String>>([])
    private let integrityObserver = Mutex<(@Sendable (IntegrityFailure) -> Void)?>(nil)

    /// Connects, and brings the schema up to date (safe when several nodes start at once).
    ///
    /// - Throws: ``StorageError``: `.database` if the URL is invalid, the server cannot be
    ///   reached, or its schema is newer than this build.
    public static func open(
        settings: PostgresStoreSettings, keyring: Keyring, logger: Logger = Logger(label: "tokend.postgres"),
        productVersion: String = "unknown", eventLoopGroup: any EventLoopGroup = PostgresClient.defaultEventLoopGroup,
        now: @escaping @Sendable () -> Timestamp = SQLiteCredentialStore.systemNow
    ) async throws -> PostgresCredentialStore {
        let store = try PostgresCredentialStore(
            settings: settings, keyring: keyring, logger: logger, eventLoopGroup: eventLoopGroup, now: now)
        do {
            // Reachable first, within the operation timeout: a database that is down or refuses
            // the login is reported as such, not after the migration's longer bound.
            try await store.connectOnce()
            store.importLegacyFloors()
            try await store.migrate(productVersion: productVersion)
            try await store.checkCounter()
        } catch {
            try? await store.close()
            throw error
        }
        if let reason = store.heldReason.withLock({ $0 }) {
            logger.error(
                "serving none of the shared store's credentials: \(reason)",
                metadata: ["url": "\(store.address)", "node": "\(settings.nodeName)"])
        } else {
            logger.info("opened shared credential store", metadata: ["url": "\(store.address)", "node": "\(settings.nodeName)"])
        }
        return store
    }

    init(
        settings: PostgresStoreSettings, keyring: Keyring, logger: Logger, eventLoopGroup: any EventLoopGroup,
        now: @escaping @Sendable () -> Timestamp
    ) throws {
        do {
            address = try PostgresURL.parse(settings.url)
        } catch {
            throw StorageError(code: .database, message: "store url \(error.description)")
        }
        self.settings = settings
        self.logger = logger
        self.now = now
        self.keyringBox = Mutex(keyring)
        self.monitor = HealthMonitor(now: now)
        self.memory = try SharedStoreMemory(
            path: settings.stateDirectory.map { $0 + "/" + SharedStoreMemory.fileName }, keyring: keyring)
        let tls = try Self.tls(settings.tls)
        var configuration = PostgresClient.Configuration(
            host: address.host, port: address.port, username: address.user, password: settings.password,
            database: address.database, tls: tls.required ? .require(tls.configuration) : .prefer(tls.configuration)
        )
        configuration.options.connectTimeout = .milliseconds(settings.operationTimeoutMilliseconds)
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: tls.configuration)
        } catch {
            throw StorageError(code: .database, message: "store tls settings cannot be used (\(error))")
        }
        var startupConnection = PostgresConnection.Configuration(
            host: address.host, port: address.port, username: address.user, password: settings.password,
            database: address.database, tls: tls.required ? .require(context) : .prefer(context))
        startupConnection.options.connectTimeout = .milliseconds(settings.operationTimeoutMilliseconds)
        startupConnection.options.additionalStartupParameters = [("application_name", "tokend \(settings.nodeName)")]
        self.startupConnection = startupConnection
        self.eventLoopGroup = eventLoopGroup
        configuration.options.maximumConnections = 8
        configuration.options.keepAliveBehavior = .init(frequency: .seconds(10))
        configuration.options.additionalStartupParameters = [("application_name", "tokend \(settings.nodeName)")]
        // postgres-nio logs every failed connection attempt at info; the store reports outages itself.
        var backgroundLogger = logger
        backgroundLogger.logLevel = max(logger.logLevel, .warning)
        let client = PostgresClient(configuration: configuration, eventLoopGroup: eventLoopGroup, backgroundLogger: backgroundLogger)
        self.client = client
        runTask = Task { await client.run() }
    }

    /// The connections' TLS settings, and whether TLS is required; the CA file is read now, so a
    /// missing or unreadable one is reported at start, naming it.
    static func tls(_ mode: PostgresTLSMode) throws -> (configuration: TLSConfiguration, required: Bool) {
        switch mode {
        case .prefer:
            return (.makeClientConfiguration(), false)
        case .verifyFull(let caFile):
            let roots: [NIOSSLCertificate]
            do {
                roots = try NIOSSLCertificate.fromPEMFile(caFile)
            } catch {
                throw StorageError(code: .database, message: "store tls_ca_file \(caFile) cannot be read as PEM certificates (\(error))")
            }
            guard !roots.isEmpty else {
                throw StorageError(code: .database, message: "store tls_ca_file \(caFile) holds no certificate")
            }
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.trustRoots = .certificates(roots)
            configuration.certificateVerification = .fullVerification
            return (configuration, true)
        }
    }

    /// A cipher over the current keyring.
    var cipher: CredentialCipher { CredentialCipher(keyring: keyringBox.withLock { $0 }) }

    func replaceKeyring(_ keyring: Keyring) { keyringBox.withLock { $0 = keyring } }

    /// The store's health now: a held store is a problem until an administrator confirms it.
    public var health: StoreHealth {
        var health = monitor.current
        if let reason = heldReason.withLock({ $0 }) { health.problem = "serving none of its credentials: " + reason }
        return health
    }

    /// The store's id, which every row tag names.
    var storeID: String { storeIDBox.withLock { $0 } }

    /// Fails while the store is held (``StoreAdmission/hold(reason:)``): nothing is written to a
    /// store this node does not recognise.
    func checkNotHeld() throws {
        if let reason = heldReason.withLock({ $0 }) {
            throw StorageError(code: .integrity, message: "the shared store is held until an administrator confirms it: \(reason)")
        }
    }

    /// Whether reads answer nothing (the store is held).
    var isHeld: Bool { heldReason.withLock { $0 != nil } }

    /// Calls `observer` for every row refused by its integrity check (the daemon counts them).
    public func onIntegrityFailure(_ observer: @escaping @Sendable (IntegrityFailure) -> Void) {
        integrityObserver.withLock { $0 = observer }
    }

    /// Logs and reports a refused row, once per row version.
    func reportIntegrity(_ error: StorageError, kind: IntegrityFailure, user: String, generation: Int64?) {
        let first = reportedRefusals.withLock { $0.insert("\(kind.rawValue) \(generation.map(String.init) ?? "?") \(user)").inserted }
        guard first else { return }
        logger.error(
            "refused a credential row that failed its integrity check: \(error.message)",
            metadata: ["user_identifier": "\(user)", "integrity": "\(kind.rawValue)"])
        integrityObserver.withLock { $0 }?(kind)
    }

    /// Records an authenticated row read or written at `generation`.
    func noteSeen(_ user: String, generation: Int64, contentDigest: [UInt8], salt: [UInt8]) {
        seenRows.withLock { rows in
            if let seen = rows[user], seen.generation > generation { return }
            rows[user] = SeenRow(generation: generation, contentDigest: contentDigest, salt: salt)
        }
    }

    /// The floors of `users` now, to check rows read after this with.
    func floors(of users: [String]) -> [String: SharedStoreMemory.Floor] {
        var floors: [String: SharedStoreMemory.Floor] = [:]
        for user in users { floors[user] = memory.floor(of: user) }
        return floors
    }

    /// Checks an authenticated row's generation against `floor`, the newest this node had seen
    /// before the read began (a row read later can only be as new or newer), and records it. The
    /// caller makes the floor durable (``SharedStoreMemory/raise(_:)``) before the row is served.
    ///
    /// - Throws: ``StorageError`` `.integrity` if the row is older: it was rolled back.
    func admit(_ user: String, generation: Int64, contentDigest: [UInt8], salt: [UInt8], floor: SharedStoreMemory.Floor?) throws {
        if let floor, floor.refuses(generation) {
            let seen = floor.removed ? "seen generation \(floor.generation) removed" : "seen generation \(floor.generation)"
            let error = StorageError(
                code: .integrity,
                message: "stored credential '\(user)' was rolled back to generation \(generation); this node has \(seen); it is refused")
            reportIntegrity(error, kind: .rolledBack, user: user, generation: generation)
            throw error
        }
        noteSeen(user, generation: generation, contentDigest: contentDigest, salt: salt)
    }

    /// Makes the floors of rows read or written durable; throws when they cannot be, so that
    /// the rows are not served.
    ///
    /// - Parameter synced: false for a write of the refresh bookkeeping alone (a grant's
    ///   in-flight marker, a retry time), whose floor survives the process being killed at once
    ///   but may wait for the next synced write to survive a power failure: the content it
    ///   shares with the row before it (readers, tokens) is protected by that row's synced floor.
    func keepFloors(_ floors: [String: SharedStoreMemory.Floor], synced: Bool = true) async throws {
        do {
            try await memory.raise(floors, synced: synced)
        } catch let error as StorageError {
            logger.error("\(error.description)")
            throw StorageError(
                code: .fileSystem,
                message: "this node cannot save the generations it has seen, so it serves nothing newer: \(error.message)")
        }
    }

    public func close() async throws {
        let already = isClosed.withLock { closed in
            defer { closed = true }
            return closed
        }
        if already { return }
        runTask.cancel()
        // Bounded: a client that does not wind down must not hold up the daemon's stop.
        if await BoundedWait.result(of: runTask, within: Self.closeLimit) == nil {
            logger.warning("the database client did not stop within \(DurationFormat.humanReadable(Self.closeLimit)); closing anyway")
        }
    }

    /// How long ``close()`` waits for the database client to wind down.
    static let closeLimit = Duration.seconds(5)

    /// Start-up's first contact, on a connection of its own: the pool retries a refused login
    /// until the operation times out, so a wrong password would read as "did not answer"; one
    /// connection reports the server's refusal ("password authentication failed …") at once.
    func connectOnce() async throws {
        let (configuration, group, logger) = (startupConnection, eventLoopGroup, logger)
        try await run("connect to the shared store's database") { _ in
            let connection = try await PostgresConnection.connect(
                on: group.any(), configuration: configuration, id: 0, logger: logger)
            try await connection.close()
        }
    }

    public func probeWriter() async throws {
        try await run("probe the database") { client in
            try await client.query("SELECT 1", logger: self.logger).collect()
        }
    }

    // MARK: Running operations

    /// Runs `body` with a time limit, in an unstructured task (a write that has started is not
    /// abandoned when the caller is cancelled), and maps every error to a secret-free
    /// ``StorageError``. Reaching the server or not updates the store's health.
    ///
    /// - Parameter limit: the bound when it is not the operation timeout (the schema migration's).
    func run<T: Sendable>(
        _ what: String, limit: Duration? = nil, _ body: @escaping @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        if isClosed.withLock({ $0 }) {
            throw StorageError(code: .closed, message: "the shared credential store is closed")
        }
        let client = client
        let task = Task {
            do {
                return try await body(client)
            } catch let error as PostgresTransactionError {
                throw Self.unwrapped(error)
            }
        }
        let limit = limit ?? Duration.milliseconds(settings.operationTimeoutMilliseconds)
        let timer = Task {
            try await Task.sleep(for: limit)
            task.cancel()
        }
        defer { timer.cancel() }
        let started = ContinuousClock.now
        do {
            // The cancellation above ends a well-behaved body; one that ignores it is left
            // behind after a grace second, so the caller is answered either way.
            guard let outcome = await BoundedWait.result(of: task, within: limit + .seconds(1)) else {
                throw CancellationError()
            }
            let value = try outcome.get()
            monitor.succeeded()
            return value
        } catch let error as StorageError {
            // Conflicts and the like come from a server that answered.
            monitor.succeeded()
            throw error
        } catch {
            if ContinuousClock.now - started >= limit {
                let problem = "the database did not answer within \(DurationFormat.humanReadable(limit))"
                monitor.failed(problem)
                throw StorageError(code: .database, message: "cannot \(what): \(problem)")
            }
            let mapped = Self.describe(error)
            if mapped.serverAnswered { monitor.succeeded() } else { monitor.failed(mapped.text) }
            throw StorageError(code: .database, message: "cannot \(what): \(mapped.text)")
        }
    }

    /// What went wrong in a transaction: the error its body threw (a ``StorageError`` of the
    /// body's own, an SQL error) when `BEGIN` and `COMMIT` themselves went through.
    static func unwrapped(_ error: PostgresTransactionError) -> any Error {
        guard error.beginError == nil, error.commitError == nil, let body = error.closureError else {
            return error.beginError ?? error.commitError ?? error
        }
        return body
    }

    /// A secret-free description of a postgres-nio error, and whether the server answered it
    /// (an SQL error) rather than being unreachable.
    static func describe(_ error: any Error) -> (text: String, serverAnswered: Bool) {
        if let error = error as? PSQLError {
            if let info = error.serverInfo {
                // The primary message names objects, not bound values (tokens are only ever bound).
                let state = info[.sqlState] ?? "?"
                let message = info[.message] ?? "error"
                return ("PostgreSQL error \(state): \(message)", true)
            }
            if error.code == .sslUnsupported {
                return ("the server does not offer TLS, which the store's tls setting requires", false)
            }
            // What lies under a connection failure (refused, a TLS certificate that does not
            // verify) is what an operator needs; it carries no bound value.
            let cause = error.underlying.map { ": " + String(String(describing: $0).prefix(200)) } ?? ""
            return ("the database is unreachable (\(error.code)\(cause))", false)
        }
        if error is CancellationError { return ("cancelled", false) }
        return ("the database is unreachable (\(type(of: error)))", false)
    }
}

/// Why a stored row was refused.
public enum IntegrityFailure: String, Sendable, Hashable, CaseIterable {
    /// Its authentication tag does not match: it was edited outside tokend.
    case altered
    /// It is older than a row this node has seen: an old copy was written back.
    case rolledBack = "rolled_back"
}

/// The newest authenticated row of a credential a node has seen.
struct SeenRow: Sendable {
    var generation: Int64
    var contentDigest: [UInt8]
    var salt: [UInt8]
}

/// Tracks whether the database answers; told by every operation and by the `LISTEN` connection.
final class HealthMonitor: Sendable {
    private let state: Mutex<(problem: String?, since: Timestamp?)> = Mutex((nil, nil))
    private let observers = Mutex<[@Sendable () -> Void]>([])
    let now: @Sendable () -> Timestamp

    init(now: @escaping @Sendable () -> Timestamp) { self.now = now }

    var current: StoreHealth {
        let (problem, since) = state.withLock { $0 }
        return StoreHealth(kind: "postgresql", problem: problem, since: since)
    }

    func onChange(_ observer: @escaping @Sendable () -> Void) { observers.withLock { $0.append(observer) } }

    func succeeded() {
        let changed = state.withLock { state in
            defer { state = (nil, nil) }
            return state.problem != nil
        }
        if changed { notify() }
    }

    func failed(_ problem: String) {
        let time = now()
        let changed = state.withLock { state in
            defer { state = (problem, state.since ?? time) }
            return state.problem != problem
        }
        if changed { notify() }
    }

    private func notify() { for observer in observers.withLock({ $0 }) { observer() } }
}
