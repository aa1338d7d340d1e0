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
            stored += try await write("store \(batch.count) credentials", singleChange: false) { db in
                let cipher = self.cipher
                // One range of generations for the batch, handed out in order: the same values
                // one insert per credential would have drawn.
                var generation = try self.generations.reserve(db, count: batch.count).lowerBound - 1
                let statement = try db.makeStatement(sql: Self.insertNewRowSQL)
                for credential in batch {
                    generation += 1
                    let sealed = try Self.seal(credential, cipher: cipher)
                    let values: [(any DatabaseValueConvertible)?] =
                        [credential.userIdentifier]
                        + Self.columnValues(credential, sealed: sealed, generation: generation, updatedAt: updatedAt)
                    do {
                        try statement.execute(arguments: StatementArguments(values))
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
