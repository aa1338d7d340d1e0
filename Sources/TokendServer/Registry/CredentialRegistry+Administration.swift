import TokendCore
import TokendProtocol
import TokendStorage

/// Administration of the store as a whole: backups and master-key rotation.
extension CredentialRegistry {
    // MARK: Backup

    /// A consistent copy of the store (administrators only; the router checks).
    func backup(caller: CallerIdentity) async throws(VarlinkError) -> StoreBackup {
        do {
            let backup = try await store.backup()
            logger.notice(
                "store backed up",
                metadata: [
                    "credentials": "\(backup.credentials)", "bytes": "\(backup.bytes.count)", "uid": "\(caller.uid)",
                    "pid": "\(caller.pid)",
                ])
            return backup
        } catch let error as StorageError where error.code == .unsupported || error.code == .fileSystem {
            throw .storageFailed(error.message)
        } catch {
            logger.error("backup failed: \(error)")
            throw .storageFailed("the backup could not be made")
        }
    }

    // MARK: Keys

    func rotateKey(caller: CallerIdentity) async throws(VarlinkError) -> (String, Int) {
        if let refusal = gate.keyRotationRefusal { throw .keyRotationUnavailable(refusal) }
        do {
            let result = try await keys.rotate(store: store)
            logger.notice(
                "master key rotated",
                metadata: ["key_id": "\(result.keyID)", "reencrypted": "\(result.reencrypted)", "uid": "\(caller.uid)"])
            return (result.keyID, result.reencrypted)
        } catch let error as KeyManagement.RotationUnavailable {
            throw .keyRotationUnavailable(error.description)
        } catch let error as StorageError where error.code == .rotationRefused {
            throw .keyRotationUnavailable(error.message)
        } catch {
            logger.error("key rotation failed: \(error)")
            throw .storageFailed("key rotation failed")
        }
    }
}
