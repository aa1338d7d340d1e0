import NIOCore
import PostgresNIO
import TokendCore
import TokendStorage

extension PostgresCredentialStore {
    /// Stores many new credentials, a batch per transaction (benchmark fixtures: a fleet's store
    /// of a million credentials in about a minute). Each row is sealed, tagged and given its own
    /// generation from the store's sequence exactly as ``insert(_:replacing:)`` would, so the
    /// result is indistinguishable from one insert per credential; only the round trips are
    /// saved. Floors are raised as for any insert; the rows' digests are not kept in memory (a
    /// status-only write reads its row first).
    ///
    /// - Parameters:
    ///   - credentials: The credentials; their `generation` is ignored.
    ///   - batchSize: Credentials per transaction, 1…2,000 (a statement binds at most 65,535
    ///     values, 29 per row).
    /// - Returns: How many were stored.
    /// - Throws: ``StorageError`` `.alreadyExists` (and nothing of that batch is written) if one
    ///   exists already; `.database` as any write.
    @discardableResult
    public func insertBulk(_ credentials: [Credential], batchSize: Int = 1_000) async throws -> Int {
        try checkNotHeld()
        let size = min(max(1, batchSize), 2_000)
        let store = storeID
        let logger = logger
        var stored = 0
        var start = 0
        // Bounded by the count: each pass stores at least one credential.
        while start < credentials.count {
            let batch = Array(credentials[start..<min(start + size, credentials.count)])
            let cipher = cipher
            let rows = try batch.map { credential in
                let values = try Self.columnValues(credential, cipher: cipher)
                return (credential.userIdentifier, values, RowAuthenticity(values))
            }
            let names = ["user_identifier"] + Self.contentColumns.map(\.0) + Self.reloginColumns.map(\.0) + Self.statusColumns.map(\.0)
            let generations: [Int64] = try await run("store \(batch.count) credentials") { client in
                try await client.withTransaction(logger: logger) { connection in
                    var drawn: [Int64] = []
                    drawn.reserveCapacity(rows.count)
                    for try await value in try await connection.query(
                        "SELECT nextval('tokend_generation') FROM generate_series(1, \(rows.count))", logger: logger
                    ).decode(Int64.self) {
                        drawn.append(value)
                    }
                    guard drawn.count == rows.count else {
                        throw StorageError(
                            code: .database, message: "the generation sequence returned \(drawn.count) of \(rows.count) values")
                    }
                    let width = names.count + 2
                    var tuples: [String] = []
                    var query = PostgresQuery(unsafeSQL: "")
                    for (index, (user, values, authenticity)) in rows.enumerated() {
                        let base = index * width
                        tuples.append(
                            "(" + (1...width).map { "$\(base + $0)" }.joined(separator: ", ") + ", tokend_now_ms())")
                        try query.binds.append(user)
                        for (_, value) in values { try value.append(to: &query.binds) }
                        try query.binds.append(drawn[index])
                        try query.binds.append(
                            ByteBuffer(bytes: authenticity.tag(store: store, user, generation: drawn[index], keyring: cipher.keyring)))
                    }
                    query.sql =
                        "INSERT INTO tokend_credentials (\((names + ["generation", "row_mac", "updated_at"]).joined(separator: ", "))) "
                        + "VALUES \(tuples.joined(separator: ", ")) ON CONFLICT (user_identifier) DO NOTHING RETURNING user_identifier"
                    var inserted = 0
                    for try await _ in try await connection.query(query, logger: logger) { inserted += 1 }
                    guard inserted == rows.count else {
                        throw StorageError(code: .alreadyExists, message: "\(rows.count - inserted) of the credentials exist already")
                    }
                    return drawn
                }
            }
            var floors: [String: SharedStoreMemory.Floor] = [:]
            for (index, (user, _, _)) in rows.enumerated() { floors[user] = SharedStoreMemory.Floor(generation: generations[index]) }
            try await keepFloors(floors, synced: false)
            stored += batch.count
            start += batch.count
        }
        return stored
    }
}
