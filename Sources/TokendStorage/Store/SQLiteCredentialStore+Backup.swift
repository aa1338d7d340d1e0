import GRDB

#if canImport(Glibc)
    import Glibc
#endif

extension SQLiteCredentialStore {
    /// The largest backup handed out over the socket; a larger store is copied with the
    /// daemon stopped (docs/operations.md).
    public static let maximumBackupBytes = 512 << 20

    /// A consistent online copy (`VACUUM INTO`): it runs on the writer connection between
    /// writes, so it sees one committed state, compacted, without the WAL. The copy is written
    /// beside the database, in the state directory (mode 0700: nobody else can open it, whatever
    /// the file's mode, and the process-wide umask is left alone), made 0600, checked with
    /// `PRAGMA integrity_check`, read, and removed.
    public func backup() async throws -> StoreBackup {
        let path = "\(POSIXFile.directory(of: databasePath))/backup-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).sqlite"
        defer { unlink(path) }
        do {
            try await pool.writeWithoutTransaction { db in try db.execute(sql: "VACUUM INTO ?", arguments: [path]) }
        } catch {
            throw Self.storageError(error, "cannot copy the credential database")
        }
        chmod(path, 0o600)
        var info = stat()
        guard stat(path, &info) == 0 else { throw StorageError(code: .fileSystem, message: "the backup copy \(path) vanished") }
        guard Int(info.st_size) <= Self.maximumBackupBytes else {
            throw StorageError(
                code: .fileSystem,
                message:
                    "the store is \(info.st_size >> 20) MiB, more than an online backup carries (\(Self.maximumBackupBytes >> 20) MiB); copy \(databasePath) with tokend stopped"
            )
        }
        let (credentials, schemaVersion): (Int, Int)
        do {
            var configuration = GRDB.Configuration()
            configuration.readonly = true
            let copy = try DatabaseQueue(path: path, configuration: configuration)
            (credentials, schemaVersion) = try await copy.read { db in
                let check = try String.fetchAll(db, sql: "PRAGMA integrity_check")
                guard check == ["ok"] else {
                    throw StorageError(
                        code: .database, message: "the backup copy failed its integrity check: \(check.prefix(3).joined(separator: "; "))")
                }
                return (
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM credentials") ?? 0,
                    try Int.fetchOne(db, sql: "SELECT value FROM meta WHERE key = 'schema_version'") ?? 0
                )
            }
            try copy.close()
        } catch let error as StorageError {
            throw error
        } catch {
            throw Self.storageError(error, "cannot check the backup copy")
        }
        let fd = POSIXFile.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXFile.error(.fileSystem, "cannot read the backup copy \(path)", errno: errno) }
        defer { POSIXFile.closeDescriptor(fd) }
        let bytes = try POSIXFile.readAll(fd, path: path, code: .fileSystem, limit: Self.maximumBackupBytes)
        return StoreBackup(bytes: bytes, credentials: credentials, schemaVersion: schemaVersion)
    }
}
