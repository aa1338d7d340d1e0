import GRDB

extension SQLiteCredentialStore {
    /// Runs `SELECT 1` in a transaction on the writer connection: it queues behind every write
    /// in progress, so it returns only while writes get through.
    public func probeWriter() async throws {
        _ = try await write("probe the writer", singleChange: true) { db in try Int.fetchOne(db, sql: "SELECT 1") }
    }
}
