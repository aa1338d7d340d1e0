import Synchronization
import TokendCore
import TokendOAuth
import TokendProtocol
import TokendStorage

/// The DPoP keys of the credentials programs ask proofs for, opened from the store once and
/// kept with the enrolment of the credential they belong to. A credential keeps its key across
/// refreshes; a replaced one (a new enrolment) has a new key, which is then read again. The
/// view drops a key when its credential is removed or replaced (``forget(_:)``).
final class DPoPKeyCache: Sendable {
    private let keys = Mutex<[String: (enrolment: Enrolment, key: DPoPKey)]>([:])

    /// At most this many keys are kept; more clear the cache (it refills from the store).
    static let capacity = 10_000

    /// Drops the key of `user` (removed or replaced).
    func forget(_ user: String) { _ = keys.withLock { $0.removeValue(forKey: user) } }

    /// Drops every key (the view was replaced as a whole).
    func removeAll() { keys.withLock { $0.removeAll() } }

    func key(of user: String, enrolment: Enrolment) -> DPoPKey? {
        keys.withLock { keys in keys[user].flatMap { $0.enrolment == enrolment ? $0.key : nil } }
    }

    /// Reads the key of `user` from the store, for the token of `entry`.
    /// - Throws: `StorageFailed` when it cannot be read, `InvalidCredential` when the stored
    ///   credential has no key, a retryable `RefreshFailed` when it was replaced since `entry`.
    func load(of user: String, matching entry: ViewEntry, from store: any CredentialStore) async throws(VarlinkError) -> DPoPKey {
        if let known = key(of: user, enrolment: entry.enrolment) { return known }
        let stored: Credential?
        do {
            stored = try await store.load(userIdentifier: user)
        } catch {
            throw .storageFailed("the credential's DPoP key could not be read")
        }
        guard let stored else { throw .unknownUser(user) }
        guard let secret = stored.dpopKey else {
            throw .invalidCredential("'\(user)' has no DPoP key: its tokens cannot be presented with a proof")
        }
        let key: DPoPKey
        do {
            key = try DPoPKey(secret)
        } catch {
            throw .storageFailed(error.description)
        }
        // Replaced since the entry was read: the entry's token is bound to the old key.
        guard stored.enrolment == entry.enrolment else {
            throw .refreshFailed(user, reason: "the credential was replaced while its proof was made; ask again", retryAt: nil)
        }
        keys.withLock { keys in
            if keys.count >= Self.capacity { keys.removeAll() }
            keys[user] = (entry.enrolment, key)
        }
        return key
    }
}
