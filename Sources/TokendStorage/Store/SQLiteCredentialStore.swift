import Foundation
import GRDB
import Logging
import Synchronization
import TokendCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The embedded credential store: one SQLite database, `<stateDirectory>/tokend.sqlite`, opened
/// only by the daemon (which holds ``StateDirectoryLock`` on the directory first).
///
/// - WAL journal with `synchronous=FULL`: a commit is fsynced to the WAL before it returns, so
///   every write is durable when the call returns.
/// - `secure_delete=ON`: deleted and overwritten content is zeroed in the file rather than left
///   in free pages. The tokens are sealed anyway, but old ciphertexts lingering in free pages
///   would stay decryptable by anyone who also got hold of a key that a rotation retired. It
///   costs a few extra writes on delete, which is negligible at this store's write rate.
/// - `temp_store=MEMORY`: sorts and temporary tables never spill to temporary files.
/// - The database file is created 0600 (SQLite gives its `-wal` and `-shm` files the same
///   mode), and the state directory 0700 if tokend creates it.
public final class SQLiteCredentialStore: CredentialStore {
    /// Tunables.
    public struct Configuration: Sendable {
        /// How long a statement waits for a lock held by another connection before failing.
        public var busyTimeout: Duration
        /// How many rows ``SQLiteCredentialStore/reencrypt(under:)`` re-seals per transaction.
        public var reencryptBatchSize: Int
        /// The daemon's version, recorded in the `meta` table for diagnostics.
        public var productVersion: String

        /// Creates a configuration.
        ///
        /// - Parameters:
        ///   - busyTimeout: Lock wait before a statement fails; 5 s by default.
        ///   - reencryptBatchSize: Rows per re-encryption transaction; 100 by default.
        ///   - productVersion: The daemon's version string.
        public init(
            busyTimeout: Duration = .seconds(5),
            reencryptBatchSize: Int = 100,
            productVersion: String = "unknown"
        ) {
            self.busyTimeout = busyTimeout
            self.reencryptBatchSize = max(1, reencryptBatchSize)
            self.productVersion = productVersion
        }
    }

    /// The database file's name inside the state directory.
    public static let databaseFileName = "tokend.sqlite"

    /// The path of the database file.
    public let databasePath: String
    let pool: DatabasePool
    let groupCommit: GroupCommit
    /// Hands out generations; see ``GenerationCounter``.
    let generations = GenerationCounter()
    let configuration: Configuration
    let logger: Logger
    let now: @Sendable () -> Timestamp
    /// Read inside each write transaction, so a write that commits after a key switch uses the
    /// new key (writes are serialised, and `reencrypt` then finds nothing left behind).
    private let keyringBox: Mutex<Keyring>
    private let isClosed = Mutex(false)

    /// Opens (creating if needed) the store in `stateDirectory` and brings its schema up to date.
    ///
    /// - Parameters:
    ///   - stateDirectory: The daemon's state directory; created 0700 if missing.
    ///   - keyring: The master keys; the current one seals every write.
    ///   - configuration: Tunables.
    ///   - logger: Where to log (never tokens).
    ///   - now: The wall clock, for `updated_at`.
    /// - Throws: ``StorageError``: `.fileSystem` if the directory or file cannot be created,
    ///   `.database` if SQLite fails or the database was written by a newer tokend.
    public init(
        stateDirectory: String,
        keyring: Keyring,
        configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "tokend.storage"),
        now: @escaping @Sendable () -> Timestamp = SQLiteCredentialStore.systemNow
    ) throws {
        self.databasePath = "\(stateDirectory)/\(Self.databaseFileName)"
        self.configuration = configuration
        self.logger = logger
        self.now = now
        self.keyringBox = Mutex(keyring)

        try POSIXFile.makeDirectories(stateDirectory, mode: 0o700, code: .fileSystem)
        try Self.prepareDatabaseFile(databasePath, logger: logger)

        var grdb = GRDB.Configuration()
        grdb.label = "tokend"
        grdb.foreignKeysEnabled = true
        grdb.busyMode = .timeout(TimeInterval(configuration.busyTimeout.milliseconds) / 1000)
        grdb.prepareDatabase { db in
            // Per connection; see the type's documentation for why each is set. (`synchronous`
            // is set again below, because GRDB lowers it on the writer.)
            try db.execute(sql: "PRAGMA synchronous = FULL; PRAGMA secure_delete = ON; PRAGMA temp_store = MEMORY")
        }
        do {
            pool = try DatabasePool(path: databasePath, configuration: grdb)
            groupCommit = GroupCommit(pool: pool, generations: generations)
            // GRDB switches its writer to `synchronous=NORMAL` when it enables WAL, after
            // `prepareDatabase` ran. NORMAL can lose the last commits on power loss, which would
            // break "durable before the call returns": set FULL again and check it took.
            try pool.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                guard try Int.fetchOne(db, sql: "PRAGMA synchronous") == 2 else {
                    throw StorageError(code: .database, message: "SQLite refused PRAGMA synchronous = FULL")
                }
                // The writer's page cache, 32 MiB instead of SQLite's 2 MiB: a refresh storm's
                // grants read and rewrite rows all over the table, and with 10,000 credentials
                // the default cache re-read evicted pages from the file for ~1 % of the storm's
                // CPU. It holds only pages the writer touched; readers keep the default.
                try db.execute(sql: "PRAGMA cache_size = -32768")
            }
            let migrator = Self.migrator
            if try pool.read({ try migrator.hasBeenSuperseded($0) }) {
                throw StorageError(
                    code: .database,
                    message: "\(databasePath) was written by a newer tokend (its schema has migrations this "
                        + "build does not know); refusing to open it"
                )
            }
            try migrator.migrate(pool)
            let version = configuration.productVersion
            try pool.write { db in
                try db.execute(
                    sql: """
                        INSERT OR IGNORE INTO meta (key, value) VALUES ('created_by', ?);
                        INSERT OR REPLACE INTO meta (key, value) VALUES ('last_opened_by', ?);
                        """,
                    arguments: [version, version]
                )
            }
        } catch {
            throw Self.storageError(error, "cannot open the credential database \(databasePath)")
        }
        logger.debug("opened credential store", metadata: ["path": "\(databasePath)"])
    }

    /// The system's wall clock in milliseconds.
    public static let systemNow: @Sendable () -> Timestamp = {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Timestamp(millisecondsSince1970: Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000)
    }

    /// Creates the database file 0600 before SQLite does, because SQLite would create it with
    /// the process umask (often 0644) and then give the same mode to `-wal` and `-shm`.
    private static func prepareDatabaseFile(_ path: String, logger: Logger) throws {
        let fd = POSIXFile.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw POSIXFile.error(.fileSystem, "cannot open \(path)", errno: errno) }
        defer { POSIXFile.closeDescriptor(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw POSIXFile.error(.fileSystem, "cannot stat \(path)", errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw StorageError(code: .fileSystem, message: "\(path) is not a regular file")
        }
        if info.st_mode & 0o077 != 0 {
            logger.warning(
                "credential database was accessible to group or others; restricting it to its owner",
                metadata: ["path": "\(path)", "mode": "\(KeyringLoader.octal(info.st_mode & 0o7777))"]
            )
            if fchmod(fd, info.st_mode & 0o700) != 0 {
                throw POSIXFile.error(.fileSystem, "cannot chmod \(path)", errno: errno)
            }
        }
        if info.st_size == 0 {
            // New (or never written): make its directory entry durable like any other write.
            try POSIXFile.fsyncDirectory(POSIXFile.directory(of: path), code: .fileSystem)
        }
    }

    /// A cipher over the current keyring.
    var cipher: CredentialCipher { CredentialCipher(keyring: keyringBox.withLock { $0 }) }

    func replaceKeyring(_ keyring: Keyring) { keyringBox.withLock { $0 = keyring } }

    // MARK: - Access helpers

    /// Marks the store closed; returns whether it already was.
    func markClosed() -> Bool {
        isClosed.withLock { closed in
            defer { closed = true }
            return closed
        }
    }

    /// Whether ``close()`` has been called.
    var isClosedNow: Bool { isClosed.withLock { $0 } }

    private func checkOpen() throws {
        if isClosed.withLock({ $0 }) {
            throw StorageError(code: .closed, message: "the credential store \(databasePath) is closed")
        }
    }

    static func storageError(_ error: any Error, _ what: String) -> any Error {
        switch error {
        case let error as StorageError: error
        case let error as CancellationError: error
        // GRDB's description shows the SQL but never the bound arguments (tokens are only ever
        // bound, and `publicStatementArguments` stays off).
        case let error: StorageError(code: .database, message: what, underlying: error)
        }
    }

    /// Runs `body` in a write transaction on the writer connection and returns after the commit.
    ///
    /// - Writes go through ``GroupCommit``: writes submitted together commit together, so a
    ///   storm of grants pays one transaction and one fsync per group. `grouping` lets a write
    ///   wait that long for company (for results nobody waits for).
    /// - `singleChange`: the body's only change to the database is one statement, made last
    ///   (a compare-and-swap `UPDATE`, an `INSERT`, a `DELETE`), so it needs no savepoint of
    ///   its own in the group (see ``GroupCommit/Member/savepoint``). Bodies that change several
    ///   rows in several statements pass `false`.
    /// - `durable` (the default): the commit is fsynced (`synchronous=FULL`) before this returns.
    ///   `false` commits with `synchronous=NORMAL` unless a durable write shares the group: the
    ///   commit survives the process dying at once (it is in the WAL, in the kernel's page
    ///   cache) and becomes durable with the next durable commit, but not power loss before
    ///   that. Only ``beginGrant(userIdentifier:startedAt:grouping:shouldStart:)`` uses it (see
    ///   there why that is enough).
    /// - The write cannot be cancelled by the caller: once submitted, it commits (or fails on its
    ///   own). Otherwise a shutdown arriving while a freshly rotated refresh token is being stored
    ///   could roll the write back after the old refresh token was already spent at the provider.
    /// - The caller is resumed straight from the writer's queue: one hop there and one back.
    func write<T: Sendable>(
        _ what: @autoclosure () -> String, durable: Bool = true, grouping: Duration = .zero, singleChange: Bool,
        _ body: @escaping @Sendable (Database) throws -> T
    ) async throws -> T {
        try checkOpen()
        let groupCommit = groupCommit
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                groupCommit.submit(
                    GroupCommit.member(durable: durable, savepoint: !singleChange, body: body, continuation: continuation),
                    grouping: grouping
                )
            }
        } catch {
            throw Self.storageError(error, "cannot \(what())")
        }
    }

    /// Runs `body` in a read transaction (a snapshot that sees every committed write).
    func read<T: Sendable>(_ what: @autoclosure () -> String, _ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try checkOpen()
        do {
            return try await pool.read(body)
        } catch {
            throw Self.storageError(error, "cannot \(what())")
        }
    }

    /// Explains why a compare-and-swap `UPDATE` changed nothing.
    static func compareAndSwapFailure(_ db: Database, _ userIdentifier: String, expected: Int64) throws -> StorageError {
        let stored = try Int64.fetchOne(
            db,
            sql: "SELECT generation FROM credentials WHERE user_identifier = ?",
            arguments: [userIdentifier]
        )
        guard let stored else {
            return StorageError(code: .notFound, message: "no credential for '\(userIdentifier)'")
        }
        return StorageError(
            code: .conflict,
            message: "credential '\(userIdentifier)' was changed by another writer (stored generation \(stored), "
                + "expected \(expected))"
        )
    }
}
