import Dispatch
import NIOCore
import PostgresNIO
import TokendCore
import TokendStorage

/// The reads that walk the whole store — a node's start-up, its reconciliations, the keys in
/// use — in pages in key order (`user_identifier > last`), each page one operation bounded by
/// the operation timeout: a store of any size is read as long as the database keeps answering,
/// and the bound of the whole read grows with the store (pages × the operation timeout).
extension PostgresCredentialStore {
    /// The most pages one walk reads: 10,000,000 credentials at the default page size.
    var maximumPages: Int { 10_000_000 / max(1, settings.readPageSize) + 1 }

    /// The columns the start-up read selects, in the order ``indexedRow(_:opener:store:keyring:readers:)``
    /// reads them: what the tag covers (``contentColumns``, ``reloginColumns``, ``statusColumns``),
    /// then the user identifier, the generation and the tag.
    static let indexColumns = authenticatedColumns.map(\.0) + ["user_identifier", "generation", "row_mac"]
    static let authenticatedColumns = contentColumns + reloginColumns + statusColumns
    /// Where each authenticated column is in ``indexColumns``.
    static let indexPosition = Dictionary(uniqueKeysWithValues: authenticatedColumns.enumerated().map { ($1.0, $0) })
    static let indexUserPosition = authenticatedColumns.count

    /// Every credential but those refused by their integrity check (reported and logged, and
    /// left out: a row edited outside tokend grants nothing, and the others still serve), each
    /// authenticated and checked against the node's floors, its access token left sealed
    /// (``SealedAccessToken``) and its refresh token unread. None while the store is held.
    ///
    /// Pages are checked on Dispatch's threads, two at a time (the event loops stay free to
    /// fetch the next page meanwhile). Floors rise (durably, before this returns) for every row
    /// newer than the node had seen; a credential it had seen that the read finds gone is
    /// remembered as removed.
    public func loadIndex() async throws -> [IndexedCredential] {
        if isHeld { return [] }
        let floors = memory.floors()
        let opener = SealedTokenOpener(cipher)
        let keyring = cipher.keyring
        let store = storeID
        let pageSize = settings.readPageSize
        var credentials: [IndexedCredential] = []
        var raised: [String: SharedStoreMemory.Floor] = [:]
        // Rows of credentials the node has a floor for: fewer than its floors means some are gone.
        var floorsMet = 0
        // Rows refused by their integrity check: there, though not served.
        var refused: Set<String> = []
        func merge(_ checked: CheckedPage) {
            for (error, user, generation) in checked.refused {
                if floors[user] != nil { floorsMet += 1 }
                refused.insert(user)
                reportIntegrity(error, kind: .altered, user: user, generation: generation)
            }
            for indexed in checked.credentials {
                let user = indexed.metadata.userIdentifier
                let floor = SharedStoreMemory.Floor(generation: indexed.metadata.generation)
                if let seen = floors[user] {
                    floorsMet += 1
                    guard (try? checkFloor(user, generation: floor.generation, floor: seen)) != nil else {
                        refused.insert(user)
                        continue
                    }
                    if floor.generation > seen.generation { raised[user] = floor }
                } else {
                    raised[user] = floor
                }
                credentials.append(indexed)
            }
        }
        var next: Task<[PostgresRow], any Error>? = fetchPage(columns: Self.indexColumns, after: nil)
        var checking: [Task<CheckedPage, any Error>] = []
        var pages = 0
        while let page = next {
            let rows = try await page.value
            pages += 1
            let last = rows.last.flatMap { try? $0.makeRandomAccess()[Self.indexUserPosition].decode(String.self) }
            next = rows.count == pageSize && pages < maximumPages ? fetchPage(columns: Self.indexColumns, after: last) : nil
            checking.append(Task { try await Self.check(rows, opener: opener, store: store, keyring: keyring) })
            if checking.count >= 2 { merge(try await checking.removeFirst().value) }
        }
        for page in checking { merge(try await page.value) }
        let standing = floors.filter { !$0.value.removed }
        if floorsMet < standing.count {
            var present = refused
            present.reserveCapacity(credentials.count + refused.count)
            for credential in credentials { present.insert(credential.metadata.userIdentifier) }
            for (user, floor) in standing where !present.contains(user) && raised[user] == nil {
                raised[user] = SharedStoreMemory.Floor(generation: floor.generation, removed: true)
            }
        }
        try await keepFloors(raised)
        return credentials
    }

    /// A page of the start-up read, checked: the credentials, and the rows refused by their
    /// integrity check (with their user identifier and generation, to report).
    struct CheckedPage: Sendable {
        var credentials: [IndexedCredential] = []
        var refused: [(StorageError, String, Int64?)] = []
    }

    /// Checks a page's rows on Dispatch's pool (pure work that would otherwise hold an event
    /// loop, where the database's answers arrive).
    static func check(_ rows: [PostgresRow], opener: SealedTokenOpener, store: String, keyring: Keyring) async throws -> CheckedPage {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                var page = CheckedPage()
                page.credentials.reserveCapacity(rows.count)
                var readers: [String: [Reader]] = [:]
                do {
                    for row in rows {
                        do {
                            page.credentials.append(try indexedRow(row, opener: opener, store: store, keyring: keyring, readers: &readers))
                        } catch let error as StorageError where error.code == .integrity {
                            let cells = row.makeRandomAccess()
                            page.refused.append(
                                (
                                    error, (try? cells[indexUserPosition].decode(String.self)) ?? "?",
                                    try? cells[indexUserPosition + 1].decode(Int64.self)
                                ))
                        }
                    }
                    continuation.resume(returning: page)
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// One page of `columns` after the user identifier `last` (nil: the first page), in key
    /// order, fetched in a task of its own so that the caller works on the page before.
    func fetchPage(columns: [String], after last: String?) -> Task<[PostgresRow], any Error> {
        let logger = logger
        let pageSize = settings.readPageSize
        let sql =
            "SELECT \(columns.joined(separator: ", ")) FROM tokend_credentials"
            + (last == nil ? "" : " WHERE user_identifier > $1") + " ORDER BY user_identifier LIMIT \(pageSize)"
        return Task {
            try await self.run("read the stored credentials") { client in
                var query = PostgresQuery(unsafeSQL: sql)
                if let last { try query.binds.append(last) }
                var rows: [PostgresRow] = []
                rows.reserveCapacity(pageSize)
                for try await row in try await client.query(query, logger: logger) { rows.append(row) }
                return rows
            }
        }
    }

    /// Every credential's generation, by user identifier (the periodic reconciliation). A
    /// generation older than one this node has seen is reported as a rollback. None while the
    /// store is held.
    public func generations() async throws -> [String: Int64] {
        if isHeld { return [:] }
        let floors = memory.floors()
        let pageSize = settings.readPageSize
        var result: [String: Int64] = [:]
        var next: Task<[PostgresRow], any Error>? = fetchPage(columns: ["user_identifier", "generation"], after: nil)
        var pages = 0
        while let page = next {
            let rows = try await page.value
            pages += 1
            var last: String?
            for row in rows {
                let (user, generation) = try row.decode((String, Int64).self)
                result[user] = generation
                last = user
            }
            next =
                rows.count == pageSize && pages < maximumPages ? fetchPage(columns: ["user_identifier", "generation"], after: last) : nil
        }
        for (user, generation) in result {
            guard let floor = floors[user], floor.refuses(generation) else { continue }
            reportIntegrity(
                StorageError(
                    code: .integrity,
                    message: "stored credential '\(user)' was rolled back to generation \(generation); this node has seen "
                        + "generation \(floor.generation); it is refused"),
                kind: .rolledBack, user: user, generation: generation)
        }
        return result
    }

    /// While the store is held every key of the keyring counts as in use: none is dropped on
    /// the word of a store this node does not recognise. One page at a time, each answered with
    /// its distinct key ids by the database.
    public func keyIDsInUse() async throws -> Set<String> {
        if isHeld { return Set(cipher.keyring.keyIDs) }
        let logger = logger
        let pageSize = settings.readPageSize
        var ids = Set<String>()
        var last: String?
        for _ in 0..<maximumPages {
            let (end, count, found): (String?, Int64, [String]) = try await run("list the keys in use") { [last] client in
                var query = PostgresQuery(
                    unsafeSQL: """
                        WITH page AS (
                            SELECT user_identifier, access_token, refresh_token, dpop_key, narrowed_tokens, row_mac
                            FROM tokend_credentials \(last == nil ? "" : "WHERE user_identifier > $1")
                            ORDER BY user_identifier LIMIT \(pageSize))
                        SELECT (SELECT max(user_identifier) FROM page), (SELECT count(*) FROM page),
                            coalesce((SELECT array_agg(DISTINCT encode(substring(k FROM 2 FOR 8), 'hex'))
                                      FROM page, LATERAL (VALUES (access_token), (refresh_token), (dpop_key), (narrowed_tokens), (row_mac)) v(k)
                                      WHERE k IS NOT NULL), '{}')
                        """)
                if let last { try query.binds.append(last) }
                for try await answer in try await client.query(query, logger: logger).decode((String?, Int64, [String]).self) {
                    return answer
                }
                return (nil, 0, [])
            }
            ids.formUnion(found)
            guard count == Int64(pageSize), let end else { break }
            last = end
        }
        return ids
    }

    /// One row of the start-up read: its tag checked, its metadata decoded, its access token
    /// kept sealed. The content digest is computed from the cells as received (no copy of a
    /// token into an array of its own).
    ///
    /// - Throws: ``StorageError`` `.integrity` if the tag does not match, `.unknownKey` if it
    ///   names a key the keyring lacks, `.corruptRecord` for a value that cannot be read.
    static func indexedRow(
        _ row: PostgresRow, opener: SealedTokenOpener, store: String, keyring: Keyring, readers cache: inout [String: [Reader]]
    ) throws -> IndexedCredential {
        let cells = row.makeRandomAccess()
        let user = (try? cells[indexUserPosition].decode(String.self)) ?? "?"
        func corrupt(_ column: String, _ problem: String = "unexpected type or missing") -> StorageError {
            StorageError(code: .corruptRecord, message: "stored credential '\(user)' has an invalid \(column): \(problem)")
        }
        // Every authenticated column as stored, by position in ``authenticatedColumns``.
        var stored: [StoredCell] = []
        stored.reserveCapacity(authenticatedColumns.count)
        var content: [UInt8] = []
        content.reserveCapacity(768)
        var status: [(String, AuthenticatedValue)] = []
        status.reserveCapacity(statusColumns.count)
        for (index, (name, kind)) in authenticatedColumns.enumerated() {
            let cell: StoredCell
            do {
                switch kind {
                case .text: cell = .text(try cells[index].decode(String?.self))
                case .bigint: cell = .bigint(try cells[index].decode(Int64?.self))
                case .bytes: cell = .bytes(try cells[index].decode(ByteBuffer?.self))
                }
            } catch {
                throw corrupt(name)
            }
            stored.append(cell)
            if index >= indexStatusPosition {
                status.append((name, cell.authenticated))
            } else if index < indexReloginPosition || !cell.isNull {
                // Empty re-login columns are left out of the content (tags made before they existed).
                cell.append(name, to: &content)
            }
        }
        guard let generation = try? cells[indexUserPosition + 1].decode(Int64.self) else { throw corrupt("generation") }
        let tag = (try? cells[indexUserPosition + 2].decode(ByteBuffer?.self))?.map { Array($0.readableBytesView) }
        try RowAuthentication.verify(
            tag, store: store, userIdentifier: user, contentDigest: RowAuthentication.digest(ofEncoded: content), status: status,
            generation: generation, keyring: keyring)

        // By position, not by name: a start-up reads a million rows, and a lookup by name hashes
        // the name (twenty of them a row).
        let at = IndexPositions.shared
        func name(_ position: Int) -> String { authenticatedColumns[position].0 }
        func text(_ position: Int) throws -> String {
            guard case .text(let text?) = stored[position] else { throw corrupt(name(position)) }
            return text
        }
        func optionalText(_ position: Int) -> String? {
            guard case .text(let text?) = stored[position] else { return nil }
            return text
        }
        func integer(_ position: Int) throws -> Int64 {
            guard case .bigint(let number?) = stored[position] else { throw corrupt(name(position)) }
            return number
        }
        func time(_ position: Int) throws -> Timestamp { Timestamp(millisecondsSince1970: try integer(position)) }
        func optionalTime(_ position: Int) -> Timestamp? {
            guard case .bigint(let number?) = stored[position] else { return nil }
            return Timestamp(millisecondsSince1970: number)
        }
        func bytes(_ position: Int) -> ByteBuffer? {
            guard case .bytes(let bytes?) = stored[position] else { return nil }
            return bytes
        }
        let stateText = try text(at.state)
        guard let state = CredentialState(rawValue: stateText) else { throw corrupt("state", "unknown state '\(stateText)'") }
        let readersText = try text(at.readers)
        let readers: [Reader]
        if let known = cache[readersText] {
            readers = known
        } else {
            do {
                readers = try ReaderListCoding.decode(readersText)
            } catch .unknownReader(let string) {
                throw corrupt("readers", "unknown reader '\(string)'")
            } catch {
                throw corrupt("readers", "not a JSON array of strings")
            }
            if cache.count < 10_000 { cache[readersText] = readers }
        }
        guard let uid = UInt32(exactly: try integer(at.enrolledUID)), let pid = Int32(exactly: try integer(at.enrolledPID)) else {
            throw corrupt("enrolment", "out of range")
        }
        guard let salt = bytes(at.salt) else { throw corrupt("salt") }
        guard let access = bytes(at.accessToken) else { throw corrupt("access_token") }
        let metadata = Credential(
            userIdentifier: user, provider: try text(at.provider), accessToken: SecretString(""), refreshToken: nil,
            tokenType: try text(at.tokenType), scope: optionalText(at.scope), expiresAt: try time(at.expiresAt),
            issuedAt: try time(at.issuedAt), sessionStartedAt: try time(at.sessionStartedAt), readers: readers,
            enrolment: Enrolment(uid: uid, pid: pid, at: try time(at.enrolledAt)),
            status: RefreshStatus(
                state: state, lastRefreshAt: optionalTime(at.lastRefreshAt), lastError: optionalText(at.lastError),
                refreshCount: try integer(at.refreshCount), grantStartedAt: optionalTime(at.grantStartedAt),
                retryAt: optionalTime(at.retryAt)),
            generation: generation, refreshTokenExpiresAt: optionalTime(at.refreshTokenExpiresAt),
            // An unreadable record is none: at worst the latest passed warning is said again.
            reloginWarnings: optionalText(at.reloginWarnings).flatMap(ReloginWarningRecord.init(encoded:)))
        return IndexedCredential(
            metadata: metadata, hasRefreshToken: bytes(at.refreshToken) != nil,
            accessToken: .sealed(SealedAccessToken(blob: access.readableBytesView, salt: salt.readableBytesView, opener: opener)))
    }

    /// Where the re-login and status columns start in ``authenticatedColumns``.
    static let indexReloginPosition = contentColumns.count
    static let indexStatusPosition = contentColumns.count + reloginColumns.count
}

/// Where each column the start-up read uses is in ``PostgresCredentialStore/authenticatedColumns``,
/// found by name once.
private struct IndexPositions: Sendable {
    static let shared = IndexPositions()

    let provider = position("provider"), salt = position("salt"), accessToken = position("access_token")
    let refreshToken = position("refresh_token"), tokenType = position("token_type"), scope = position("scope")
    let expiresAt = position("expires_at"), issuedAt = position("issued_at"), sessionStartedAt = position("session_started_at")
    let readers = position("readers"), enrolledUID = position("enrolled_uid"), enrolledPID = position("enrolled_pid")
    let enrolledAt = position("enrolled_at"), refreshTokenExpiresAt = position("refresh_token_expires_at")
    let reloginWarnings = position("relogin_warnings"), state = position("state"), lastRefreshAt = position("last_refresh_at")
    let lastError = position("last_error"), refreshCount = position("refresh_count"), grantStartedAt = position("grant_started_at")
    let retryAt = position("retry_at")

    private static func position(_ name: String) -> Int {
        guard let position = PostgresCredentialStore.indexPosition[name] else {
            preconditionFailure("no authenticated column \(name)")
        }
        return position
    }
}

/// An authenticated column's cell as the database sent it (bytes are not copied out).
private enum StoredCell {
    case text(String?)
    case bigint(Int64?)
    case bytes(ByteBuffer?)

    var isNull: Bool {
        switch self {
        case .text(let value): value == nil
        case .bigint(let value): value == nil
        case .bytes(let value): value == nil
        }
    }

    /// The value as ``RowAuthentication`` authenticates it.
    var authenticated: AuthenticatedValue {
        switch self {
        case .text(let value): .text(value)
        case .bigint(let value): .integer(value)
        case .bytes(let value): .bytes(value.map { Array($0.readableBytesView) })
        }
    }

    /// Appends the cell in the tags' encoding (``RowAuthentication/append(_:_:to:)``).
    func append(_ name: String, to bytes: inout [UInt8]) {
        switch self {
        case .text(let value): RowAuthentication.append(name, .text(value), to: &bytes)
        case .bigint(let value): RowAuthentication.append(name, .integer(value), to: &bytes)
        case .bytes(let value): RowAuthentication.appendBytes(name, value?.readableBytesView, to: &bytes)
        }
    }
}
