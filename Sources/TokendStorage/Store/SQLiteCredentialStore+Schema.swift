import GRDB

extension SQLiteCredentialStore {
    /// The schema version the newest migration produces; recorded in `meta` for people and tools.
    static let schemaVersion = 4

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
        // The master key each blob names (bytes 2…9), indexed so that ``keyIDsInUse()``, which
        // runs at every start, finds the few distinct keys with one index probe each instead of
        // reading every row (about 1.3 s per call at a million credentials).
        migrator.registerMigration("v2-key-id-indexes") { db in
            try db.execute(
                sql: """
                    CREATE INDEX credentials_access_token_key ON credentials (substr(access_token, 2, 8));
                    CREATE INDEX credentials_refresh_token_key ON credentials (substr(refresh_token, 2, 8));
                    UPDATE meta SET value = 2 WHERE key = 'schema_version';
                    """
            )
        }
        // The private key of a DPoP-bound credential, sealed like the tokens (same salt, its own
        // binding), with the same key-id index so that ``keyIDsInUse()`` sees the keys it names.
        migrator.registerMigration("v3-dpop-key") { db in
            try db.execute(
                sql: """
                    ALTER TABLE credentials ADD COLUMN dpop_key BLOB;
                    CREATE INDEX credentials_dpop_key_key ON credentials (substr(dpop_key, 2, 8));
                    UPDATE meta SET value = 3 WHERE key = 'schema_version';
                    """
            )
        }
        // Tokens narrowed to a scope or resource, as one sealed JSON array per credential: they
        // are written with the credential (the rotated refresh token of a narrowed grant and its
        // token in one transaction) and go with it; same key-id index as the other columns.
        migrator.registerMigration("v4-narrowed-tokens") { db in
            try db.execute(
                sql: """
                    ALTER TABLE credentials ADD COLUMN narrowed_tokens BLOB;
                    CREATE INDEX credentials_narrowed_tokens_key ON credentials (substr(narrowed_tokens, 2, 8));
                    UPDATE meta SET value = 4 WHERE key = 'schema_version';
                    """
            )
        }
        // The refresh token's stated expiry and the re-login warnings said (both plain: dates and
        // thresholds, no secret), so a restart or another process neither repeats nor skips one.
        migrator.registerMigration("v5-relogin") { db in
            try db.execute(
                sql: """
                    ALTER TABLE credentials ADD COLUMN refresh_token_expires_at INTEGER;
                    ALTER TABLE credentials ADD COLUMN relogin_warnings TEXT;
                    UPDATE meta SET value = 5 WHERE key = 'schema_version';
                    """
            )
        }
        return migrator
    }
}
