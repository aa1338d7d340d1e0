#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A small file of the daemon's own bookkeeping in its state directory: not secret, but
/// trusted, so it is read only when this process's user owns it and nobody else may write it,
/// never through a symbolic link, and replaced atomically and durably (mode 0600).
public enum StateFile {
    /// The file's bytes, or `nil` when there is none.
    ///
    /// - Throws: ``StorageError`` `.fileSystem` when it cannot be read, is larger than `limit`,
    ///   or is not this user's alone to write.
    public static func read(_ path: String, limit: Int = 16 << 20) throws -> [UInt8]? {
        let fd = POSIXFile.open(path, O_RDONLY | O_NOFOLLOW)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw POSIXFile.error(.fileSystem, "cannot open \(path)", errno: errno)
        }
        defer { POSIXFile.closeDescriptor(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw POSIXFile.error(.fileSystem, "cannot stat \(path)", errno: errno) }
        guard info.st_uid == geteuid(), info.st_mode & (S_IWGRP | S_IWOTH) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw StorageError(code: .fileSystem, message: "\(path) is not a regular file that only tokend's user may write; it is ignored")
        }
        return try POSIXFile.readAll(fd, path: path, code: .fileSystem, limit: limit)
    }

    /// Replaces the file with `bytes`: written beside it, synced, renamed over it.
    public static func replace(_ path: String, with bytes: [UInt8]) throws {
        try POSIXFile.replaceAtomically(bytes, at: path, mode: 0o600, code: .fileSystem)
    }
}
