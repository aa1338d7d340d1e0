import GRDB

extension SQLiteCredentialStore {
    /// The schema version the newest migration produces; recorded in `meta` for people and tools.
    static let schemaVersion = 1

    /// The migrations, oldest first. Never edit a registered migration: add a new one.
    ///
    /// Tables are `STRICT` (SQLite ≥ 3.37), so a value of the wrong type is rejected instead of
    /// silently stored. Timestamps are integer milliseconds since the Unix epoch. No `CHECK` on
    /// `state`: a new state must not need a table rebuild; unknown values are reported on read.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE meta (
                        key TEXT PRIMARY KEY NOT NULL,
                        value ANY NOT NULL
                    ) STRICT;

                    INSERT INTO meta (key, value) VALUES
                        ('product', 'tokend'),
                        ('schema_version', 1),
                        -- The last generation handed out; see CredentialStore on why it is store-wide.
                        ('last_generation', 0);

                    CREATE TABLE credentials (
                        user_identifier TEXT PRIMARY KEY NOT NULL,
                        provider TEXT NOT NULL,
                        -- Per-row HKDF salt; both token blobs are sealed under the subkey it gives.
                        salt BLOB NOT NULL CHECK (length(salt) = 32),
                        -- version | key id | nonce | ciphertext | tag (see CredentialCipher)
                        access_token BLOB NOT NULL,
                        refresh_token BLOB,
                        token_type TEXT NOT NULL,
                        scope TEXT,
                        expires_at INTEGER NOT NULL,
                        issued_at INTEGER NOT NULL,
                        session_started_at INTEGER NOT NULL,
                        -- JSON array of reader strings, e.g. ["uid:1000","group:backup"]
                        readers TEXT NOT NULL,
                        enrolled_uid INTEGER NOT NULL,
                        enrolled_pid INTEGER NOT NULL,
                        enrolled_at INTEGER NOT NULL,
                        state TEXT NOT NULL,
                        last_refresh_at INTEGER,
                        last_error TEXT,
                        refresh_count INTEGER NOT NULL DEFAULT 0,
                        grant_started_at INTEGER,
                        retry_at INTEGER,
                        generation INTEGER NOT NULL,
                        updated_at INTEGER NOT NULL
                    ) STRICT;
                    """
            )
        }
        return migrator
    }
}
