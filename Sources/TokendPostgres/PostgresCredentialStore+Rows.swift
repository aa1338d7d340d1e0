import Foundation
import NIOCore
import PostgresNIO
import TokendCore
import TokendStorage

/// A value bound into a statement: the store's columns are text, bigint or bytea.
enum ColumnValue: Sendable {
    case text(String?)
    case bigint(Int64?)
    case bytes([UInt8]?)

    /// Whether the column is SQL `NULL`.
    var isNull: Bool {
        switch self {
        case .text(let value): value == nil
        case .bigint(let value): value == nil
        case .bytes(let value): value == nil
        }
    }

    func append(to bindings: inout PostgresBindings) throws {
        switch self {
        case .text(let value): try bindings.append(value)
        case .bigint(let value): try bindings.append(value)
        case .bytes(let value): try bindings.append(value.map { ByteBuffer(bytes: $0) })
        }
    }

    /// The value as ``RowAuthentication`` authenticates it.
    var authenticated: AuthenticatedValue {
        switch self {
        case .text(let value): .text(value)
        case .bigint(let value): .integer(value)
        case .bytes(let value): .bytes(value)
        }
    }
}

/// A column's type in the store.
enum ColumnKind: Sendable {
    case text, bigint, bytes
}

/// What ``PostgresCredentialStore`` authenticates of a row: its content digest, its refresh
/// bookkeeping and its generation.
struct RowAuthenticity: Sendable {
    var contentDigest: [UInt8]
    var status: [(String, AuthenticatedValue)]
    /// The row's salt: new with every write of the content (a re-seal by key rotation too,
    /// which keeps the generation), so a status-only write can require that the content it
    /// authenticates is still the stored one.
    var salt: [UInt8] = []

    init(_ columns: [(String, ColumnValue)]) {
        let status = Self.statusNames
        if case .bytes(let salt?)? = columns.first(where: { $0.0 == "salt" })?.1 { self.salt = salt }
        let relogin = Self.reloginNames
        // Empty re-login columns are left out, so tags made before those columns existed hold.
        let content = columns.filter { !status.contains($0.0) && !(relogin.contains($0.0) && $0.1.isNull) }
        contentDigest = RowAuthentication.contentDigest(content.map { ($0.0, $0.1.authenticated) })
        self.status = columns.filter { status.contains($0.0) }.map { ($0.0, $0.1.authenticated) }
    }

    private static let statusNames = Set(PostgresCredentialStore.statusColumns.map(\.0))
    private static let reloginNames = Set(PostgresCredentialStore.reloginColumns.map(\.0))

    init(contentDigest: [UInt8], status: [(String, ColumnValue)]) {
        self.contentDigest = contentDigest
        self.status = status.map { ($0.0, $0.1.authenticated) }
    }

    func tag(store: String, _ user: String, generation: Int64, keyring: Keyring) -> [UInt8] {
        RowAuthentication.tag(
            store: store, userIdentifier: user, contentDigest: contentDigest, status: status, generation: generation, keyring: keyring)
    }
}

extension PostgresCredentialStore {
    /// The columns `SELECT`ed for a credential, in the order ``credential(from:cipher:)`` reads.
    static let selectColumns = """
        user_identifier, provider, salt, access_token, refresh_token, token_type, scope, expires_at, issued_at,
        session_started_at, readers, enrolled_uid, enrolled_pid, enrolled_at, state, last_refresh_at, last_error,
        refresh_count, grant_started_at, retry_at, generation, dpop_key, narrowed_tokens, refresh_token_expires_at,
        relogin_warnings, row_mac
        """

    /// The columns of a row's content (everything but the user identifier, the refresh
    /// bookkeeping, the generation and `updated_at`), in the order ``columnValues(_:cipher:)``
    /// lists them and ``RowAuthentication`` digests them, with their kinds.
    static let contentColumns: [(String, ColumnKind)] = [
        ("provider", .text), ("salt", .bytes), ("access_token", .bytes), ("refresh_token", .bytes), ("token_type", .text),
        ("scope", .text), ("expires_at", .bigint), ("issued_at", .bigint), ("session_started_at", .bigint), ("readers", .text),
        ("enrolled_uid", .bigint), ("enrolled_pid", .bigint), ("enrolled_at", .bigint), ("dpop_key", .bytes),
        ("narrowed_tokens", .bytes),
    ]

    /// The re-login columns (the refresh token's stated expiry, the warnings said), after the
    /// content columns. Authenticated with them when set; a row written before they existed has
    /// them empty and a tag made without them, which stays valid.
    static let reloginColumns: [(String, ColumnKind)] = [("refresh_token_expires_at", .bigint), ("relogin_warnings", .text)]

    /// The refresh bookkeeping's columns, in the order ``statusValues(_:)`` lists them.
    static let statusColumns: [(String, ColumnKind)] = [
        ("state", .text), ("last_refresh_at", .bigint), ("last_error", .text), ("refresh_count", .bigint),
        ("grant_started_at", .bigint), ("retry_at", .bigint),
    ]

    /// Every column of a row except `user_identifier`, `generation`, `updated_at` and `row_mac`,
    /// with freshly sealed tokens: the content columns, then the status columns.
    static func columnValues(_ credential: Credential, cipher: CredentialCipher) throws -> [(String, ColumnValue)] {
        let salt = CredentialCipher.makeSalt()
        func binding(_ column: TokenColumn) -> SealBinding {
            SealBinding(userIdentifier: credential.userIdentifier, provider: credential.provider, column: column)
        }
        let access = try cipher.seal(credential.accessToken, salt: salt, binding: binding(.accessToken))
        let refresh = try credential.refreshToken.map { try cipher.seal($0, salt: salt, binding: binding(.refreshToken)) }
        let dpopKey = try credential.dpopKey.map { try cipher.seal($0, salt: salt, binding: binding(.dpopKey)) }
        let narrowed = try NarrowedTokenCoding.encode(credential.narrowedTokens).map {
            try cipher.seal($0, salt: salt, binding: binding(.narrowedTokens))
        }
        return [
            ("provider", .text(credential.provider)),
            ("salt", .bytes(salt)),
            ("access_token", .bytes(access)),
            ("refresh_token", .bytes(refresh)),
            ("token_type", .text(credential.tokenType)),
            ("scope", .text(credential.scope)),
            ("expires_at", .bigint(credential.expiresAt.millisecondsSince1970)),
            ("issued_at", .bigint(credential.issuedAt.millisecondsSince1970)),
            ("session_started_at", .bigint(credential.sessionStartedAt.millisecondsSince1970)),
            ("readers", .text(try encodeReaders(credential.readers))),
            ("enrolled_uid", .bigint(Int64(credential.enrolment.uid))),
            ("enrolled_pid", .bigint(Int64(credential.enrolment.pid))),
            ("enrolled_at", .bigint(credential.enrolment.at.millisecondsSince1970)),
            ("dpop_key", .bytes(dpopKey)),
            ("narrowed_tokens", .bytes(narrowed)),
            ("refresh_token_expires_at", .bigint(credential.refreshTokenExpiresAt?.millisecondsSince1970)),
            ("relogin_warnings", .text(credential.reloginWarnings?.encoded)),
        ] + statusValues(credential.status)
    }

    static func statusValues(_ status: RefreshStatus) -> [(String, ColumnValue)] {
        [
            ("state", .text(status.state.rawValue)),
            ("last_refresh_at", .bigint(status.lastRefreshAt?.millisecondsSince1970)),
            ("last_error", .text(status.lastError)),
            ("refresh_count", .bigint(status.refreshCount)),
            ("grant_started_at", .bigint(status.grantStartedAt?.millisecondsSince1970)),
            ("retry_at", .bigint(status.retryAt?.millisecondsSince1970)),
        ]
    }

    static func encodeReaders(_ readers: [Reader]) throws -> String {
        String(decoding: try JSONEncoder().encode(readers.map(\.description)), as: UTF8.self)
    }

    /// Decodes a row selected with ``selectColumns``, checks its authentication tag for the
    /// store `store`, and decrypts it.
    ///
    /// - Returns: the credential and the digest of its content (for a later status-only write).
    /// - Throws: ``StorageError`` `.integrity` if the tag does not match (the row was edited
    ///   outside tokend, or comes from another store), `.corruptRecord` or `.decryption` as before.
    static func verifiedCredential(from row: PostgresRow, cipher: CredentialCipher, store: String) throws -> (Credential, RowAuthenticity) {
        let user = (try? row.makeRandomAccess()["user_identifier"].decode(String.self)) ?? "?"
        let (authenticity, generation, tag) = try authenticity(of: row)
        try RowAuthentication.verify(
            tag, store: store, userIdentifier: user, contentDigest: authenticity.contentDigest, status: authenticity.status,
            generation: generation, keyring: cipher.keyring)
        return (try credential(from: row, cipher: cipher), authenticity)
    }

    /// What a row's tag authenticates, read from the row as stored, and the tag.
    static func authenticity(of row: PostgresRow) throws -> (authenticity: RowAuthenticity, generation: Int64, tag: [UInt8]?) {
        let cells = row.makeRandomAccess()
        let user = (try? cells["user_identifier"].decode(String.self)) ?? "?"
        func raw(_ columns: [(String, ColumnKind)]) throws -> [(String, ColumnValue)] {
            try columns.map { name, kind in
                do {
                    switch kind {
                    case .text: return (name, .text(try cells[name].decode(String?.self)))
                    case .bigint: return (name, .bigint(try cells[name].decode(Int64?.self)))
                    case .bytes: return (name, .bytes(try cells[name].decode(ByteBuffer?.self).map { Array($0.readableBytesView) }))
                    }
                } catch {
                    throw StorageError(code: .corruptRecord, message: "stored credential '\(user)' has an invalid \(name)")
                }
            }
        }
        let authenticity = RowAuthenticity(try raw(contentColumns) + raw(reloginColumns) + raw(statusColumns))
        guard let generation = try? cells["generation"].decode(Int64.self) else {
            throw StorageError(code: .corruptRecord, message: "stored credential '\(user)' has an invalid generation")
        }
        let tag = try? cells["row_mac"].decode(ByteBuffer?.self).map { Array($0.readableBytesView) }
        return (authenticity, generation, tag ?? nil)
    }

    /// Decodes and decrypts a row selected with ``selectColumns``, without checking its
    /// authentication tag (``verifiedCredential(from:cipher:store:)`` checks it).
    static func credential(from row: PostgresRow, cipher: CredentialCipher) throws -> Credential {
        let cells = row.makeRandomAccess()
        let user = (try? cells["user_identifier"].decode(String.self)) ?? "?"
        func corrupt(_ column: String, _ problem: String) -> StorageError {
            StorageError(code: .corruptRecord, message: "stored credential '\(user)' has an invalid \(column): \(problem)")
        }
        func value<T: PostgresDecodable>(_ column: String, _ type: T.Type = T.self) throws -> T {
            do { return try cells[column].decode(T.self) } catch { throw corrupt(column, "unexpected type or missing") }
        }
        func time(_ column: String) throws -> Timestamp { Timestamp(millisecondsSince1970: try value(column, Int64.self)) }
        func optionalTime(_ column: String) throws -> Timestamp? {
            try value(column, Int64?.self).map { Timestamp(millisecondsSince1970: $0) }
        }
        let provider: String = try value("provider")
        let salt = Array(try value("salt", ByteBuffer.self).readableBytesView)
        func open(_ buffer: ByteBuffer, _ column: TokenColumn) throws -> SecretString {
            try cipher.open(
                Array(buffer.readableBytesView), salt: salt,
                binding: SealBinding(userIdentifier: user, provider: provider, column: column)
            )
        }
        let stateText: String = try value("state")
        guard let state = CredentialState(rawValue: stateText) else { throw corrupt("state", "unknown state '\(stateText)'") }
        let readersText: String = try value("readers")
        guard let readerStrings = try? JSONDecoder().decode([String].self, from: Data(readersText.utf8)) else {
            throw corrupt("readers", "not a JSON array of strings")
        }
        let readers = try readerStrings.map { text in
            guard let reader = Reader(text) else { throw corrupt("readers", "unknown reader '\(text)'") }
            return reader
        }
        guard let uid = UInt32(exactly: try value("enrolled_uid", Int64.self)),
            let pid = Int32(exactly: try value("enrolled_pid", Int64.self))
        else { throw corrupt("enrolment", "out of range") }
        return Credential(
            userIdentifier: user,
            provider: provider,
            accessToken: try open(try value("access_token"), .accessToken),
            refreshToken: try value("refresh_token", ByteBuffer?.self).map { try open($0, .refreshToken) },
            tokenType: try value("token_type"),
            scope: try value("scope", String?.self),
            expiresAt: try time("expires_at"),
            issuedAt: try time("issued_at"),
            sessionStartedAt: try time("session_started_at"),
            readers: readers,
            enrolment: Enrolment(uid: uid, pid: pid, at: try time("enrolled_at")),
            status: RefreshStatus(
                state: state,
                lastRefreshAt: try optionalTime("last_refresh_at"),
                lastError: try value("last_error", String?.self),
                refreshCount: try value("refresh_count"),
                grantStartedAt: try optionalTime("grant_started_at"),
                retryAt: try optionalTime("retry_at")
            ),
            dpopKey: try value("dpop_key", ByteBuffer?.self).map { try open($0, .dpopKey) },
            narrowedTokens: try value("narrowed_tokens", ByteBuffer?.self).map {
                NarrowedTokenCoding.decode(try open($0, .narrowedTokens))
            } ?? [],
            generation: try value("generation"),
            refreshTokenExpiresAt: try optionalTime("refresh_token_expires_at"),
            // An unreadable record is none: at worst the latest passed warning is said again.
            reloginWarnings: try value("relogin_warnings", String?.self).flatMap(ReloginWarningRecord.init(encoded:))
        )
    }
}
