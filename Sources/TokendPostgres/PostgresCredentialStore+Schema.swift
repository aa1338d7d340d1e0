import Logging
import NIOCore
import PostgresNIO
import TokendStorage

extension PostgresCredentialStore {
    /// The schema version the newest migration produces.
    public static var schemaVersion: Int { migrations.count }

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
        // 4: each row's authentication tag (RowAuthentication). Rows stored before stay untagged,
        // and refused, until an administrator adopts them (tokenctl store adopt).
        ["ALTER TABLE tokend_credentials ADD COLUMN row_mac bytea"],
        // 5: the refresh token's stated expiry and the re-login warnings said (no secret).
        [
            "ALTER TABLE tokend_credentials ADD COLUMN refresh_token_expires_at bigint",
            "ALTER TABLE tokend_credentials ADD COLUMN relogin_warnings text",
        ],
        // 6: row tags name the store (RowAuthentication version 2); a node that served the store
        // before carries its own tags over (carryOverLegacyTags), others leave them to an
        // administrator. No change of columns: the version tells nodes of earlier versions not
        // to use the store, whose tags they could not check.
        ["COMMENT ON COLUMN tokend_credentials.row_mac IS 'RowAuthentication version 2: names tokend_meta store_id'"],
    ]

    /// The migration after which rows carry an authentication tag.
    static let rowAuthenticationVersion = 4

    /// How long a node's start-up may take to migrate the schema, or to wait for the lock while
    /// another node migrates it. Longer than the operation timeout: nodes started together wait
    /// in turn for one migration, which may carry every row's tag over once.
    static let migrationLimit = Duration.seconds(120)

    /// What the store says about itself, read under the migration lock.
    static func observe(_ connection: PostgresConnection, logger: Logger) async throws -> StoreAdmission.Observed {
        var tables: Set<String> = []
        for try await name in try await connection.query(
            """
            SELECT table_name::text FROM information_schema.tables
            WHERE table_schema = current_schema() AND table_name IN ('tokend_schema', 'tokend_meta')
            """, logger: logger
        ).decode(String.self) {
            tables.insert(name)
        }
        var observed = StoreAdmission.Observed(schemaVersion: 0, storeID: nil)
        if tables.contains("tokend_schema") {
            for try await version in try await connection.query("SELECT coalesce(max(version), 0) FROM tokend_schema", logger: logger)
                .decode(Int.self)
            {
                observed.schemaVersion = version
            }
        }
        if tables.contains("tokend_meta") {
            for try await id in try await connection.query("SELECT value FROM tokend_meta WHERE key = 'store_id'", logger: logger)
                .decode(String.self)
            {
                observed.storeID = id
            }
        }
        return observed
    }

    /// Applies the migrations after `current`, each recorded in `tokend_schema`; how many ran.
    static func applyMigrations(_ connection: PostgresConnection, from current: Int, node: String, logger: Logger) async throws -> Int {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS tokend_schema (
                version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now(), applied_by text NOT NULL
            )
            """, logger: logger
        ).collect()
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
        return count
    }

    /// A new store's id: 128 random bits, in hex.
    static func newStoreID() -> String {
        (0..<2).map { _ in
            let hex = String(UInt64.random(in: .min ... .max), radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    /// Sets the store's id (a new store, or an administrator's adoption).
    static func setStoreID(_ id: String, _ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query(
            "CREATE TABLE IF NOT EXISTS tokend_meta (key text PRIMARY KEY, value text NOT NULL)", logger: logger
        ).collect()
        try await connection.query(
            """
            INSERT INTO tokend_meta (key, value) VALUES ('store_id', \(id))
            ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
            """, logger: logger
        ).collect()
    }

    /// Admits the store (``StoreAdmission``) under the migration lock: creates it, or brings
    /// its schema up to date, or holds it untouched; records this node.
    ///
    /// - Throws: ``StorageError`` `.database` if the database has a newer schema than this build.
    func migrate(productVersion: String) async throws {
        let node = settings.nodeName
        let logger = logger
        let record = memory.record
        let keyring = cipher.keyring
        let limit = max(Self.migrationLimit, .milliseconds(settings.operationTimeoutMilliseconds))
        let (admission, id, applied, carried): (StoreAdmission, String?, Int, Int) = try await run(
            "migrate the shared store's schema", limit: limit
        ) { client in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockKey))", logger: logger).collect()
                let observed = try await Self.observe(connection, logger: logger)
                guard observed.schemaVersion <= Self.migrations.count else {
                    throw StorageError(
                        code: .database,
                        message: "the shared store has schema version \(observed.schemaVersion), newer than this build knows "
                            + "(\(Self.migrations.count)); refusing to use it"
                    )
                }
                let admission = StoreAdmission.decide(record: record, store: observed)
                let id: String
                var carryOver = false
                switch admission {
                case .hold:
                    return (admission, nil, 0, 0)
                case .create:
                    id = Self.newStoreID()
                case .open(let storeID, let carry):
                    (id, carryOver) = (storeID, carry)
                }
                let applied = try await Self.applyMigrations(connection, from: observed.schemaVersion, node: node, logger: logger)
                if case .create = admission { try await Self.setStoreID(id, connection, logger: logger) }
                let carried = carryOver ? try await self.carryOverLegacyTags(connection, store: id, keyring: keyring) : 0
                try await connection.query(
                    """
                    INSERT INTO tokend_meta (key, value) VALUES ('last_opened_by', \(productVersion))
                    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
                    """, logger: logger
                ).collect()
                return (admission, id, applied, carried)
            }
        }
        if case .hold(let reason) = admission {
            heldReason.withLock { $0 = reason }
        } else if let id {
            storeIDBox.withLock { $0 = id }
            try memory.remember(SharedStoreRecord(storeID: id, schemaVersion: Self.schemaVersion), keyring: keyring)
        }
        if applied > 0 {
            logger.notice("migrated the shared store's schema", metadata: ["version": "\(Self.schemaVersion)", "node": "\(node)"])
        }
        if carried > 0 {
            logger.notice("tagged the store's rows for this store, as this node had seen them", metadata: ["count": "\(carried)"])
        }
        try await heartbeat(version: productVersion)
    }

    /// Tags anew, for the store `store`, every row whose tag of the earlier format (which did
    /// not name the store) checks out: under the migration lock, in its transaction, with the
    /// generation unchanged. A row whose tag does not check out keeps it, and is refused.
    func carryOverLegacyTags(_ connection: PostgresConnection, store: String, keyring: Keyring) async throws -> Int {
        var tags: [(String, [UInt8])] = []
        for try await row in try await connection.query(
            PostgresQuery(
                unsafeSQL:
                    "SELECT \(Self.selectColumns) FROM tokend_credentials WHERE get_byte(row_mac, 0) = \(RowAuthentication.legacyVersion)"),
            logger: logger
        ) {
            let user = (try? row.makeRandomAccess()["user_identifier"].decode(String.self)) ?? "?"
            do {
                let stored = try Self.authenticity(of: row)
                try RowAuthentication.verifyLegacy(
                    stored.tag, userIdentifier: user, contentDigest: stored.authenticity.contentDigest, status: stored.authenticity.status,
                    generation: stored.generation, keyring: keyring)
                tags.append((user, stored.authenticity.tag(store: store, user, generation: stored.generation, keyring: keyring)))
            } catch {
                logger.error(
                    "a stored credential's tag of the earlier format does not check out; it stays refused",
                    metadata: ["user_identifier": "\(user)", "problem": "\(error)"])
            }
        }
        for (user, tag) in tags {
            try await connection.query(
                "UPDATE tokend_credentials SET row_mac = \(ByteBuffer(bytes: tag)) WHERE user_identifier = \(user)", logger: logger
            ).collect()
        }
        return tags.count
    }

    /// Records that this node is alive (for `Status`); not while it holds the store, which it
    /// takes no part in (its tables may not even exist).
    func heartbeat(version: String) async throws {
        if isHeld { return }
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
        if isHeld { return [settings.nodeName] }
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
