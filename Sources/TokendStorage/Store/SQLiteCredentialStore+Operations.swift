import Foundation
import GRDB
import TokendCore

extension SQLiteCredentialStore {
    public func loadAll() async throws -> [Credential] {
        try await read("load credentials") { db in
            let cipher = self.cipher
            return try Row.fetchAll(db, sql: "SELECT \(Self.rowColumnList) FROM credentials ORDER BY user_identifier").map {
                try Self.credential(from: $0, cipher: cipher)
            }
        }
    }

    public func load(userIdentifier: String) async throws -> Credential? {
        try await read("load credential '\(userIdentifier)'") { db in
            try Self.fetchCredential(db, userIdentifier, cipher: self.cipher)
        }
    }

    static func fetchCredential(_ db: Database, _ userIdentifier: String, cipher: CredentialCipher) throws -> Credential? {
        let statement = try db.cachedStatement(sql: selectRowSQL)
        return try Row.fetchOne(statement, arguments: [userIdentifier]).map { try credential(from: $0, cipher: cipher) }
    }

    public func beginGrant(
        userIdentifier: String, startedAt: Timestamp, grouping: Duration, shouldStart: @escaping @Sendable (Credential) -> Bool
    ) async throws -> GrantStart? {
        let updatedAt = now()
        // One transaction instead of a read and a write; committed without an fsync (see the
        // protocol for why the marker needs to survive the process, not a power cut).
        return try await write("start a grant for credential '\(userIdentifier)'", durable: false, grouping: grouping, singleChange: true) {
            db in
            guard var credential = try Self.fetchCredential(db, userIdentifier, cipher: self.cipher) else { return nil }
            guard shouldStart(credential) else { return .declined(credential) }
            credential.status.state = .refreshing
            credential.status.grantStartedAt = startedAt
            let generation = try self.generations.next(db)
            try Self.compareAndSwap(
                db, Self.updateStatusSQL, userIdentifier, credential.generation,
                Self.statusValues(credential.status) + [generation, updatedAt.millisecondsSince1970]
            )
            credential.generation = generation
            return .started(credential)
        }
    }

    public func insert(_ credential: Credential, replacing: Bool) async throws -> Credential {
        try await insert(credential, replacing: replacing, expecting: nil)
    }

    public func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation) async throws -> Credential {
        try await insert(credential, replacing: replacing, expecting: Optional(expecting))
    }

    private func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation?) async throws -> Credential {
        let updatedAt = now()
        return try await write("store credential '\(credential.userIdentifier)'", singleChange: true) { db in
            let current = try Int64.fetchOne(
                db, sql: "SELECT generation FROM credentials WHERE user_identifier = ?", arguments: [credential.userIdentifier])
            let exists = current != nil
            if let expecting, expecting != StoredRowExpectation(seen: current) {
                throw StorageError(
                    code: .conflict,
                    message: "credential '\(credential.userIdentifier)' is not as the caller last saw it (stored generation "
                        + "\(current.map(String.init) ?? "none"))")
            }
            if exists && !replacing {
                throw StorageError(
                    code: .alreadyExists,
                    message: "a credential for '\(credential.userIdentifier)' already exists"
                )
            }
            let generation = try self.generations.next(db)
            let sealed = try Self.seal(credential, cipher: self.cipher)
            let values: [(any DatabaseValueConvertible)?] =
                [credential.userIdentifier] + Self.columnValues(credential, sealed: sealed, generation: generation, updatedAt: updatedAt)
            try db.cachedStatement(sql: Self.insertRowSQL).execute(arguments: StatementArguments(values))
            var stored = credential
            stored.generation = generation
            return stored
        }
    }

    public func update(_ credential: Credential, expectedGeneration: Int64) async throws -> Credential {
        try await update(credential, expectedGeneration: expectedGeneration, grouping: .zero)
    }

    public func update(_ credential: Credential, expectedGeneration: Int64, grouping: Duration) async throws -> Credential {
        let updatedAt = now()
        return try await write("update credential '\(credential.userIdentifier)'", grouping: grouping, singleChange: true) { db in
            let generation = try self.generations.next(db)
            let sealed = try Self.seal(credential, cipher: self.cipher)
            try Self.compareAndSwap(
                db, Self.updateRowSQL, credential.userIdentifier, expectedGeneration,
                Self.columnValues(credential, sealed: sealed, generation: generation, updatedAt: updatedAt)
            )
            var stored = credential
            stored.generation = generation
            return stored
        }
    }

    @discardableResult
    public func updateStatus(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws
        -> Int64
    {
        let updatedAt = now()
        return try await write("update the status of credential '\(userIdentifier)'", singleChange: true) { db in
            let generation = try self.generations.next(db)
            try Self.compareAndSwap(
                db, Self.updateStatusSQL, userIdentifier, expectedGeneration,
                Self.statusValues(status) + [generation, updatedAt.millisecondsSince1970]
            )
            return generation
        }
    }

    /// `UPDATE … WHERE user_identifier = ? AND generation = ?`, throwing `.conflict` or
    /// `.notFound` if no row matched (having changed nothing; the generation it drew is skipped).
    private static func compareAndSwap(
        _ db: Database,
        _ sql: String,
        _ userIdentifier: String,
        _ expectedGeneration: Int64,
        _ values: [(any DatabaseValueConvertible)?]
    ) throws {
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(values + [userIdentifier, expectedGeneration]))
        if db.changesCount == 0 {
            throw try compareAndSwapFailure(db, userIdentifier, expected: expectedGeneration)
        }
    }

    @discardableResult
    public func remove(userIdentifier: String) async throws -> Bool {
        try await write("remove credential '\(userIdentifier)'", singleChange: true) { db in
            try db.execute(sql: "DELETE FROM credentials WHERE user_identifier = ?", arguments: [userIdentifier])
            return db.changesCount > 0
        }
    }

    public func remove(userIdentifier: String, expectedGeneration: Int64) async throws -> Bool {
        try await write("remove credential '\(userIdentifier)'", singleChange: true) { db in
            let stored = try Int64.fetchOne(
                db, sql: "SELECT generation FROM credentials WHERE user_identifier = ?", arguments: [userIdentifier])
            guard let stored else { return false }
            guard stored == expectedGeneration else {
                throw StorageError(
                    code: .conflict,
                    message: "credential '\(userIdentifier)' was changed by another writer (stored generation \(stored), "
                        + "expected \(expectedGeneration))")
            }
            try db.execute(sql: "DELETE FROM credentials WHERE user_identifier = ?", arguments: [userIdentifier])
            return db.changesCount > 0
        }
    }

    public func keyIDsInUse() async throws -> Set<String> {
        try await read("list the keys in use") { db in
            // Each blob names its key in bytes 2…9 (SQLite's substr counts from 1). The distinct
            // values are walked in order through the expression indexes (schema v2): one probe
            // per key in use, however many rows there are.
            var ids = Set<String>()
            for column in ["access_token", "refresh_token", "dpop_key", "narrowed_tokens"] {
                let key = "substr(\(column), 2, 8)"
                var last = Data()
                for _ in 0..<100_000 {
                    guard
                        let next = try Data.fetchOne(
                            db, sql: "SELECT min(\(key)) FROM credentials WHERE \(key) > ?", arguments: [last]
                        )
                    else { break }
                    ids.insert(MasterKey.hex(next))
                    last = next
                }
            }
            return ids
        }
    }

    public func reencrypt(under keyring: Keyring) async throws -> Int {
        // Switch first: from here on every write seals under the new key, so the loop below
        // cannot miss a row written concurrently.
        replaceKeyring(keyring)
        let currentID = Data(keyring.current.idBytes)
        let batchSize = configuration.reencryptBatchSize
        var total = 0
        while true {
            let count = try await write("re-encrypt credentials", singleChange: false) { db in
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT \(Self.rowColumnList) FROM credentials
                        WHERE substr(access_token, 2, 8) != ?1
                           OR (refresh_token IS NOT NULL AND substr(refresh_token, 2, 8) != ?1)
                           OR (dpop_key IS NOT NULL AND substr(dpop_key, 2, 8) != ?1)
                           OR (narrowed_tokens IS NOT NULL AND substr(narrowed_tokens, 2, 8) != ?1)
                        ORDER BY user_identifier LIMIT ?2
                        """,
                    arguments: [currentID, batchSize]
                )
                let cipher = self.cipher
                for row in rows {
                    let credential = try Self.credential(from: row, cipher: cipher)
                    let sealed = try Self.seal(credential, cipher: cipher)
                    // Same content, so the generation stays: a compare-and-swap based on it
                    // must still succeed after a rotation.
                    try db.execute(
                        sql: """
                            UPDATE credentials SET salt = ?, access_token = ?, refresh_token = ?, dpop_key = ?,
                                narrowed_tokens = ?
                            WHERE user_identifier = ?
                            """,
                        arguments: [
                            Data(sealed.salt), Data(sealed.accessToken), sealed.refreshToken.map { Data($0) },
                            sealed.dpopKey.map { Data($0) }, sealed.narrowedTokens.map { Data($0) }, credential.userIdentifier,
                        ]
                    )
                }
                return rows.count
            }
            total += count
            if count > 0 {
                logger.info(
                    "re-encrypted credentials",
                    metadata: ["count": "\(total)", "key": "\(keyring.current.id)"]
                )
            }
            if count < batchSize { break }
        }
        if total > 0 { await truncateWAL() }
        return total
    }

    /// Checkpoints and truncates the WAL so that ciphertexts under a retired key do not linger in
    /// it. Best effort: a concurrent reader can make the checkpoint partial, which is harmless.
    func truncateWAL() async {
        try? await pool.writeWithoutTransaction { db in
            _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    public func close() async throws {
        // Mark closed first so no new call starts; GRDB waits for the ones in progress.
        if markClosed() { return }
        do {
            try pool.close()
        } catch {
            throw Self.storageError(error, "cannot close the credential database \(databasePath)")
        }
    }
}
