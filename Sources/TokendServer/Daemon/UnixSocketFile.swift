#if canImport(Glibc)
    import Glibc
#endif

/// Puts a listening Unix socket in the file system with its final mode in one step, as other
/// processes see it.
///
/// `bind(2)` creates the socket file with the process's umask; a `chmod` after it leaves a window
/// in which a client of another uid that connects (a companion reconnecting while tokend
/// restarts) gets `EACCES` and may give up. So the socket is bound under a temporary name in the
/// same directory, given its mode, and renamed over `path`: a client finds no socket, the old
/// one, or the new one with its mode. The rename keeps the inode, so ``OwnedSocketFile`` taken
/// after it recognises the file.
enum UnixSocketFile {
    /// The largest path `sockaddr_un` holds, without its NUL.
    static let maximumPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// The temporary name `path` is bound under: a hidden sibling, or nil when that name would not
    /// fit in a socket address (the socket is then bound at `path` and its mode set after).
    static func temporaryPath(for path: String) -> String? {
        guard let slash = path.lastIndex(of: "/") else { return nil }
        let name = path[path.index(after: slash)...]
        guard !name.isEmpty else { return nil }
        let temporary = path[...slash] + "." + name + ".binding"
        return temporary.utf8.count <= maximumPathBytes ? String(temporary) : nil
    }

    /// Binds with `bind` (which binds a listening socket at the path it is given) so that `path`
    /// appears with `mode`; `close` undoes the bind when a later step fails.
    static func bind<Bound>(
        path: String, mode: mode_t, bind: (String) async throws -> Bound, close: (Bound) async -> Void
    ) async throws -> Bound {
        guard let temporary = temporaryPath(for: path) else {
            let bound = try await bind(path)
            try await setMode(mode, of: path, undoing: bound, close: close)
            return bound
        }
        // A file left by a daemon that died between its bind and its rename.
        var info = stat()
        if lstat(temporary, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK { unlink(temporary) }
        let bound = try await bind(temporary)
        try await setMode(mode, of: temporary, undoing: bound, close: close)
        guard rename(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            await close(bound)
            throw ListenerError("cannot move the socket into place at \(path): \(String(cString: strerror(code)))")
        }
        return bound
    }

    private static func setMode<Bound>(
        _ mode: mode_t, of path: String, undoing bound: Bound, close: (Bound) async -> Void
    ) async throws {
        guard chmod(path, mode) == 0 else {
            let code = errno
            unlink(path)
            await close(bound)
            throw ListenerError("cannot set mode \(String(mode, radix: 8)) on \(path): \(String(cString: strerror(code)))")
        }
    }
}
