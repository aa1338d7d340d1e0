import NIOCore
import PostgresNIO
import TokendStorage

extension PostgresCredentialStore {
    /// The schema version the newest migration produces.
    static let schemaVersion = 4

    /// The key of the transaction-level advisory lock every node takes before looking at the
    /// schema: when several nodes start at once, one migrates and the others wait, then find
    /// the work done. ("tokend" in ASCII.)
    static let migrationLockKey: Int64 = 0x746F_6B65_6E64

    /// The migrations, oldest first; each is a list of statements run in one transaction. Never
    /// edit a registered migration: add a new one.
    ///
    /// Timestamps are integer milliseconds since the Unix epoch. Lease times come from the
    /// database's clock (`tokend_now_ms()`), so nodes with skewed clocks still agree on expiry.
    static let migrations: [[String]] = [
        [
            "CREATE SEQUENCE tokend_generation",
            "CREATE TABLE tokend_meta (key text PRIMARY KEY, value text NOT NULL)",
            """
            CREATE TABLE tokend_credentials (
                user_identifier text PRIMARY KEY,
                provider text NOT NULL,
                salt bytea NOT NULL CHECK (length(salt) = 32),
                access_token bytea NOT NULL,
                refresh_token bytea,
                token_type text NOT NULL,
                scope text,
                expires_at bigint NOT NULL,
                issued_at bigint NOT NULL,
                session_started_at bigint NOT NULL,
                readers text NOT NULL,
                enrolled_uid bigint NOT NULL,
                enrolled_pid bigint NOT NULL,
                enrolled_at bigint NOT NULL,
                state text NOT NULL,
                last_refresh_at bigint,
                last_error text,
                refresh_count bigint NOT NULL DEFAULT 0,
                grant_started_at bigint,
                retry_at bigint,
                generation bigint NOT NULL,
                updated_at bigint NOT NULL
            )
            """,
            // One row per credential ever leased; a released lease keeps its row with no holder.
            """
            CREATE TABLE tokend_leases (
                user_identifier text PRIMARY KEY,
                holder text,
                fencing bigint NOT NULL,
                expires_at bigint NOT NULL,
                updated_at bigint NOT NULL
            )
            """,
            """
            CREATE TABLE tokend_nodes (
                node_name text PRIMARY KEY,
                started_at bigint NOT NULL,
                last_seen bigint NOT NULL,
                version text NOT NULL
            )
            """,
            """
            CREATE FUNCTION tokend_now_ms() RETURNS bigint LANGUAGE sql VOLATILE
            AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$
            """,
            // Payloads: "C U <generation> <user>" / "C D <generation> <user>" and
            // "L <fencing> <expires_at> <holder or -> <user>". No secrets.
            """
            CREATE FUNCTION tokend_notify_credential() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'DELETE' THEN
                    PERFORM pg_notify('tokend_changes', 'C D ' || OLD.generation || ' ' || OLD.user_identifier);
                ELSIF TG_OP = 'INSERT' OR OLD.generation IS DISTINCT FROM NEW.generation THEN
                    PERFORM pg_notify('tokend_changes', 'C U ' || NEW.generation || ' ' || NEW.user_identifier);
                END IF;
                RETURN NULL;
            END $$
            """,
            """
            CREATE TRIGGER tokend_credentials_notify AFTER INSERT OR UPDATE OR DELETE ON tokend_credentials
            FOR EACH ROW EXECUTE FUNCTION tokend_notify_credential()
            """,
            """
            CREATE FUNCTION tokend_notify_lease() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('tokend_changes', 'L ' || NEW.fencing || ' ' || NEW.expires_at || ' '
                    || coalesce(NEW.holder, '-') || ' ' || NEW.user_identifier);
                RETURN NULL;
            END $$
            """,
            """
            CREATE TRIGGER tokend_leases_notify AFTER INSERT OR UPDATE ON tokend_leases
            FOR EACH ROW EXECUTE FUNCTION tokend_notify_lease()
            """,
            "INSERT INTO tokend_meta (key, value) VALUES ('product', 'tokend')",
        ],
        // 2: the private key of a DPoP-bound credential, sealed like its tokens.
        ["ALTER TABLE tokend_credentials ADD COLUMN dpop_key bytea"],
        // 3: tokens narrowed to a scope or resource, one sealed JSON array per credential.
        ["ALTER TABLE tokend_credentials ADD COLUMN narrowed_tokens bytea"],
        // 4: each row's authentication tag (RowAuthentication); rows stored before are tagged
        // in the same transaction (authenticateUntaggedRows).
        ["ALTER TABLE tokend_credentials ADD COLUMN row_mac bytea"],
        // 5: the refresh token's stated expiry and the re-login warnings said (no secret).
        [
            "ALTER TABLE tokend_credentials ADD COLUMN refresh_token_expires_at bigint",
            "ALTER TABLE tokend_credentials ADD COLUMN relogin_warnings text",
        ],
    ]

    /// The migration after which rows carry an authentication tag.
    static let rowAuthenticationVersion = 4

    /// How long a node's start-up may take to migrate the schema, or to wait for the lock while
    /// another node migrates it. Longer than the operation timeout: nodes started together wait
    /// in turn for one migration, which tags every existing row once.
    static let migrationLimit = Duration.seconds(120)

    /// Brings the schema up to date under the migration lock, and records this node.
    ///
    /// - Throws: ``StorageError`` `.database` if the database has a newer schema than this build.
    func migrate(productVersion: String) async throws {
        let node = settings.nodeName
        let migrations = Self.migrations
        let logger = logger
        let limit = max(Self.migrationLimit, .milliseconds(settings.operationTimeoutMilliseconds))
        let applied: Int = try await run("migrate the shared store's schema", limit: limit) { client in
            try await client.withTransaction(logger: logger) { connection -> Int in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))", logger: logger).collect()
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS tokend_schema (
                        version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now(), applied_by text NOT NULL
                    )
                    """, logger: logger
                ).collect()
                var current = 0
                for try await version in try await connection.query("SELECT coalesce(max(version), 0) FROM tokend_schema", logger: logger)
                    .decode(Int.self)
                {
                    current = version
                }
                guard current <= migrations.count else {
                    throw StorageError(
                        code: .database,
                        message: "the shared store has schema version \(current), newer than this build knows (\(migrations.count)); "
                            + "refusing to use it"
                    )
                }
                var count = 0
                for (index, statements) in migrations.enumerated() where index + 1 > current {
                    for statement in statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger).collect()
                    }
                    try await connection.query(
                        "INSERT INTO tokend_schema (version, applied_by) VALUES (\(index + 1), \(node))", logger: logger
                    ).collect()
                    count += 1
                }
                // Tagged once every column exists (rows are read with all of them), in the
                // same transaction.
                if current < Self.rowAuthenticationVersion, migrations.count >= Self.rowAuthenticationVersion {
                    try await self.authenticateUntaggedRows(connection)
                }
                try await connection.query(
                    """
                    INSERT INTO tokend_meta (key, value) VALUES ('last_opened_by', \(productVersion))
                    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
                    """, logger: logger
                ).collect()
                return count
            }
        }
        if applied > 0 {
            logger.notice("migrated the shared store's schema", metadata: ["version": "\(Self.schemaVersion)", "node": "\(node)"])
        }
        try await heartbeat(version: productVersion)
    }

    /// Tags the rows stored before row authentication existed (the upgrade to schema 4), under
    /// the migration's lock and transaction: each row whose tokens open with the master key (so
    /// tokend wrote them) is tagged as it stands. A row whose tokens do not open keeps no tag
    /// and is refused from then on.
    func authenticateUntaggedRows(_ connection: PostgresConnection) async throws {
        let cipher = cipher
        var tags: [(String, [UInt8])] = []
        for try await row in try await connection.query(
            PostgresQuery(unsafeSQL: "SELECT \(Self.selectColumns) FROM tokend_credentials WHERE row_mac IS NULL"), logger: logger
        ) {
            do {
                let credential = try Self.credential(from: row, cipher: cipher)
                let stored = try Self.authenticity(of: row)
                tags.append(
                    (
                        credential.userIdentifier,
                        stored.authenticity.tag(credential.userIdentifier, generation: stored.generation, keyring: cipher.keyring)
                    ))
            } catch {
                logger.error(
                    "a stored credential cannot be authenticated on upgrade; it will be refused", metadata: ["problem": "\(error)"])
            }
        }
        for (user, tag) in tags {
            try await connection.query(
                "UPDATE tokend_credentials SET row_mac = \(ByteBuffer(bytes: tag)) WHERE user_identifier = \(user)", logger: logger
            ).collect()
        }
        if !tags.isEmpty { logger.notice("authenticated the stored credentials", metadata: ["count": "\(tags.count)"]) }
    }

    /// Records that this node is alive (for `Status`).
    func heartbeat(version: String) async throws {
        let node = settings.nodeName
        let logger = logger
        try await run("record this node") { client in
            try await client.query(
                """
                INSERT INTO tokend_nodes (node_name, started_at, last_seen, version)
                VALUES (\(node), tokend_now_ms(), tokend_now_ms(), \(version))
                ON CONFLICT (node_name) DO UPDATE SET last_seen = EXCLUDED.last_seen, version = EXCLUDED.version
                """, logger: logger
            ).collect()
        }
    }

    /// The nodes seen within `window` milliseconds, sorted.
    func recentNodes(withinMilliseconds window: Int64) async throws -> [String] {
        let logger = logger
        return try await run("list the nodes") { client in
            var names: [String] = []
            for try await name in try await client.query(
                "SELECT node_name FROM tokend_nodes WHERE last_seen > tokend_now_ms() - \(window) ORDER BY node_name", logger: logger
            ).decode(String.self) {
                names.append(name)
            }
            return names
        }
    }
}
