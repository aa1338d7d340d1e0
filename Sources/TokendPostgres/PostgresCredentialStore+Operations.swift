import Foundation
import NIOCore
import PostgresNIO
import TokendCore
import TokendStorage

extension PostgresCredentialStore {
    public func loadAll() async throws -> [Credential] {
        let cipher = cipher
        let logger = logger
        return try await run("load credentials") { client in
            var credentials: [Credential] = []
            let rows = try await client.query(
                PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials ORDER BY user_identifier"), logger: logger
            )
            for try await row in rows { credentials.append(try Self.credential(from: row, cipher: cipher)) }
            return credentials
        }
    }

    public func load(userIdentifier: String) async throws -> Credential? {
        let cipher = cipher
        let logger = logger
        return try await run("load credential '\(userIdentifier)'") { client in
            var query = PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials WHERE user_identifier = $1")
            try query.binds.append(userIdentifier)
            var found: Credential?
            for try await row in try await client.query(query, logger: logger) { found = try Self.credential(from: row, cipher: cipher) }
            return found
        }
    }

    /// Every credential's generation, by user identifier (the periodic reconciliation).
    public func generations() async throws -> [String: Int64] {
        let logger = logger
        return try await run("list generations") { client in
            var result: [String: Int64] = [:]
            for try await (user, generation) in try await client.query(
                "SELECT user_identifier, generation FROM tokend_credentials", logger: logger
            ).decode((String, Int64).self) {
                result[user] = generation
            }
            return result
        }
    }

    public func insert(_ credential: Credential, replacing: Bool) async throws -> Credential {
        let columns =
            [("user_identifier", ColumnValue.text(credential.userIdentifier))] + (try Self.columnValues(credential, cipher: cipher))
        let names = columns.map(\.0) + ["generation", "updated_at"]
        var values = columns.indices.map { "$\($0 + 1)" }
        values += ["nextval('tokend_generation')", "tokend_now_ms()"]
        var sql = "INSERT INTO tokend_credentials (\(names.joined(separator: ", "))) VALUES (\(values.joined(separator: ", "))) "
        if replacing {
            sql +=
                "ON CONFLICT (user_identifier) DO UPDATE SET "
                + names.dropFirst().map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", ")
        } else {
            sql += "ON CONFLICT (user_identifier) DO NOTHING"
        }
        sql += " RETURNING generation"
        var query = PostgresQuery(unsafeSQL: sql)
        for (_, value) in columns { try value.append(to: &query.binds) }
        let logger = logger
        let user = credential.userIdentifier
        let generation: Int64? = try await run("store credential '\(user)'") { [query] client in
            var generation: Int64?
            for try await value in try await client.query(query, logger: logger).decode(Int64.self) { generation = value }
            return generation
        }
        guard let generation else {
            throw StorageError(code: .alreadyExists, message: "a credential for '\(user)' already exists")
        }
        var stored = credential
        stored.generation = generation
        return stored
    }

    public func update(_ credential: Credential, expectedGeneration: Int64) async throws -> Credential {
        let columns = try Self.columnValues(credential, cipher: cipher)
        let generation = try await compareAndSwap(credential.userIdentifier, expectedGeneration, columns, what: "update credential")
        var stored = credential
        stored.generation = generation
        return stored
    }

    @discardableResult
    public func updateStatus(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64 {
        try await compareAndSwap(userIdentifier, expectedGeneration, Self.statusValues(status), what: "update the status of credential")
    }

    /// `UPDATE … WHERE generation = expected`, fenced by this node's lease on the credential if
    /// it holds one; throws `.conflict` or `.notFound` when no row matched.
    private func compareAndSwap(
        _ user: String, _ expectedGeneration: Int64, _ columns: [(String, ColumnValue)], what: String
    ) async throws -> Int64 {
        let fence = leaseBook.withLock { $0[user] }
        let count = columns.count
        let assignments = columns.enumerated().map { "\($0.element.0) = $\($0.offset + 1)" }
        let sql = """
            UPDATE tokend_credentials SET \(assignments.joined(separator: ", ")),
                generation = nextval('tokend_generation'), updated_at = tokend_now_ms()
            WHERE user_identifier = $\(count + 1) AND generation = $\(count + 2)
              AND ($\(count + 3)::bigint IS NULL OR EXISTS (
                  SELECT 1 FROM tokend_leases l
                  WHERE l.user_identifier = $\(count + 1) AND l.holder = $\(count + 4) AND l.fencing = $\(count + 3)))
            RETURNING generation
            """
        var query = PostgresQuery(unsafeSQL: sql)
        for (_, value) in columns { try value.append(to: &query.binds) }
        try query.binds.append(user)
        try query.binds.append(expectedGeneration)
        try query.binds.append(fence)
        try query.binds.append(settings.nodeName)
        let logger = logger
        let node = settings.nodeName
        return try await run("\(what) '\(user)'") { [query] client in
            var generation: Int64?
            for try await value in try await client.query(query, logger: logger).decode(Int64.self) { generation = value }
            if let generation { return generation }
            // Explain the miss: gone, moved on, or our lease was taken over.
            var stored: Int64?
            for try await value in try await client.query(
                "SELECT generation FROM tokend_credentials WHERE user_identifier = \(user)", logger: logger
            ).decode(Int64.self) {
                stored = value
            }
            guard let stored else { throw StorageError(code: .notFound, message: "no credential for '\(user)'") }
            if stored == expectedGeneration, let fence {
                throw StorageError(
                    code: .conflict,
                    message: "node \(node) no longer holds the refresh lease of '\(user)' (fencing \(fence)); "
                        + "another node took it over, so this result is discarded"
                )
            }
            throw StorageError(
                code: .conflict,
                message: "credential '\(user)' was changed by another writer (stored generation \(stored), expected \(expectedGeneration))"
            )
        }
    }

    @discardableResult
    public func remove(userIdentifier: String) async throws -> Bool {
        let logger = logger
        return try await run("remove credential '\(userIdentifier)'") { client in
            var removed = false
            for try await _ in try await client.query(
                "DELETE FROM tokend_credentials WHERE user_identifier = \(userIdentifier) RETURNING generation", logger: logger
            ).decode(Int64.self) {
                removed = true
            }
            return removed
        }
    }

    public func keyIDsInUse() async throws -> Set<String> {
        let logger = logger
        return try await run("list the keys in use") { client in
            var ids = Set<String>()
            for try await id in try await client.query(
                """
                SELECT encode(substring(access_token FROM 2 FOR 8), 'hex') FROM tokend_credentials
                UNION
                SELECT encode(substring(refresh_token FROM 2 FOR 8), 'hex') FROM tokend_credentials WHERE refresh_token IS NOT NULL
                UNION
                SELECT encode(substring(dpop_key FROM 2 FOR 8), 'hex') FROM tokend_credentials WHERE dpop_key IS NOT NULL
                UNION
                SELECT encode(substring(narrowed_tokens FROM 2 FOR 8), 'hex') FROM tokend_credentials
                WHERE narrowed_tokens IS NOT NULL
                """, logger: logger
            ).decode(String.self) {
                ids.insert(id)
            }
            return ids
        }
    }

    public func reencrypt(under keyring: Keyring) async throws -> Int {
        replaceKeyring(keyring)
        let currentID = keyring.current.id
        let logger = logger
        var total = 0
        // Bounded: each pass re-seals up to 100 rows that are not under the current key, and a
        // pass that finds fewer ends the loop.
        for _ in 0..<1_000_000 {
            let cipher = cipher
            let count: Int = try await run("re-encrypt credentials") { client in
                try await client.withTransaction(logger: logger) { connection -> Int in
                    var rows: [Credential] = []
                    for try await row in try await connection.query(
                        PostgresQuery(
                            unsafeSQL: """
                                SELECT \(Self.selectColumns) FROM tokend_credentials
                                WHERE encode(substring(access_token FROM 2 FOR 8), 'hex') <> $1
                                   OR (refresh_token IS NOT NULL AND encode(substring(refresh_token FROM 2 FOR 8), 'hex') <> $1)
                                   OR (dpop_key IS NOT NULL AND encode(substring(dpop_key FROM 2 FOR 8), 'hex') <> $1)
                                   OR (narrowed_tokens IS NOT NULL
                                       AND encode(substring(narrowed_tokens FROM 2 FOR 8), 'hex') <> $1)
                                ORDER BY user_identifier LIMIT 100 FOR UPDATE
                                """,
                            binds: {
                                var binds = PostgresBindings()
                                try? binds.append(currentID)
                                return binds
                            }()
                        ), logger: logger
                    ) {
                        rows.append(try Self.credential(from: row, cipher: cipher))
                    }
                    for credential in rows {
                        // Same content, so the generation stays (see CredentialStore.reencrypt).
                        let values = try Self.columnValues(credential, cipher: cipher).filter {
                            ["salt", "access_token", "refresh_token", "dpop_key", "narrowed_tokens"].contains($0.0)
                        }
                        var query = PostgresQuery(
                            unsafeSQL: """
                                UPDATE tokend_credentials SET salt = $1, access_token = $2, refresh_token = $3, dpop_key = $4,
                                    narrowed_tokens = $5
                                WHERE user_identifier = $6
                                """
                        )
                        for (_, value) in values { try value.append(to: &query.binds) }
                        try query.binds.append(credential.userIdentifier)
                        try await connection.query(query, logger: logger).collect()
                    }
                    return rows.count
                }
            }
            total += count
            if count < 100 { break }
        }
        if total > 0 { logger.info("re-encrypted credentials", metadata: ["count": "\(total)", "key": "\(keyring.current.id)"]) }
        return total
    }
}
