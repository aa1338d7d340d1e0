import GRDB
import TokendCore

extension SQLiteCredentialStore {
    /// Stores many new credentials in one durable transaction per batch (benchmark fixtures,
    /// migrations). Each credential gets its own salt and generation, exactly as
    /// ``insert(_:replacing:)`` would give it, so the result is indistinguishable from one
    /// insert per credential; only the fsync per credential is saved.
    ///
    /// - Parameters:
    ///   - credentials: The credentials; their `generation` is ignored.
    ///   - batchSize: Credentials per transaction (at least 1).
    /// - Returns: How many were stored.
    /// - Throws: `.alreadyExists` (and nothing of that batch is written) if one exists already.
    @discardableResult
    public func insertBulk(_ credentials: [Credential], batchSize: Int = 10_000) async throws -> Int {
        let updatedAt = now()
        var stored = 0
        var start = 0
        let size = max(1, batchSize)
        while start < credentials.count {
            let batch = Array(credentials[start..<min(start + size, credentials.count)])
            stored += try await write("store \(batch.count) credentials") { db in
                let cipher = self.cipher
                // One range of generations for the batch, handed out in order: the same values
                // one insert per credential would have drawn.
                try db.execute(
                    sql: "UPDATE meta SET value = value + ? WHERE key = 'last_generation'", arguments: [batch.count])
                guard let last = try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'last_generation'") else {
                    throw StorageError(code: .corruptRecord, message: "the meta table has no generation counter")
                }
                var generation = last - Int64(batch.count)
                var statement: Statement?
                for credential in batch {
                    generation += 1
                    let sealed = try Self.seal(credential, cipher: cipher)
                    let columns =
                        [("user_identifier", credential.userIdentifier as (any DatabaseValueConvertible)?)]
                        + (try Self.columnValues(credential, sealed: sealed, generation: generation, updatedAt: updatedAt))
                    if statement == nil {
                        statement = try db.makeStatement(
                            sql: "INSERT INTO credentials (\(columns.map(\.0).joined(separator: ", "))) "
                                + "VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))")
                    }
                    do {
                        try statement!.execute(arguments: StatementArguments(columns.map(\.1)))
                    } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY {
                        throw StorageError(
                            code: .alreadyExists, message: "a credential for '\(credential.userIdentifier)' already exists")
                    }
                }
                return batch.count
            }
            start += size
        }
        return stored
    }
}
