import Foundation
import GRDB
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What a node remembers of the shared store, in its state directory (`shared-store.sqlite`),
/// outside the database that an attacker with write access to the store can change:
///
/// - the store's ``SharedStoreRecord`` (its id, the newest schema version seen), authenticated
///   with the master key;
/// - per credential, the newest generation the node has read or written (its ``Floor``), and
///   whether it saw the credential removed after that: an older row is a rollback.
///
/// A floor is durable before the row it protects is served or a write of it acknowledged
/// (``raise(_:)`` returns once it is on disk), so that a kill at any moment cannot let an older
/// row in after the node starts again. Floors raised at the same time share one transaction
/// and one fsync.
///
/// The floors are not authenticated one by one: the file lives in the state directory, which
/// only root and tokend's user can write, both of which can read the master key too.
public final class SharedStoreMemory: Sendable {
    /// The newest version of a credential a node has seen.
    public struct Floor: Sendable, Hashable, CustomStringConvertible {
        /// The newest generation read or written.
        public var generation: Int64
        /// Whether the credential was then seen removed: a row at `generation` itself is refused too.
        public var removed: Bool

        public init(generation: Int64, removed: Bool = false) {
            self.generation = generation
            self.removed = removed
        }

        /// Whether a row at `generation` is older than this floor allows (rolled back).
        public func refuses(_ generation: Int64) -> Bool { generation < self.generation || (removed && generation == self.generation) }

        /// Whether this floor is higher than `other`.
        func isAbove(_ other: Floor) -> Bool {
            generation > other.generation || (generation == other.generation && removed && !other.removed)
        }

        public var description: String { removed ? "\(generation) (removed)" : "\(generation)" }
    }

    /// The record as read when the memory was opened.
    public enum Record: Sendable, Equatable {
        /// The node has never recorded a store.
        case none
        case known(SharedStoreRecord)
        /// There is a record, but it does not authenticate (or names a key not in the keyring).
        case unreadable(String)
    }

    /// The file's name in the state directory.
    public static let fileName = "shared-store.sqlite"

    /// The file, or nil for a memory that is not kept (tests).
    public let path: String?
    private let queue: DatabaseQueue
    private let state = Mutex(State())
    private let recordBox: Mutex<Record>

    private struct State {
        var floors: [String: Floor] = [:]
        /// Raised in memory, not yet handed to the writer.
        var pending: [String: Floor] = [:]
        /// Whether a floor in ``pending`` must be fsynced before its raise returns.
        var pendingSync = false
        /// Floors not yet durable, by user, with the batch that writes (or wrote, and failed) them.
        var undurable: [String: Int] = [:]
        /// The batch that ``pending`` will be written in.
        var nextBatch = 1
        /// The last batch the writer finished, with or without success.
        var finishedBatch = 0
        var writing = false
        var waiters: [(batch: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    /// Opens (creating if needed) the memory at `path`, or one in memory only.
    ///
    /// - Throws: ``StorageError`` `.fileSystem` or `.database` if the file cannot be created
    ///   or read.
    public init(path: String?, keyring: Keyring) throws {
        self.path = path
        do {
            if let path {
                try Self.createPrivately(path)
                var configuration = Configuration()
                configuration.label = "tokend.shared-store-memory"
                configuration.journalMode = .wal
                queue = try DatabaseQueue(path: path, configuration: configuration)
            } else {
                queue = try DatabaseQueue()
            }
            // GRDB lowers it with WAL; a floor must be on disk when the write returns.
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA synchronous = FULL")
                guard try Int.fetchOne(db, sql: "PRAGMA synchronous") == 2 else {
                    throw StorageError(code: .database, message: "SQLite refused PRAGMA synchronous = FULL")
                }
            }
            let (record, floors) = try queue.write { db -> (Record, [String: Floor]) in
                try db.execute(
                    sql: """
                        CREATE TABLE IF NOT EXISTS record (
                            id INTEGER PRIMARY KEY CHECK (id = 1), store_id TEXT NOT NULL, schema_version INTEGER NOT NULL,
                            tag BLOB NOT NULL);
                        CREATE TABLE IF NOT EXISTS floors (
                            user_identifier TEXT PRIMARY KEY, generation INTEGER NOT NULL, removed INTEGER NOT NULL DEFAULT 0
                        ) WITHOUT ROWID;
                        """)
                var record = Record.none
                if let row = try Row.fetchOne(db, sql: "SELECT store_id, schema_version, tag FROM record") {
                    let tag: [UInt8] = Array((row["tag"] as Data?) ?? Data())
                    do {
                        record = .known(
                            try SharedStoreRecord.verified(
                                storeID: row["store_id"], schemaVersion: row["schema_version"], tag: tag, keyring: keyring))
                    } catch {
                        record = .unreadable("\(error)")
                    }
                }
                var floors: [String: Floor] = [:]
                let cursor = try Row.fetchCursor(db, sql: "SELECT user_identifier, generation, removed FROM floors")
                while let row = try cursor.next() {
                    floors[row[0]] = Floor(generation: row[1], removed: row[2])
                }
                return (record, floors)
            }
            recordBox = Mutex(record)
            state.withLock { $0.floors = floors }
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError(code: .database, message: "cannot open \(path ?? "the shared store's memory")", underlying: error)
        }
    }

    /// The record read at open, or written since.
    public var record: Record { recordBox.withLock { $0 } }

    /// The floor of `user`, if the node has seen it.
    public func floor(of user: String) -> Floor? { state.withLock { $0.floors[user] } }

    /// Every floor.
    public func floors() -> [String: Floor] { state.withLock { $0.floors } }

    /// The highest generation of any floor, or nil when there is none.
    public func highestGeneration() -> Int64? { state.withLock { $0.floors.values.map(\.generation).max() } }

    /// Raises floors (a floor never goes down) and returns once every floor at least as high as
    /// those asked for is written: at once if they already were.
    ///
    /// - Parameter synced: whether the write must reach the disk (fsync) before this returns.
    ///   Without, it is committed to the file and so survives the process being killed, and
    ///   reaches the disk with the next synced write, but a power failure before that may lose
    ///   it (SQLite's `synchronous=NORMAL` in WAL mode).
    /// - Throws: ``StorageError`` `.database` if they could not be written; they stay raised in
    ///   memory, and the next raise of the same credential writes them again.
    public func raise(_ changes: [String: Floor], synced: Bool = true) async throws {
        if changes.isEmpty { return }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            enum Action { case done, wait, startWriter }
            let action = state.withLock { state -> Action in
                var batch: Int?
                for (user, floor) in changes {
                    if let current = state.floors[user], !floor.isAbove(current) {
                        guard let written = state.undurable[user] else { continue }
                        if written > state.finishedBatch {
                            batch = max(batch ?? 0, written)
                            continue
                        }
                        // Its batch failed: write it again, synced.
                        state.pending[user] = current
                        state.pendingSync = true
                    } else {
                        state.floors[user] = floor
                        state.pending[user] = floor
                    }
                    state.undurable[user] = state.nextBatch
                    batch = state.nextBatch
                }
                guard let batch else { return .done }
                if synced { state.pendingSync = true }
                state.waiters.append((batch, continuation))
                guard !state.writing, !state.pending.isEmpty else { return .wait }
                state.writing = true
                return .startWriter
            }
            switch action {
            case .done: continuation.resume()
            case .wait: break
            case .startWriter: queue.asyncWriteWithoutTransaction { db in self.writePending(db) }
            }
        }
    }

    /// On the writer: writes batches until nothing is pending (every pending floor has a waiter).
    private func writePending(_ db: Database) {
        while true {
            let next = state.withLock { state -> (batch: Int, floors: [String: Floor], sync: Bool)? in
                guard !state.pending.isEmpty else {
                    state.writing = false
                    return nil
                }
                defer {
                    state.pending = [:]
                    state.pendingSync = false
                    state.nextBatch += 1
                }
                return (state.nextBatch, state.pending, state.pendingSync)
            }
            guard let (batch, floors, sync) = next else { return }
            var failure: (any Error)?
            do {
                // Per batch, so that no level outlives the batch that wanted it.
                try db.execute(sql: sync ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL")
                try db.inTransaction {
                    let statement = try db.cachedStatement(
                        sql: """
                            INSERT INTO floors (user_identifier, generation, removed) VALUES (?, ?, ?)
                            ON CONFLICT (user_identifier) DO UPDATE SET generation = excluded.generation, removed = excluded.removed
                            WHERE excluded.generation > floors.generation
                               OR (excluded.generation = floors.generation AND excluded.removed > floors.removed)
                            """)
                    // In key order: a node's first start writes a floor for every credential, and
                    // a million upserts into the key's B-tree take a quarter of the time in order
                    // that they take at random (4 s against 17 s here).
                    let ordered = floors.count > 1_000 ? floors.sorted { $0.key < $1.key } : Array(floors)
                    for (user, floor) in ordered { try statement.execute(arguments: [user, floor.generation, floor.removed]) }
                    return .commit
                }
            } catch {
                failure = StorageError(
                    code: .database, message: "cannot save the generations this node has seen in \(path ?? "memory")", underlying: error)
            }
            let ready = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
                state.finishedBatch = batch
                if failure == nil { state.undurable = state.undurable.filter { $0.value > batch } }
                let ready = state.waiters.filter { $0.batch <= batch }.map(\.continuation)
                state.waiters.removeAll { $0.batch <= batch }
                return ready
            }
            for continuation in ready {
                if let failure { continuation.resume(throwing: failure) } else { continuation.resume() }
            }
        }
    }

    /// Records the store this node serves, durably.
    public func remember(_ record: SharedStoreRecord, keyring: Keyring) throws {
        do {
            try queue.write { db in
                try db.execute(
                    sql: "INSERT OR REPLACE INTO record (id, store_id, schema_version, tag) VALUES (1, ?, ?, ?)",
                    arguments: [record.storeID, record.schemaVersion, Data(record.tag(keyring: keyring))])
            }
        } catch {
            throw StorageError(code: .database, message: "cannot record the shared store in \(path ?? "memory")", underlying: error)
        }
        recordBox.withLock { $0 = .known(record) }
    }

    /// Replaces every floor (an administrator adopted the store as it is), durably.
    public func replaceFloors(with floors: [String: Floor]) throws {
        do {
            try queue.write { db in
                try db.execute(sql: "DELETE FROM floors")
                let statement = try db.makeStatement(sql: "INSERT INTO floors (user_identifier, generation, removed) VALUES (?, ?, ?)")
                for (user, floor) in floors { try statement.execute(arguments: [user, floor.generation, floor.removed]) }
            }
        } catch {
            throw StorageError(
                code: .database, message: "cannot save the generations this node has seen in \(path ?? "memory")", underlying: error)
        }
        state.withLock { state in
            state.floors = floors
            state.pending = [:]
            state.undurable = [:]
        }
    }

    /// Creates the file 0600 before SQLite does (SQLite would follow the umask, and give its
    /// `-wal` and `-shm` files the same mode); never through a symbolic link.
    private static func createPrivately(_ path: String) throws {
        let fd = POSIXFile.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw POSIXFile.error(.fileSystem, "cannot open \(path)", errno: errno) }
        defer { POSIXFile.closeDescriptor(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw POSIXFile.error(.fileSystem, "cannot stat \(path)", errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else {
            throw StorageError(code: .fileSystem, message: "\(path) is not a regular file of tokend's user")
        }
        if info.st_mode & 0o077 != 0, fchmod(fd, 0o600) != 0 {
            throw POSIXFile.error(.fileSystem, "cannot chmod \(path)", errno: errno)
        }
        if info.st_size == 0 { try POSIXFile.fsyncDirectory(POSIXFile.directory(of: path), code: .fileSystem) }
    }
}
