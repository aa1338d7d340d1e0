import PostgresNIO
import TokendCore
import TokendStorage

extension PostgresCredentialStore {
    /// What one attempt to take a lease found.
    enum LeaseAttempt: Sendable {
        case granted(RefreshLease)
        case heldElsewhere(holder: String, expiresAt: Timestamp, fencing: Int64)
        /// Released between the two statements: try again.
        case raced
    }

    /// Takes the lease of `user` for this node if nobody holds a live one, in one statement: the
    /// new fencing counter comes from the store-wide sequence, so it exceeds every counter any
    /// lease ever had (also after the lease row is gone). Expiry is on the database's clock. A
    /// lease taken also says the credential's stored generation, as of the statement.
    func tryAcquireLease(_ user: String) async throws -> LeaseAttempt {
        let node = settings.nodeName
        let duration = settings.leaseMilliseconds
        let logger = logger
        let attempt: LeaseAttempt = try await run("take the refresh lease of '\(user)'") { client in
            for try await (fencing, expires, stored) in try await client.query(
                """
                INSERT INTO tokend_leases (user_identifier, holder, fencing, expires_at, updated_at)
                VALUES (\(user), \(node), nextval('tokend_generation'), tokend_now_ms() + \(duration), tokend_now_ms())
                ON CONFLICT (user_identifier) DO UPDATE SET holder = EXCLUDED.holder, fencing = EXCLUDED.fencing,
                    expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
                WHERE tokend_leases.holder IS NULL OR tokend_leases.expires_at <= tokend_now_ms()
                RETURNING fencing, expires_at, (SELECT generation FROM tokend_credentials WHERE user_identifier = \(user))
                """, logger: logger
            ).decode((Int64, Int64, Int64?).self) {
                return .granted(
                    RefreshLease(
                        userIdentifier: user, holder: node, fencing: fencing, expiresAt: Timestamp(millisecondsSince1970: expires),
                        storedGeneration: stored))
            }
            for try await (holder, expires, fencing) in try await client.query(
                "SELECT holder, expires_at, fencing FROM tokend_leases WHERE user_identifier = \(user)", logger: logger
            ).decode((String?, Int64, Int64).self) {
                if let holder {
                    return .heldElsewhere(holder: holder, expiresAt: Timestamp(millisecondsSince1970: expires), fencing: fencing)
                }
            }
            return .raced
        }
        if case .granted(let lease) = attempt { leaseBook.withLock { $0[user] = lease.fencing } }
        return attempt
    }

    /// Releases a lease this node holds (nothing happens if it was taken over meanwhile).
    func releaseLease(_ lease: RefreshLease) async throws {
        leaseBook.withLock { book in
            if book[lease.userIdentifier] == lease.fencing { book[lease.userIdentifier] = nil }
        }
        let node = settings.nodeName
        let logger = logger
        try await run("release the refresh lease of '\(lease.userIdentifier)'") { client in
            try await client.query(
                """
                UPDATE tokend_leases SET holder = NULL, expires_at = tokend_now_ms(), updated_at = tokend_now_ms()
                WHERE user_identifier = \(lease.userIdentifier) AND holder = \(node) AND fencing = \(lease.fencing)
                """, logger: logger
            ).collect()
        }
    }

    /// The live leases, by user identifier, with their fencing counters.
    func liveLeases() async throws -> [String: (holder: String, expiresAt: Timestamp, fencing: Int64)] {
        if isHeld { return [:] }
        let logger = logger
        return try await run("list the refresh leases") { client in
            var leases: [String: (holder: String, expiresAt: Timestamp, fencing: Int64)] = [:]
            for try await (user, holder, expires, fencing) in try await client.query(
                """
                SELECT user_identifier, holder, expires_at, fencing FROM tokend_leases
                WHERE holder IS NOT NULL AND expires_at > tokend_now_ms()
                """, logger: logger
            ).decode((String, String, Int64, Int64).self) {
                leases[user] = (holder, Timestamp(millisecondsSince1970: expires), fencing)
            }
            return leases
        }
    }
}
