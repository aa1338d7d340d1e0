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

    /// Stores a new credential (enrolment).
    ///
    /// - Parameters:
    ///   - credential: The credential; its `generation` is ignored.
    ///   - replacing: Whether an existing credential for the same user identifier may be
    ///     overwritten (re-enrolment). If `false` and one exists, nothing is written.
    /// - Returns: The credential as stored, with its new generation.
    /// - Throws: `.alreadyExists` if one exists and `replacing` is `false`.
    func insert(_ credential: Credential, replacing: Bool) async throws -> Credential

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

    /// Deletes a credential.
    ///
    /// - Returns: Whether there was one to delete.
    @discardableResult
    func remove(userIdentifier: String) async throws -> Bool

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
}

extension CredentialStore {
    /// Stores without a single writer to probe are healthy as long as they answer at all.
    public func probeWriter() async throws {}
}
