import Foundation
import GRDB
import TokendCore

/// The sealed secrets of a row (its two tokens and, for a DPoP-bound credential, its key) and
/// the salt their subkey was derived from.
struct SealedTokens {
    var salt: [UInt8]
    var accessToken: [UInt8]
    var refreshToken: [UInt8]?
    var dpopKey: [UInt8]?
    var narrowedTokens: [UInt8]?
}

extension SQLiteCredentialStore {
    /// Seals a credential's tokens under a fresh salt and the cipher's current key.
    static func seal(_ credential: Credential, cipher: CredentialCipher) throws -> SealedTokens {
        let salt = CredentialCipher.makeSalt()
        func binding(_ column: TokenColumn) -> SealBinding {
            SealBinding(userIdentifier: credential.userIdentifier, provider: credential.provider, column: column)
        }
        let row = RowCipher(cipher, salt: salt)
        return SealedTokens(
            salt: salt,
            accessToken: try row.seal(credential.accessToken, binding: binding(.accessToken)),
            refreshToken: try credential.refreshToken.map {
                try row.seal($0, binding: binding(.refreshToken))
            },
            dpopKey: try credential.dpopKey.map { try row.seal($0, binding: binding(.dpopKey)) },
            narrowedTokens: try NarrowedTokenCoding.encode(credential.narrowedTokens).map {
                try row.seal($0, binding: binding(.narrowedTokens))
            }
        )
    }

    /// Every column of a row except `user_identifier`, in the order
    /// ``columnValues(_:sealed:generation:updatedAt:)`` gives their values.
    static let writtenColumns =
        [
            "provider", "salt", "access_token", "refresh_token", "token_type", "scope", "expires_at", "issued_at",
            "session_started_at", "readers", "enrolled_uid", "enrolled_pid", "enrolled_at", "dpop_key", "narrowed_tokens",
            "refresh_token_expires_at", "relogin_warnings",
        ] + statusColumns + ["generation", "updated_at"]

    /// The refresh bookkeeping columns, in the order ``statusValues(_:)`` gives their values.
    static let statusColumns = ["state", "last_refresh_at", "last_error", "refresh_count", "grant_started_at", "retry_at"]

    /// The values of ``writtenColumns``.
    static func columnValues(
        _ credential: Credential,
        sealed: SealedTokens,
        generation: Int64,
        updatedAt: Timestamp
    ) -> [(any DatabaseValueConvertible)?] {
        var values: [(any DatabaseValueConvertible)?] = [
            credential.provider,
            Data(sealed.salt),
            Data(sealed.accessToken),
            sealed.refreshToken.map { Data($0) },
            credential.tokenType,
            credential.scope,
            credential.expiresAt.millisecondsSince1970,
            credential.issuedAt.millisecondsSince1970,
            credential.sessionStartedAt.millisecondsSince1970,
            encodeReaders(credential.readers),
            Int64(credential.enrolment.uid),
            Int64(credential.enrolment.pid),
            credential.enrolment.at.millisecondsSince1970,
            sealed.dpopKey.map { Data($0) },
            sealed.narrowedTokens.map { Data($0) },
            credential.refreshTokenExpiresAt?.millisecondsSince1970,
            credential.reloginWarnings?.encoded,
        ]
        values.reserveCapacity(writtenColumns.count)
        values += statusValues(credential.status)
        values += [generation, updatedAt.millisecondsSince1970]
        return values
    }

    /// The values of ``statusColumns``.
    static func statusValues(_ status: RefreshStatus) -> [(any DatabaseValueConvertible)?] {
        [
            status.state.rawValue,
            status.lastRefreshAt?.millisecondsSince1970,
            status.lastError,
            status.refreshCount,
            status.grantStartedAt?.millisecondsSince1970,
            status.retryAt?.millisecondsSince1970,
        ]
    }

    // The statements that write rows, built once: a write's SQL was assembled (and hashed for
    // the statement cache) anew for every write, 2–3 % of the writer's work in a refresh storm.

    /// `INSERT OR REPLACE` of a whole row: `user_identifier`, then ``writtenColumns``.
    static let insertRowSQL = insertSQL(verb: "INSERT OR REPLACE")
    /// `INSERT` of a whole row (bulk loads, which must not replace).
    static let insertNewRowSQL = insertSQL(verb: "INSERT")
    /// Compare-and-swap of ``writtenColumns``; arguments: their values, the user identifier and
    /// the expected generation.
    static let updateRowSQL = compareAndSwapSQL(writtenColumns)
    /// Compare-and-swap of ``statusColumns``, `generation` and `updated_at`.
    static let updateStatusSQL = compareAndSwapSQL(statusColumns + ["generation", "updated_at"])

    private static func insertSQL(verb: String) -> String {
        let columns = ["user_identifier"] + writtenColumns
        return
            "\(verb) INTO credentials (\(columns.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))"
    }

    private static func compareAndSwapSQL(_ columns: [String]) -> String {
        "UPDATE credentials SET \(columns.map { "\($0) = ?" }.joined(separator: ", ")) WHERE user_identifier = ? AND generation = ?"
    }

    static func encodeReaders(_ readers: [Reader]) -> String {
        ReaderListCoding.encode(readers)
    }

    /// The columns a whole credential row is read with, in this order (``credential(from:cipher:)``
    /// finds each by its position here rather than by a name search in the row).
    static let rowColumns = [
        "user_identifier", "provider", "salt", "access_token", "refresh_token", "token_type", "scope", "expires_at",
        "issued_at", "session_started_at", "readers", "enrolled_uid", "enrolled_pid", "enrolled_at", "state",
        "last_refresh_at", "last_error", "refresh_count", "grant_started_at", "retry_at", "generation", "dpop_key",
        "narrowed_tokens", "refresh_token_expires_at", "relogin_warnings",
    ]
    /// `SELECT`'s column list for ``rowColumns``.
    static let rowColumnList = rowColumns.joined(separator: ", ")
    /// One whole row by user identifier.
    static let selectRowSQL = "SELECT \(rowColumnList) FROM credentials WHERE user_identifier = ?"

    /// Decodes and decrypts a `credentials` row.
    static func credential(from row: Row, cipher: CredentialCipher) throws -> Credential {
        let fields = RowFields(row: row)
        let userIdentifier: String = try fields.required("user_identifier")
        let provider: String = try fields.required("provider")
        let salt: Data = try fields.required("salt")
        let row = RowCipher(cipher, salt: salt)
        func open(_ blob: Data, _ column: TokenColumn) throws -> SecretString {
            try row.open(blob, binding: SealBinding(userIdentifier: userIdentifier, provider: provider, column: column))
        }
        let stateText: String = try fields.required("state")
        guard let state = CredentialState(rawValue: stateText) else {
            throw fields.corrupt("state", "unknown state '\(stateText)'")
        }
        return Credential(
            userIdentifier: userIdentifier,
            provider: provider,
            accessToken: try open(try fields.required("access_token"), .accessToken),
            refreshToken: try fields.optional("refresh_token").map { (blob: Data) in try open(blob, .refreshToken) },
            tokenType: try fields.required("token_type"),
            scope: try fields.optional("scope"),
            expiresAt: try fields.timestamp("expires_at"),
            issuedAt: try fields.timestamp("issued_at"),
            sessionStartedAt: try fields.timestamp("session_started_at"),
            readers: try fields.readers("readers"),
            enrolment: Enrolment(
                uid: try fields.integer("enrolled_uid"),
                pid: try fields.integer("enrolled_pid"),
                at: try fields.timestamp("enrolled_at")
            ),
            status: RefreshStatus(
                state: state,
                lastRefreshAt: try fields.optionalTimestamp("last_refresh_at"),
                lastError: try fields.optional("last_error"),
                refreshCount: try fields.required("refresh_count"),
                grantStartedAt: try fields.optionalTimestamp("grant_started_at"),
                retryAt: try fields.optionalTimestamp("retry_at")
            ),
            dpopKey: try fields.optional("dpop_key").map { (blob: Data) in try open(blob, .dpopKey) },
            narrowedTokens: try fields.optional("narrowed_tokens").map { (blob: Data) in
                NarrowedTokenCoding.decode(try open(blob, .narrowedTokens))
            } ?? [],
            generation: try fields.required("generation"),
            refreshTokenExpiresAt: try fields.optionalTimestamp("refresh_token_expires_at"),
            // An unreadable record is none: at worst the latest passed warning is said again.
            reloginWarnings: try (fields.optional("relogin_warnings") as String?).flatMap(ReloginWarningRecord.init(encoded:))
        )
    }
}

/// Typed, throwing access to a row's columns. GRDB's plain subscripts trap on a `NULL` or a
/// value of the wrong type; a damaged database must give an error naming the row, not a crash.
private struct RowFields {
    let row: Row

    var userIdentifier: String {
        guard row.count > 0, let name = String.fromDatabaseValue(row[0] as DatabaseValue) else { return "?" }
        return name
    }

    func corrupt(_ column: String, _ problem: String) -> StorageError {
        StorageError(
            code: .corruptRecord,
            message: "stored credential '\(userIdentifier)' has an invalid \(column): \(problem)"
        )
    }

    /// Each column's position in ``SQLiteCredentialStore/rowColumns``.
    private static let positions: [String: Int] = Dictionary(
        uniqueKeysWithValues: SQLiteCredentialStore.rowColumns.enumerated().map { ($1, $0) }
    )

    func optional<Value: DatabaseValueConvertible>(_ column: String) throws -> Value? {
        guard let position = Self.positions[column], position < row.count else { throw corrupt(column, "not selected") }
        // A raw `DatabaseValue`: nil for NULL, a typed error for a wrong type, never a trap.
        let raw: DatabaseValue = row[position]
        if raw.isNull { return nil }
        guard let decoded = Value.fromDatabaseValue(raw) else {
            throw corrupt(column, "unexpected type")
        }
        return decoded
    }

    func required<Value: DatabaseValueConvertible>(_ column: String) throws -> Value {
        guard let value: Value = try optional(column) else { throw corrupt(column, "missing") }
        return value
    }

    func integer<Value: FixedWidthInteger>(_ column: String) throws -> Value {
        let raw: Int64 = try required(column)
        guard let value = Value(exactly: raw) else { throw corrupt(column, "out of range") }
        return value
    }

    func timestamp(_ column: String) throws -> Timestamp {
        Timestamp(millisecondsSince1970: try required(column))
    }

    func optionalTimestamp(_ column: String) throws -> Timestamp? {
        try (optional(column) as Int64?).map { Timestamp(millisecondsSince1970: $0) }
    }

    func readers(_ column: String) throws -> [Reader] {
        let text: String = try required(column)
        do {
            return try ReaderListCoding.decode(text)
        } catch .unknownReader(let string) {
            throw corrupt(column, "unknown reader '\(string)'")
        } catch {
            throw corrupt(column, "not a JSON array of strings")
        }
    }
}
