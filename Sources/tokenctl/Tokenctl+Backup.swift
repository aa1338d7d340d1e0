import ArgumentParser
import TokenctlSupport
import TokendClient

#if canImport(Glibc)
    import Glibc
#endif

extension Tokenctl {
    /// `tokenctl backup FILE`.
    struct Backup: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "backup",
            abstract: "Write a consistent copy of tokend's credential store to a file.",
            discussion: """
                Administrators only. tokend keeps serving while the copy is taken. The file (mode \
                0600, never overwritten unless --force) is a SQLite database in which every token \
                is still encrypted under tokend's master key: keep a copy of the key apart from it. \
                To restore: stop tokend, install the file as tokend.sqlite in its state directory \
                (owned by tokend, mode 0600, without -wal/-shm files), start tokend. A shared \
                PostgreSQL store is backed up with pg_dump instead.
                """
        )

        @OptionGroup var global: GlobalOptions

        @Argument(help: "Where to write the copy.")
        var file: String

        @Flag(help: "Replace FILE if it exists.")
        var force = false

        func run() async throws {
            let client = global.makeClient()
            let copy: StoreBackupCopy
            do {
                copy = try await client.backup()
            } catch {
                throw Terminal.fail(error)
            }
            await client.close()
            do {
                try BackupFile.write(copy.bytes, to: file, replacing: force)
            } catch {
                Terminal.writeError("tokenctl: \(error.description)")
                throw ExitCode(TokenctlExitStatus.other)
            }
            let credentials = copy.credentials == 1 ? "1 credential" : "\(copy.credentials) credentials"
            print("Wrote \(file): \(credentials), \(copy.bytes.count) bytes, schema version \(copy.schemaVersion).")
        }
    }
}

/// Writes a backup as a private file: created 0600 (never through a symlink), written, synced,
/// then renamed into place, so that a crash leaves the old file or the new one.
enum BackupFile {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func write(_ bytes: [UInt8], to path: String, replacing: Bool) throws(Failure) {
        if !replacing, access(path, F_OK) == 0 { throw Failure(description: "\(path) exists; use --force to replace it") }
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw Failure(description: "cannot create \(temporary): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                throw Failure(description: "cannot write \(temporary): \(reason)")
            }
            offset += written
        }
        guard fsync(fd) == 0, close(fd) == 0 else {
            unlink(temporary)
            throw Failure(description: "cannot sync \(temporary): \(String(cString: strerror(errno)))")
        }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw Failure(description: "cannot rename \(temporary) to \(path): \(reason)")
        }
    }
}
