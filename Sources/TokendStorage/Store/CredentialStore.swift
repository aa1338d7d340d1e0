import TokendCore

/// Durable, encrypted storage for credentials, shared by every part of the daemon.
///
/// Implementations: ``SQLiteCredentialStore`` (one host, the default) and, later, a PostgreSQL
/// store shared by several hosts. The contract is written for both:
///
/// - **Durability**: every write has reached stable storage when the call returns, so the
///   daemon may then reply that it succeeded. A write that has started is not abandoned when the
///   calling task is cancelled (a freshly rotated refresh token must never be lost to shutdown).
/// - **Generations**: every write of a credential gives it a new ``Credential/generation``,
///   strictly greater than any generation the store has handed out before (also across remove
///   and re-insert, so an old generation can never match again). Writes that build on a
///   previous read say which generation they read; if the row has moved on, the write fails with
///   `.conflict` instead of overwriting a newer token. Across hosts this is what fences a stale
///   writer.
/// - **Encryption**: tokens are sealed with ``CredentialCipher``; what goes in and comes out
///   here is plaintext.
/// - **Errors**: every method throws ``StorageError``; a read may also throw `CancellationError`
///   when the calling task is cancelled (a write never does, see above).
public protocol CredentialStore: Sendable {
    /// Every credential, decrypted, ordered by user identifier.
    ///
    /// - Throws: ``StorageError``; `.unknownKey` or `.decryption` if any row cannot be opened
    ///   (naming the user identifier), `.corruptRecord` for unreadable metadata.
    func loadAll() async throws -> [Credential]

    /// Every credential without its tokens, the access token read when first used, in no
    /// particular order: what the daemon loads at start-up. The default implementation
    /// (`CredentialStore+Index.swift`) maps ``loadAll()``; override it to skip decryption.
    ///
    /// - Throws: ``StorageError``; `.corruptRecord` for unreadable metadata. A token that
    ///   cannot be opened fails when it is opened (``DeferredAccessToken/open()``), not here.
    func loadIndex() async throws -> [IndexedCredential]

    /// One credential, decrypted, or `nil` if there is none for `userIdentifier`.
    func load(userIdentifier: String) async throws -> Credential?

    /// Those of the credentials named that exist and can be read, decrypted, in no particular
    /// order (a node applying other nodes' changes in a batch). One that is missing, or refused
    /// by the store's checks, is left out: ask ``load(userIdentifier:)`` for it to learn which.
    func load(userIdentifiers: [String]) async throws -> [Credential]

    /// Stores a new credential (enrolment).
    ///
    /// - Parameters:
    ///   - credential: The credential; its `generation` is ignored.
    ///   - replacing: Whether an existing credential for the same user identifier may be
    ///     overwritten (re-enrolment). If `false` and one exists, nothing is written.
    /// - Returns: The credential as stored, with its new generation.
    /// - Throws: `.alreadyExists` if one exists and `replacing` is `false`.
    func insert(_ credential: Credential, replacing: Bool) async throws -> Credential

    /// ``insert(_:replacing:)`` on condition that the stored row is still what the caller
    /// checked its permission against, tested in the same statement or transaction as the write:
    /// a node whose view lags behind the store (a shared store) cannot let a caller overwrite a
    /// credential it has not seen, or one that changed since.
    ///
    /// - Throws: `.conflict` if the stored row is not as expected (the caller re-reads it and
    ///   checks again), `.alreadyExists` as ``insert(_:replacing:)``.
    func insert(_ credential: Credential, replacing: Bool, expecting: StoredRowExpectation) async throws -> Credential

    /// Overwrites a credential if, and only if, it is still at `expectedGeneration`
    /// (compare-and-swap). Tokens are re-sealed under the current key.
    ///
    /// - Parameters:
    ///   - credential: The new value; its `generation` is ignored.
    ///   - expectedGeneration: The generation the caller's copy was read at.
    /// - Returns: The credential as stored, with its new generation.
    /// - Throws: `.conflict` if the stored generation differs, `.notFound` if it is gone.
    func update(_ credential: Credential, expectedGeneration: Int64) async throws -> Credential

    /// Writes only the refresh bookkeeping of a credential, with the same compare-and-swap as
    /// ``update(_:expectedGeneration:)``; tokens are untouched. Used, for example, to mark a
    /// grant as in flight before its request is sent.
    ///
    /// - Returns: The credential's new generation.
    /// - Throws: `.conflict` if the stored generation differs, `.notFound` if it is gone.
    @discardableResult
    func updateStatus(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64

    /// Reads a credential and, if `shouldStart` accepts it, records in the same transaction that
    /// a refresh grant is starting: state `refreshing`, ``RefreshStatus/grantStartedAt`` =
    /// `startedAt`, a new generation.
    ///
    /// The record is the grant's in-flight marker: when the process dies before the grant's
    /// result is stored, start-up finds it and retries at once. It guards against the process
    /// dying (a kill, the OOM killer, a crash), so a store may commit it without waiting for
    /// stable storage as long as it survives the process; the grant's *result* is durable as
    /// always. A marker lost to power failure costs nothing a marker would have bought: the
    /// credential was due, so start-up refreshes it at once anyway.
    ///
    /// - Parameters:
    ///   - userIdentifier: The credential.
    ///   - startedAt: When the grant starts.
    ///   - shouldStart: Called with the stored credential inside the transaction; false leaves
    ///     it as it is.
    /// - Returns: nil if there is no such credential, else whether the grant was marked and the
    ///   credential as stored afterwards.
    ///   - grouping: How long the store may hold the write to commit it with others (see
    ///     ``update(_:expectedGeneration:grouping:)``).
    func beginGrant(
        userIdentifier: String, startedAt: Timestamp, grouping: Duration, shouldStart: @escaping @Sendable (Credential) -> Bool
    ) async throws -> GrantStart?

    /// Writes a grant's in-flight marker (``beginGrant(userIdentifier:startedAt:grouping:shouldStart:)``
    /// by a read and this write): ``updateStatus(userIdentifier:status:expectedGeneration:)``,
    /// which a shared store may make stricter (its marker also renews the node's refresh lease,
    /// and fails when that lease has run out).
    ///
    /// - Returns: The credential's new generation.
    /// - Throws: as ``updateStatus(userIdentifier:status:expectedGeneration:)``.
    func writeGrantMarker(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64

    /// ``update(_:expectedGeneration:)`` for a result nobody is waiting for: the store may hold
    /// the write up to `grouping` so that it commits together with others (group commit). It
    /// is as durable as any update when it returns.
    func update(_ credential: Credential, expectedGeneration: Int64, grouping: Duration) async throws -> Credential

    /// Deletes a credential.
    ///
    /// - Returns: Whether there was one to delete.
    @discardableResult
    func remove(userIdentifier: String) async throws -> Bool

    /// Deletes a credential if, and only if, it is still at `expectedGeneration` (the row the
    /// caller checked its permission against).
    ///
    /// - Returns: Whether it was deleted.
    /// - Throws: `.conflict` if the stored row is at another generation.
    @discardableResult
    func remove(userIdentifier: String, expectedGeneration: Int64) async throws -> Bool

    /// Makes `keyring` the store's keyring and re-seals every token that is not under its current
    /// key, in batches of short transactions. Generations do not change: the credentials' content
    /// is the same, and in-flight compare-and-swap writes must not fail because of a rotation.
    ///
    /// Crash-safe: every blob names its key, so an interrupted run leaves each row readable with
    /// the old or the new key, and running it again finishes the job.
    ///
    /// - Returns: How many credentials were re-sealed.
    /// - Throws: `.unknownKey` if a row is sealed under a key `keyring` does not hold.
    func reencrypt(under keyring: Keyring) async throws -> Int

    /// The ids of the master keys that stored tokens are sealed with.
    func keyIDsInUse() async throws -> Set<String>

    /// Closes the store; later calls fail with `.closed`.
    func close() async throws

    /// Passes a trivial transaction through the store's writer and returns when it is done, so
    /// a health check (the systemd watchdog) can tell a wedged writer from a working one.
    ///
    /// - Throws: ``StorageError``, `.closed` after ``close()``.
    func probeWriter() async throws

    /// A consistent copy of the store, taken while it serves (``StoreBackup``).
    ///
    /// - Throws: `.unsupported` for stores backed up with other tools, `.database` or
    ///   `.fileSystem` if the copy cannot be made or is larger than the store allows.
    func backup() async throws -> StoreBackup
}

extension CredentialStore {
    /// Stores without a single writer to probe are healthy as long as they answer at all.
    public func probeWriter() async throws {}

    /// Stores without an online backup of their own (the shared PostgreSQL store is backed up
    /// with `pg_dump`, as any PostgreSQL database).
    public func backup() async throws -> StoreBackup {
        throw StorageError(code: .unsupported, message: "this store is backed up with its database's own tools (PostgreSQL: pg_dump)")
    }
}

/// A consistent copy of the whole store, taken while it serves: the database file as it was at
/// one moment, every token still sealed under the master key it was sealed with.
public struct StoreBackup: Sendable {
    /// The copy's bytes: a SQLite database, compacted.
    public var bytes: [UInt8]
    /// The credentials it holds.
    public var credentials: Int
    /// Its schema version.
    public var schemaVersion: Int

    public init(bytes: [UInt8], credentials: Int, schemaVersion: Int) {
        self.bytes = bytes
        self.credentials = credentials
        self.schemaVersion = schemaVersion
    }
}

/// What the stored row must be for a conditional write
/// (``CredentialStore/insert(_:replacing:expecting:)``) to go ahead.
public enum StoredRowExpectation: Sendable, Hashable {
    /// No credential is stored under the identifier.
    case absent
    /// The credential is stored at this generation.
    case generation(Int64)

    /// What a caller that sees `generation` (nil: no credential) expects.
    public init(seen generation: Int64?) { self = generation.map { .generation($0) } ?? .absent }
}

/// What ``CredentialStore/beginGrant(userIdentifier:startedAt:shouldStart:)`` did.
public enum GrantStart: Sendable {
    /// The grant is marked in flight; the credential as stored now.
    case started(Credential)
    /// `shouldStart` declined; the credential unchanged.
    case declined(Credential)
}

extension CredentialStore {
    /// A read, then a status write that fails with `.conflict` if the credential changed between
    /// the two: the same outcome as one transaction, in two round trips.
    public func beginGrant(
        userIdentifier: String, startedAt: Timestamp, grouping: Duration, shouldStart: @escaping @Sendable (Credential) -> Bool
    ) async throws -> GrantStart? {
        guard var credential = try await load(userIdentifier: userIdentifier) else { return nil }
        guard shouldStart(credential) else { return .declined(credential) }
        credential.status.state = .refreshing
        credential.status.grantStartedAt = startedAt
        credential.generation = try await writeGrantMarker(
            userIdentifier: userIdentifier, status: credential.status, expectedGeneration: credential.generation
        )
        return .started(credential)
    }

    /// One read per credential.
    public func load(userIdentifiers: [String]) async throws -> [Credential] {
        var credentials: [Credential] = []
        for user in userIdentifiers {
            if let credential = try? await load(userIdentifier: user) { credentials.append(credential) }
        }
        return credentials
    }

    /// A marker is a status write.
    public func writeGrantMarker(userIdentifier: String, status: RefreshStatus, expectedGeneration: Int64) async throws -> Int64 {
        try await updateStatus(userIdentifier: userIdentifier, status: status, expectedGeneration: expectedGeneration)
    }

    /// Stores without group commit write at once.
    public func update(_ credential: Credential, expectedGeneration: Int64, grouping: Duration) async throws -> Credential {
        try await update(credential, expectedGeneration: expectedGeneration)
    }
}
