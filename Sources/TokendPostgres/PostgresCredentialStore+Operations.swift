import Foundation
import NIOCore
import PostgresNIO
import TokendCore
import TokendStorage

extension PostgresCredentialStore {
    public func loadAll() async throws -> [Credential] {
        try await readVerified(
            PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials ORDER BY user_identifier"),
            what: "load credentials", skippingRefused: false, users: nil)
    }

    /// Also draws the generation of the credential's next write (``reserve(_:after:next:)``):
    /// a grant reads its credential, then marks it.
    public func load(userIdentifier: String) async throws -> Credential? {
        var query = PostgresQuery(
            unsafeSQL:
                "SELECT \(Self.selectColumns), nextval('tokend_generation') AS reserved_generation FROM tokend_credentials WHERE user_identifier = $1"
        )
        try query.binds.append(userIdentifier)
        return try await readVerified(
            query, what: "load credential '\(userIdentifier)'", skippingRefused: false, users: [userIdentifier], reserving: true
        ).first
    }

    /// One query for all of them; rows refused by their integrity check are reported and left out.
    public func load(userIdentifiers: [String]) async throws -> [Credential] {
        guard !userIdentifiers.isEmpty else { return [] }
        var query = PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials WHERE user_identifier = ANY($1)")
        try query.binds.append(userIdentifiers)
        return try await readVerified(
            query, what: "load \(userIdentifiers.count) credentials", skippingRefused: true, users: userIdentifiers)
    }

    /// Runs a `SELECT` of ``selectColumns`` and returns the rows that pass their integrity
    /// check: authenticated with the master key for this store, and no older than what this
    /// node saw before the read began. A refused row is logged and reported
    /// (``onIntegrityFailure(_:)``), then fails the read or, with `skippingRefused`, is left out.
    ///
    /// The rows' floors are durable before this returns (and so before any of them is served);
    /// a credential this node had seen that the read finds gone is remembered as removed.
    ///
    /// - Parameters:
    ///   - users: the credentials the query selects, or nil for all of them.
    ///   - reserving: the query also selects `reserved_generation`, kept for each row's next write.
    func readVerified(_ query: PostgresQuery, what: String, skippingRefused: Bool, users: [String]?, reserving: Bool = false)
        async throws -> [Credential]
    {
        if isHeld { return [] }
        let cipher = cipher
        let logger = logger
        let store = storeID
        let floors = users.map(floors(of:)) ?? memory.floors()
        let (credentials, present): ([Credential], Set<String>) = try await run(what) { client in
            var credentials: [Credential] = []
            var present: Set<String> = []
            for try await row in try await client.query(query, logger: logger) {
                if let user = try? row.makeRandomAccess()["user_identifier"].decode(String.self) { present.insert(user) }
                do {
                    let credential = try self.admitRow(row, cipher: cipher, store: store, floors: floors)
                    if reserving, let next = try? row.makeRandomAccess()["reserved_generation"].decode(Int64.self) {
                        self.reserve(credential.userIdentifier, after: credential.generation, next: next)
                    }
                    credentials.append(credential)
                } catch let error as StorageError where error.code == .integrity && skippingRefused {
                    continue
                }
            }
            return (credentials, present)
        }
        var raised: [String: SharedStoreMemory.Floor] = [:]
        for credential in credentials { raised[credential.userIdentifier] = SharedStoreMemory.Floor(generation: credential.generation) }
        // `floors` holds exactly the credentials the query selects.
        for (user, floor) in floors where !floor.removed && !present.contains(user) {
            raised[user] = SharedStoreMemory.Floor(generation: floor.generation, removed: true)
        }
        try await keepFloors(raised)
        return credentials
    }

    /// One row through ``verifiedCredential(from:cipher:store:)`` and ``admit(_:generation:contentDigest:salt:floor:)``.
    func admitRow(_ row: PostgresRow, cipher: CredentialCipher, store: String, floors: [String: SharedStoreMemory.Floor]) throws
        -> Credential
    {
        try admitAuthenticatedRow(row, cipher: cipher, store: store, floors: floors).credential
    }

    /// ``admitRow(_:cipher:store:floors:)``, also returning the row's verified authenticity
    /// (content digest and salt) for a write that builds on exactly this row.
    func admitAuthenticatedRow(
        _ row: PostgresRow, cipher: CredentialCipher, store: String, floors: [String: SharedStoreMemory.Floor]
    ) throws -> (credential: Credential, authenticity: RowAuthenticity) {
        let (credential, authenticity): (Credential, RowAuthenticity)
        do {
            (credential, authenticity) = try Self.verifiedCredential(from: row, cipher: cipher, store: store)
        } catch let error as StorageError where error.code == .integrity {
            let cells = row.makeRandomAccess()
            reportIntegrity(
                error, kind: .altered, user: (try? cells["user_identifier"].decode(String.self)) ?? "?",
                generation: try? cells["generation"].decode(Int64.self))
            throw error
        }
        let user = credential.userIdentifier
        try admit(
            user, generation: credential.generation, contentDigest: authenticity.contentDigest, salt: authenticity.salt, floor: floors[user]
        )
        return (credential, authenticity)
    }

    /// The next value of the store's generation sequence: drawn before a write, so that the
    /// row's authentication tag covers the generation it is stored at.
    static func nextGeneration(_ client: PostgresClient, logger: Logger) async throws -> Int64 {
        for try await value in try await client.query("SELECT nextval('tokend_generation')", logger: logger).decode(Int64.self) {
            return value
        }
        throw StorageError(code: .database, message: "the generation sequence returned nothing")
    }

    public func insert(_ credential: Credential, replacing: Bool) async throws -> Credential {
        try await insert(credential, replacing: replacing, expecting: nil)
    }

    public func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation) async throws -> Credential {
        try await insert(credential, replacing: replacing, expecting: Optional(expecting))
    }

    /// `INSERT … ON CONFLICT`: with an expectation, a stored row is overwritten only if it is at
    /// the expected generation, in the same statement; nothing is written if it exists and none
    /// was expected.
    private func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation?) async throws -> Credential {
        try checkNotHeld()
        let cipher = cipher
        let store = storeID
        let user = credential.userIdentifier
        let values = try Self.columnValues(credential, cipher: cipher)
        let authenticity = RowAuthenticity(values)
        let columns = [("user_identifier", ColumnValue.text(user))] + values
        let names = columns.map(\.0) + ["generation", "row_mac", "updated_at"]
        let placeholders = columns.indices.map { "$\($0 + 1)" } + ["$\(columns.count + 1)", "$\(columns.count + 2)", "tokend_now_ms()"]
        var sql = "INSERT INTO tokend_credentials (\(names.joined(separator: ", "))) VALUES (\(placeholders.joined(separator: ", "))) "
        var expectedGeneration: Int64?
        // Whether the write may overwrite a stored row (else it adds one where there was none).
        var overwrites = false
        switch (replacing, expecting) {
        case (true, nil), (true, .generation?):
            overwrites = true
            sql +=
                "ON CONFLICT (user_identifier) DO UPDATE SET "
                + names.dropFirst().map { "\($0) = EXCLUDED.\($0)" }.joined(separator: ", ")
            if case .generation(let generation)? = expecting {
                sql += " WHERE tokend_credentials.generation = $\(columns.count + 3)"
                expectedGeneration = generation
            }
        case (false, _), (true, .absent?):
            sql += "ON CONFLICT (user_identifier) DO NOTHING"
        }
        sql += " RETURNING generation"
        let logger = logger
        let keyring = cipher.keyring
        let generation: Int64? = try await run("store credential '\(user)'") { [sql, expectedGeneration] client in
            let generation = try await Self.nextGeneration(client, logger: logger)
            var query = PostgresQuery(unsafeSQL: sql)
            for (_, value) in columns { try value.append(to: &query.binds) }
            try query.binds.append(generation)
            try query.binds.append(ByteBuffer(bytes: authenticity.tag(store: store, user, generation: generation, keyring: keyring)))
            if let expectedGeneration { try query.binds.append(expectedGeneration) }
            var stored: Int64?
            for try await value in try await client.query(query, logger: logger).decode(Int64.self) { stored = value }
            return stored
        }
        guard let generation else {
            if expecting != nil {
                throw StorageError(
                    code: .conflict,
                    message: "credential '\(user)' is not as this node last saw it (another node wrote or removed it); nothing was written")
            }
            throw StorageError(code: .alreadyExists, message: "a credential for '\(user)' already exists")
        }
        noteSeen(user, generation: generation, contentDigest: authenticity.contentDigest, salt: authenticity.salt)
        // Before the write is acknowledged: on disk when it replaced a row (an older row of this
        // credential must never come back). A credential added where there was none has no
        // older row this node served: its floor survives the process being killed at once, and
        // reaches the disk with the next synced write, so that adds cost no fsync of their own.
        try await keepFloors([user: SharedStoreMemory.Floor(generation: generation)], synced: overwrites)
        var stored = credential
        stored.generation = generation
        return stored
    }

    public func update(_ credential: Credential, expectedGeneration: Int64) async throws -> Credential {
        let values = try Self.columnValues(credential, cipher: cipher)
        let authenticity = RowAuthenticity(values)
        let generation = try await compareAndSwap(
            credential.userIdentifier, expectedGeneration, values, content: (authenticity.contentDigest, authenticity.salt),
            what: "update credential")
        var stored = credential
        stored.generation = generation
        return stored
    }

    @discardableResult
    public func updateStatus(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64 {
        try await compareAndSwap(
            userIdentifier, expectedGeneration, Self.statusValues(status), content: nil, what: "update the status of credential")
    }

    /// A grant's marker also renews this node's lease on the credential, if it holds one, and
    /// fails (`.conflict`) if that lease has run out: see
    /// ``compareAndSwap(_:_:_:content:what:renewingLease:)``.
    public func writeGrantMarker(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64 {
        try await compareAndSwap(
            userIdentifier, expectedGeneration, Self.statusValues(status), content: nil, what: "mark the grant of credential",
            renewingLease: true)
    }

    /// `UPDATE … WHERE generation = expected`, fenced by this node's lease on the credential if
    /// it holds one; throws `.conflict` or `.notFound` when no row matched.
    ///
    /// The new row's authentication tag covers its content digest: `content`'s for a whole row,
    /// else (a status-only write) that of the row at `expectedGeneration`, remembered from the
    /// last read or write of it or read and checked now; a status-only write also requires the
    /// row's salt to be the one that content had (a key rotation re-seals without a new
    /// generation).
    private func compareAndSwap(
        _ user: String, _ expectedGeneration: Int64, _ columns: [(String, ColumnValue)], content: (digest: [UInt8], salt: [UInt8])?,
        what: String, renewingLease: Bool = false
    ) async throws -> Int64 {
        try checkNotHeld()
        let fence = leaseBook.withLock { $0[user] }
        let count = columns.count
        let assignments = columns.enumerated().map { "\($0.element.0) = $\($0.offset + 1)" }
        // A grant's marker renews the lease it is fenced by, and only a lease still running:
        // from the marker on, the grant has a whole lease (longer than `http_timeout`) before
        // another node may take the credential over, and a node whose lease ran out while it
        // waited sends nothing.
        let renews = renewingLease && fence != nil
        let lease =
            renews
            ? """
            WITH lease AS (
                UPDATE tokend_leases SET expires_at = tokend_now_ms() + \(settings.leaseMilliseconds), updated_at = tokend_now_ms()
                WHERE user_identifier = $\(count + 1) AND holder = $\(count + 4) AND fencing = $\(count + 3)
                  AND expires_at > tokend_now_ms()
                RETURNING fencing)

            """ : ""
        let fenced =
            renews
            ? "EXISTS (SELECT 1 FROM lease)"
            : """
            ($\(count + 3)::bigint IS NULL OR EXISTS (
                  SELECT 1 FROM tokend_leases l
                  WHERE l.user_identifier = $\(count + 1) AND l.holder = $\(count + 4) AND l.fencing = $\(count + 3)))
            """
        // A marker also draws the generation of the grant's result.
        let sql = """
            \(lease)UPDATE tokend_credentials SET \(assignments.joined(separator: ", ")),
                generation = $\(count + 5), row_mac = $\(count + 6), updated_at = tokend_now_ms()
            WHERE user_identifier = $\(count + 1) AND generation = $\(count + 2) AND ($\(count + 7)::bytea IS NULL OR salt = $\(count + 7))
              AND \(fenced)
            RETURNING generation, \(renewingLease ? "nextval('tokend_generation')" : "NULL::bigint")
            """
        let reserved = takeReserved(user, expecting: expectedGeneration)
        let statusNames = Set(Self.statusColumns.map(\.0))
        let status = columns.filter { statusNames.contains($0.0) }
        let seen = seenRows.withLock { $0[user] }
        let floors = floors(of: [user])
        let store = storeID
        let known = content ?? seen.flatMap { $0.generation == expectedGeneration ? ($0.contentDigest, $0.salt) : nil }
        let statusOnly = content == nil
        let cipher = cipher
        let logger = logger
        let node = settings.nodeName
        let written: (generation: Int64, digest: [UInt8], salt: [UInt8]) = try await run("\(what) '\(user)'") { [sql] client in
            var known = known
            if known == nil {
                // A status-only write of a row this node has not read at that generation: read and check it first.
                var read = PostgresQuery(
                    unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials WHERE user_identifier = $1 AND generation = $2")
                try read.binds.append(user)
                try read.binds.append(expectedGeneration)
                // Checked against the newest generation this node has seen (a rolled-back row is
                // refused), and the digest taken from this row itself, not from the newest seen.
                for try await row in try await client.query(read, logger: logger) {
                    let authenticity = try self.admitAuthenticatedRow(row, cipher: cipher, store: store, floors: floors).authenticity
                    known = (authenticity.contentDigest, authenticity.salt)
                }
            }
            let generation: Int64
            if let reserved { generation = reserved } else { generation = try await Self.nextGeneration(client, logger: logger) }
            // Without a digest the row is gone or moved on, and the update below matches nothing.
            let tag = RowAuthenticity(contentDigest: known?.digest ?? [], status: status).tag(
                store: store, user, generation: generation, keyring: cipher.keyring)
            var query = PostgresQuery(unsafeSQL: sql)
            for (_, value) in columns { try value.append(to: &query.binds) }
            try query.binds.append(user)
            try query.binds.append(expectedGeneration)
            try query.binds.append(fence)
            try query.binds.append(node)
            try query.binds.append(generation)
            try query.binds.append(ByteBuffer(bytes: tag))
            try query.binds.append(statusOnly ? ByteBuffer(bytes: known?.salt ?? []) : nil)
            var updated: Int64?
            for try await (value, next) in try await client.query(query, logger: logger).decode((Int64, Int64?).self) {
                updated = value
                if let next { self.reserve(user, after: value, next: next) }
            }
            if let updated, let known { return (updated, known.digest, known.salt) }
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
        noteSeen(user, generation: written.generation, contentDigest: written.digest, salt: written.salt)
        // Durable before the write is acknowledged (and its credential served).
        try await keepFloors([user: SharedStoreMemory.Floor(generation: written.generation)], synced: !statusOnly)
        return written.generation
    }

    @discardableResult
    public func remove(userIdentifier: String, expectedGeneration: Int64) async throws -> Bool {
        try checkNotHeld()
        let logger = logger
        let removed = try await run("remove credential '\(userIdentifier)'") { client in
            for try await _ in try await client.query(
                """
                DELETE FROM tokend_credentials WHERE user_identifier = \(userIdentifier) AND generation = \(expectedGeneration)
                RETURNING generation
                """, logger: logger
            ).decode(Int64.self) {
                return true
            }
            for try await stored in try await client.query(
                "SELECT generation FROM tokend_credentials WHERE user_identifier = \(userIdentifier)", logger: logger
            ).decode(Int64.self) {
                throw StorageError(
                    code: .conflict,
                    message: "credential '\(userIdentifier)' was changed by another writer (stored generation \(stored), "
                        + "expected \(expectedGeneration)); nothing was removed")
            }
            return false
        }
        if removed { try await keepRemoved(userIdentifier, generation: expectedGeneration) }
        return removed
    }

    @discardableResult
    public func remove(userIdentifier: String) async throws -> Bool {
        try checkNotHeld()
        let logger = logger
        let removed: Int64? = try await run("remove credential '\(userIdentifier)'") { client in
            var removed: Int64?
            for try await generation in try await client.query(
                "DELETE FROM tokend_credentials WHERE user_identifier = \(userIdentifier) RETURNING generation", logger: logger
            ).decode(Int64.self) {
                removed = generation
            }
            return removed
        }
        if let removed { try await keepRemoved(userIdentifier, generation: removed) }
        return removed != nil
    }

    /// Remembers, durably, that the row at `generation` was removed: written back, that very
    /// row is refused as rolled back.
    private func keepRemoved(_ user: String, generation: Int64) async throws {
        try await keepFloors([user: SharedStoreMemory.Floor(generation: generation, removed: true)])
    }

    /// A held store is not re-encrypted: its rows are not this node's until an administrator
    /// adopts it.
    public func reencrypt(under keyring: Keyring) async throws -> Int {
        replaceKeyring(keyring)
        if isHeld { return 0 }
        let store = storeID
        // Floors only rise: rows read by the passes below are at least as new as this.
        let floors = memory.floors()
        let currentID = keyring.current.id
        let logger = logger
        var total = 0
        // Bounded: each pass re-seals up to 100 rows that are not under the current key, and a
        // pass that finds fewer ends the loop.
        for _ in 0..<1_000_000 {
            let cipher = cipher
            let (count, passed): (Int, Int) = try await run("re-encrypt credentials") { client in
                try await client.withTransaction(logger: logger) { connection -> (Int, Int) in
                    var rows: [Credential] = []
                    var refused = 0
                    for try await row in try await connection.query(
                        PostgresQuery(
                            unsafeSQL: """
                                SELECT \(Self.selectColumns) FROM tokend_credentials
                                WHERE encode(substring(access_token FROM 2 FOR 8), 'hex') <> $1
                                   OR (refresh_token IS NOT NULL AND encode(substring(refresh_token FROM 2 FOR 8), 'hex') <> $1)
                                   OR (dpop_key IS NOT NULL AND encode(substring(dpop_key FROM 2 FOR 8), 'hex') <> $1)
                                   OR (narrowed_tokens IS NOT NULL
                                       AND encode(substring(narrowed_tokens FROM 2 FOR 8), 'hex') <> $1)
                                   OR (row_mac IS NOT NULL AND encode(substring(row_mac FROM 2 FOR 8), 'hex') <> $1)
                                ORDER BY user_identifier LIMIT 100 FOR UPDATE
                                """,
                            binds: {
                                var binds = PostgresBindings()
                                try? binds.append(currentID)
                                return binds
                            }()
                        ), logger: logger
                    ) {
                        // A row refused by its integrity check stays as it is (reported); it is never re-sealed.
                        guard let credential = try? self.admitRow(row, cipher: cipher, store: store, floors: floors) else {
                            refused += 1
                            continue
                        }
                        rows.append(credential)
                    }
                    for credential in rows {
                        // Same content, so the generation stays (see CredentialStore.reencrypt).
                        let all = try Self.columnValues(credential, cipher: cipher)
                        let authenticity = RowAuthenticity(all)
                        let values = all.filter { ["salt", "access_token", "refresh_token", "dpop_key", "narrowed_tokens"].contains($0.0) }
                        var query = PostgresQuery(
                            unsafeSQL: """
                                UPDATE tokend_credentials SET salt = $1, access_token = $2, refresh_token = $3, dpop_key = $4,
                                    narrowed_tokens = $5, row_mac = $6
                                WHERE user_identifier = $7
                                """
                        )
                        for (_, value) in values { try value.append(to: &query.binds) }
                        try query.binds.append(
                            ByteBuffer(
                                bytes: authenticity.tag(
                                    store: store, credential.userIdentifier, generation: credential.generation, keyring: cipher.keyring)))
                        try query.binds.append(credential.userIdentifier)
                        try await connection.query(query, logger: logger).collect()
                        self.noteSeen(
                            credential.userIdentifier, generation: credential.generation, contentDigest: authenticity.contentDigest,
                            salt: authenticity.salt)
                    }
                    return (rows.count + refused, rows.count)
                }
            }
            total += passed
            if count < 100 { break }
        }
        if total > 0 { logger.info("re-encrypted credentials", metadata: ["count": "\(total)", "key": "\(keyring.current.id)"]) }
        return total
    }
}
