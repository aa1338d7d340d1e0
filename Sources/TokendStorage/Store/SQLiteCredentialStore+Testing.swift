import GRDB

// Hooks for `@testable import` only: they let tests inspect connection settings and damage rows
// on purpose (e.g. move a ciphertext to another row) without the test target importing GRDB.
extension SQLiteCredentialStore {
    /// The value of `PRAGMA name` on the writer connection.
    func pragmaForTesting(_ name: String) async throws -> String? {
        try await pool.writeWithoutTransaction { db in try String.fetchOne(db, sql: "PRAGMA \(name)") }
    }

    /// Runs raw SQL in a write transaction.
    func executeForTesting(_ sql: String) async throws {
        try await pool.write { db in try db.execute(sql: sql) }
    }

    /// The values of one column, as text (`hex()` it in `sql` for blobs), one per row.
    func fetchStringsForTesting(_ sql: String) async throws -> [String] {
        try await pool.read { db in try String.fetchAll(db, sql: sql) }
    }

    /// How many writes are waiting for their group to be committed.
    func waitingWritesForTesting() -> Int { groupCommit.waitingCount }
}
