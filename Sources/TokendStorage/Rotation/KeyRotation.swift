import Logging
import Synchronization

/// Replaces the master key and re-encrypts every credential under the new one, crash-safely.
///
/// The order of durable steps is what makes it safe at every point:
///
/// 1. The key file is atomically rewritten as `[new, old…]` (synced before anything is sealed
///    with `new`), so whichever keys rows end up under, the file holds them.
/// 2. Every row is re-sealed under `new` in batched transactions; each blob names its key.
/// 3. Once no row uses an old key, the key file is atomically rewritten as `[new]`.
///
/// A crash anywhere leaves a key file whose first key is the newest and which still holds every
/// key a row uses; ``resumeIfNeeded(store:keyring:logger:)`` at the next start finishes steps 2
/// and 3. Only one rotation per key file runs at a time in a process.
public enum KeyRotation {
    /// The result of ``rotate(store:keyring:logger:)``.
    public struct Outcome: Sendable {
        /// The id of the new current key.
        public var newKeyID: String
        /// How many credentials were re-encrypted.
        public var reencrypted: Int
        /// The keyring now in the key file (and in the store); use it from now on.
        public var keyring: LoadedKeyring
    }

    /// The result of ``resumeIfNeeded(store:keyring:logger:)``.
    public struct Resumption: Sendable {
        /// How many credentials were re-encrypted under the current key.
        public var reencrypted: Int
        /// Older keys removed from the key file because no credential uses them any more.
        public var droppedKeyIDs: [String]
        /// The keyring now in effect; use it from now on.
        public var keyring: LoadedKeyring
    }

    /// A point in ``rotate(store:keyring:logger:)`` after which tests simulate a crash.
    enum Step: Sendable {
        case keyFileExtended
        case reencrypted
    }

    /// Key files with a rotation running in this process.
    private static let running = Mutex<Set<String>>([])

    /// Generates a new master key and moves every credential to it.
    ///
    /// - Parameters:
    ///   - store: The open store, which must have been opened with `keyring`.
    ///   - keyring: The keys as loaded at start-up (or returned by the last rotation).
    ///   - logger: Where to log progress.
    /// - Returns: The new key's id, the number of credentials re-encrypted, and the new keyring.
    /// - Throws: ``StorageError``: `.rotationRefused` if the keys come from a systemd credential
    ///   (which tokend cannot rewrite), if the key file was changed since it was loaded, or if a
    ///   rotation is already running; `.unknownKey` if a row uses a key the keyring lacks;
    ///   `.keyFile` if the file cannot be written.
    public static func rotate(
        store: some CredentialStore,
        keyring: LoadedKeyring,
        logger: Logger = Logger(label: "tokend.storage")
    ) async throws -> Outcome {
        try await rotate(store: store, keyring: keyring, logger: logger, after: { _ in })
    }

    static func rotate(
        store: some CredentialStore,
        keyring loaded: LoadedKeyring,
        logger: Logger,
        after step: (Step) throws -> Void
    ) async throws -> Outcome {
        guard loaded.isWritable, loaded.source.kind == .keyFile else {
            throw StorageError(
                code: .rotationRefused,
                message: "the master key comes from the systemd credential \(loaded.source.path) "
                    + "($CREDENTIALS_DIRECTORY), which tokend cannot rewrite. To rotate: put a new key "
                    + "(`head -c 32 /dev/urandom | base64`) as the first line of the credential, keep the "
                    + "current key on the next line, re-encrypt it with systemd-creds and restart tokend; "
                    + "it re-encrypts every credential at start-up and logs when the old key can be removed"
            )
        }
        let path = loaded.source.path
        try claim(path)
        defer { running.withLock { _ = $0.remove(path) } }

        // Rewriting a file an administrator has edited since start-up would lose their change
        // (perhaps an older key some row still needs).
        let onDisk = try KeyringLoader.readKeyFile(path)
        guard onDisk.keyIDs == loaded.keyring.keyIDs else {
            throw StorageError(
                code: .rotationRefused,
                message: "key file \(path) has changed since tokend loaded it (it now holds keys "
                    + "\(onDisk.keyIDs.joined(separator: ", ")), tokend uses "
                    + "\(loaded.keyring.keyIDs.joined(separator: ", "))); "
                    + "restart tokend before rotating"
            )
        }
        try await checkAllKeysKnown(store: store, keyring: loaded)

        let newKey = MasterKey.generate()
        let extended = Keyring(current: newKey, older: loaded.keyring.keys)
        // Durable before any row is sealed with the new key.
        try KeyFile.write(extended, to: path)
        logger.notice("key rotation started", metadata: ["newKey": "\(newKey.id)", "keyFile": "\(path)"])
        try step(.keyFileExtended)

        let count = try await store.reencrypt(under: extended)
        try step(.reencrypted)

        let (final, dropped) = try await dropUnusedKeys(store: store, keyring: extended, path: path)
        logger.notice(
            "key rotation finished",
            metadata: [
                "newKey": "\(newKey.id)", "reencrypted": "\(count)", "dropped": "\(dropped.joined(separator: ","))",
            ]
        )
        return Outcome(
            newKeyID: newKey.id,
            reencrypted: count,
            keyring: LoadedKeyring(keyring: final, source: KeySource(kind: .keyFile, path: path), isWritable: true)
        )
    }

    /// Finishes an interrupted rotation; call it at start-up, after opening the store.
    ///
    /// Re-encrypts every credential not under the current key. Then, if the key file is
    /// writable, rewrites it without the older keys no credential uses any more; a systemd
    /// credential is left alone and the unused keys are only logged.
    ///
    /// - Parameters:
    ///   - store: The open store, opened with `keyring`.
    ///   - keyring: The keys as loaded at start-up.
    ///   - logger: Where to log what was done.
    /// - Returns: What was re-encrypted and dropped, and the keyring now in effect.
    /// - Throws: ``StorageError`` with code `.unknownKey` (before changing anything) if some
    ///   credential is sealed with a key the keyring lacks, e.g. because the key file was
    ///   replaced or regenerated.
    public static func resumeIfNeeded(
        store: some CredentialStore,
        keyring loaded: LoadedKeyring,
        logger: Logger = Logger(label: "tokend.storage")
    ) async throws -> Resumption {
        try await checkAllKeysKnown(store: store, keyring: loaded)
        let current = loaded.keyring.current
        var result = Resumption(reencrypted: 0, droppedKeyIDs: [], keyring: loaded)
        if try await store.keyIDsInUse().contains(where: { $0 != current.id }) {
            result.reencrypted = try await store.reencrypt(under: loaded.keyring)
            logger.notice(
                "finished re-encrypting credentials under the current master key",
                metadata: ["key": "\(current.id)", "reencrypted": "\(result.reencrypted)"]
            )
        }
        guard loaded.keyring.keys.count > 1 else { return result }

        if loaded.isWritable && loaded.source.kind == .keyFile {
            let path = loaded.source.path
            try claim(path)
            defer { running.withLock { _ = $0.remove(path) } }
            let (final, dropped) = try await dropUnusedKeys(store: store, keyring: loaded.keyring, path: path)
            result.droppedKeyIDs = dropped
            result.keyring.keyring = final
            if !dropped.isEmpty {
                logger.notice(
                    "removed master keys no credential uses from the key file",
                    metadata: ["keyFile": "\(path)", "dropped": "\(dropped.joined(separator: ","))"]
                )
            }
        } else {
            let inUse = try await store.keyIDsInUse()
            let unused = loaded.keyring.keys.dropFirst().map(\.id).filter { !inUse.contains($0) }
            if !unused.isEmpty {
                logger.notice(
                    "older master keys in the systemd credential are no longer used and can be removed from it",
                    metadata: ["credential": "\(loaded.source.path)", "unused": "\(unused.joined(separator: ","))"]
                )
            }
        }
        return result
    }

    private static func claim(_ path: String) throws {
        let claimed = running.withLock { $0.insert(path).inserted }
        guard claimed else {
            throw StorageError(code: .rotationRefused, message: "a key rotation of \(path) is already running")
        }
    }

    /// Refuses to go on when some credential is sealed with a key the keyring does not hold:
    /// dropping keys or rotating then could make that loss permanent.
    private static func checkAllKeysKnown(store: some CredentialStore, keyring: LoadedKeyring) async throws {
        let unknown = try await store.keyIDsInUse().subtracting(keyring.keyring.keyIDs)
        guard unknown.isEmpty else {
            throw StorageError(
                code: .unknownKey,
                message:
                    "stored credentials are sealed with master key(s) \(unknown.sorted().joined(separator: ", ")), "
                    + "which \(keyring.source) does not contain "
                    + "(it holds \(keyring.keyring.keyIDs.joined(separator: ", "))); "
                    + "was the key file replaced or regenerated? Put the missing key(s) back as later lines, "
                    + "after the current key, and restart tokend"
            )
        }
    }

    /// Rewrites the key file without the older keys no row uses, and gives the store the
    /// trimmed keyring.
    private static func dropUnusedKeys(store: some CredentialStore, keyring: Keyring, path: String) async throws
        -> (Keyring, [String])
    {
        let inUse = try await store.keyIDsInUse()
        let kept = keyring.keys.dropFirst().filter { inUse.contains($0.id) }
        let dropped = keyring.keys.dropFirst().filter { !inUse.contains($0.id) }.map(\.id)
        guard !dropped.isEmpty else { return (keyring, []) }
        let trimmed = Keyring(current: keyring.current, older: Array(kept))
        try KeyFile.write(trimmed, to: path)
        // Nothing is left to re-seal; this only replaces the store's keyring so the retired key
        // is not kept in memory.
        _ = try await store.reencrypt(under: trimmed)
        return (trimmed, dropped)
    }
}
