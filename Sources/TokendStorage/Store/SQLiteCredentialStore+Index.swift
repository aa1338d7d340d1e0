import Foundation
import GRDB
import TokendCore

extension SQLiteCredentialStore {
    /// The start-up read: one sequential pass over the table with a cursor (in storage order: an
    /// `ORDER BY user_identifier` would walk the primary-key index and look every row up, which
    /// doubles the time), metadata only, decoded by
    /// column index; neither token is read (each access token is read and opened on first use,
    /// ``readAccessToken(userIdentifier:provider:)``). A million rows take about a second;
    /// ``loadAll()``, which opens every token, takes many times that.
    ///
    /// Column types need no checks here: the table is `STRICT`, so SQLite itself guarantees an
    /// integer in every `INTEGER` column and text in every `TEXT` one, and `NOT NULL` where
    /// declared; values (state names, reader lists) are still validated.
    public func loadIndex() async throws -> [IndexedCredential] {
        let reader = StoredTokenReader { [self] user, provider in
            try self.readAccessToken(userIdentifier: user, provider: provider)
        }
        let (first, last, total) = try await read("count the credentials") { db -> (Int64, Int64, Int) in
            // Separate subqueries: each is one index probe (min and max together would scan).
            let row = try Row.fetchOne(
                db,
                sql: "SELECT (SELECT min(rowid) FROM credentials), (SELECT max(rowid) FROM credentials), (SELECT count(*) FROM credentials)"
            )
            return (row?[0] as Int64? ?? 0, row?[1] as Int64? ?? 0, row?[2] as Int? ?? 0)
        }
        // Large stores are read in parallel rowid ranges, one read transaction each. They must
        // all see the same state: every write moves the generation counter or the row count,
        // so equal (last_generation, count) in every part proves it; else read once, serially.
        let parts = total < 50_000 ? 1 : max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))
        if parts > 1 {
            let span = (last - first) / Int64(parts) + 1
            let results = try await withThrowingTaskGroup(of: (Int, IndexPart).self) { group in
                for part in 0..<parts {
                    let low = first + Int64(part) * span
                    let high = part == parts - 1 ? last : low + span - 1
                    group.addTask {
                        (
                            part,
                            try await self.read("load the credential index") { db in
                                try Self.indexPart(db, rowids: low...high, reader: reader, expected: total / parts)
                            }
                        )
                    }
                }
                var results = [IndexPart?](repeating: nil, count: parts)
                for try await (index, part) in group { results[index] = part }
                return results.compactMap { $0 }
            }
            if Set(results.map { "\($0.stamp)" }).count == 1, results.reduce(0, { $0 + $1.credentials.count }) == results[0].stamp.count {
                var all: [IndexedCredential] = []
                all.reserveCapacity(total)
                for part in results { all += part.credentials }
                return all
            }
        }
        return try await read("load the credential index") { db in
            try Self.indexPart(db, rowids: nil, reader: reader, expected: total).credentials
        }
    }

    /// One read transaction's share of ``loadIndex()``, with the state it saw.
    private struct IndexPart: Sendable {
        var stamp: (generation: Int64, count: Int)
        var credentials: [IndexedCredential]
    }

    private static func indexPart(_ db: Database, rowids: ClosedRange<Int64>?, reader: StoredTokenReader, expected: Int) throws
        -> IndexPart
    {
        let generation = try Int64.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'last_generation'") ?? 0
        let count = try Int.fetchOne(db, sql: "SELECT count(*) FROM credentials") ?? 0
        var result: [IndexedCredential] = []
        result.reserveCapacity(expected + 16)
        var readersCache: [String: [Reader]] = [:]
        let columns = """
            SELECT user_identifier, provider, refresh_token IS NOT NULL, token_type, scope,
                   expires_at, issued_at, session_started_at, readers, enrolled_uid, enrolled_pid, enrolled_at,
                   state, last_refresh_at, last_error, refresh_count, grant_started_at, retry_at, generation,
                   refresh_token_expires_at, relogin_warnings
            FROM credentials
            """
        let rows =
            if let rowids {
                try Row.fetchCursor(db, sql: columns + " WHERE rowid BETWEEN ? AND ?", arguments: [rowids.lowerBound, rowids.upperBound])
            } else {
                try Row.fetchCursor(db, sql: columns)
            }
        while let row = try rows.next() {
            result.append(try indexed(row, reader: reader, readersCache: &readersCache))
        }
        return IndexPart(stamp: (generation, count), credentials: result)
    }

    /// Reads one access token and opens it, synchronously (a primary-key lookup; the caller may
    /// be an event loop, see ``DeferredAccessToken``).
    ///
    /// - Throws: ``StorageError``: `.notFound`, `.decryption`, `.unknownKey`, `.closed`,
    ///   `.database`.
    public func readAccessToken(userIdentifier: String, provider: String) throws -> SecretString {
        if isClosedNow {
            throw StorageError(code: .closed, message: "the credential store \(databasePath) is closed")
        }
        let sealed: (salt: Data, blob: Data)?
        do {
            // One statement needs no transaction of its own (it reads one consistent snapshot
            // in autocommit mode), and its prepared form is kept: the first call for each
            // credential after start-up comes here, a million times after a large start.
            sealed = try pool.unsafeRead { db in
                let statement = try db.cachedStatement(
                    sql: "SELECT salt, access_token FROM credentials WHERE user_identifier = ? AND provider = ?")
                return try Row.fetchOne(statement, arguments: [userIdentifier, provider]).map { row in (row[0] as Data, row[1] as Data) }
            }
        } catch {
            throw Self.storageError(error, "cannot read the access token of '\(userIdentifier)'")
        }
        guard let sealed else {
            throw StorageError(code: .notFound, message: "no credential for '\(userIdentifier)' with provider '\(provider)'")
        }
        return try cipher.open(
            sealed.blob, salt: sealed.salt,
            binding: SealBinding(userIdentifier: userIdentifier, provider: provider, column: .accessToken)
        )
    }

    private static func corrupt(_ row: Row, _ column: String, _ problem: String) -> StorageError {
        let user = (row[0] as String?) ?? "?"
        return StorageError(code: .corruptRecord, message: "stored credential '\(user)' has an invalid \(column): \(problem)")
    }

    private static func integer<Value: FixedWidthInteger>(_ row: Row, _ index: Int, _ column: String) throws -> Value {
        let raw: Int64 = row[index]
        guard let value = Value(exactly: raw) else { throw corrupt(row, column, "out of range") }
        return value
    }

    private static func timestamp(_ row: Row, _ index: Int) -> Timestamp {
        Timestamp(millisecondsSince1970: row[index])
    }

    private static func optionalTimestamp(_ row: Row, _ index: Int) -> Timestamp? {
        (row[index] as Int64?).map { Timestamp(millisecondsSince1970: $0) }
    }

    /// Reader lists repeat across credentials (usually one uid each): each distinct text is
    /// decoded once and the array shared.
    private static func readers(_ row: Row, _ cache: inout [String: [Reader]]) throws -> [Reader] {
        let text: String = row[8]
        if let known = cache[text] { return known }
        let readers: [Reader]
        do {
            readers = try ReaderListCoding.decode(text)
        } catch .unknownReader(let string) {
            throw corrupt(row, "readers", "unknown reader '\(string)'")
        } catch {
            throw corrupt(row, "readers", "not a JSON array of strings")
        }
        if cache.count < 10_000 { cache[text] = readers }
        return readers
    }

    private static func indexed(_ row: Row, reader: StoredTokenReader, readersCache: inout [String: [Reader]]) throws
        -> IndexedCredential
    {
        let stateText: String = row[12]
        guard let state = CredentialState(rawValue: stateText) else {
            throw corrupt(row, "state", "unknown state '\(stateText)'")
        }
        let metadata = Credential(
            userIdentifier: row[0],
            provider: row[1],
            accessToken: SecretString(""),
            refreshToken: nil,
            tokenType: row[3],
            scope: row[4],
            expiresAt: timestamp(row, 5),
            issuedAt: timestamp(row, 6),
            sessionStartedAt: timestamp(row, 7),
            readers: try readers(row, &readersCache),
            enrolment: Enrolment(
                uid: try integer(row, 9, "enrolled_uid"), pid: try integer(row, 10, "enrolled_pid"), at: timestamp(row, 11)),
            status: RefreshStatus(
                state: state,
                lastRefreshAt: optionalTimestamp(row, 13),
                lastError: row[14],
                refreshCount: row[15],
                grantStartedAt: optionalTimestamp(row, 16),
                retryAt: optionalTimestamp(row, 17)
            ),
            generation: row[18],
            refreshTokenExpiresAt: optionalTimestamp(row, 19),
            reloginWarnings: (row[20] as String?).flatMap(ReloginWarningRecord.init(encoded:))
        )
        return IndexedCredential(metadata: metadata, hasRefreshToken: row[2] as Int64 != 0, accessToken: .stored(reader))
    }
}
