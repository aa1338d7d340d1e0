#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Thin wrappers over the POSIX file calls the store needs, throwing ``StorageError`` with the path
/// and the system's reason. Foundation's `FileManager` is not used here because it cannot express
/// `O_EXCL`, `O_NOFOLLOW`, `fsync` of a directory, or an exact creation mode.
enum POSIXFile {
    /// The system's wording for an `errno` value, e.g. "Permission denied".
    static func reason(_ code: Int32) -> String { String(cString: strerror(code)) }

    static func error(
        _ code: StorageError.Code,
        _ what: String,
        errno value: Int32,
        file: String = #fileID,
        line: Int = #line
    ) -> StorageError {
        StorageError(code: code, message: "\(what): \(reason(value))", file: file, line: line)
    }

    /// `open(2)`, retried on `EINTR`. Returns the descriptor, or -1 with `errno` set.
    static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0) -> Int32 {
        while true {
            let fd = systemOpen(path, flags | O_CLOEXEC, mode)
            if fd >= 0 || errno != EINTR { return fd }
        }
    }

    /// `close(2)` for callers where `close` means something else (a type's own `close()`).
    static func closeDescriptor(_ fd: Int32) { _ = systemClose(fd) }

    /// Reads the whole file behind `fd` from its current offset.
    static func readAll(_ fd: Int32, path: String, code: StorageError.Code, limit: Int = 1 << 20) throws -> [UInt8] {
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw error(code, "cannot read \(path)", errno: errno)
            }
            if count == 0 { break }
            result.append(contentsOf: chunk[0..<count])
            if result.count > limit {
                throw StorageError(code: code, message: "\(path) is larger than \(limit) bytes")
            }
        }
        // The chunk may have held key material: clear it before it is freed (best effort; Swift
        // gives no guarantee that no other copy exists).
        for index in chunk.indices { chunk[index] = 0 }
        return result
    }

    /// Writes all of `bytes`, retrying short writes and `EINTR`.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String, code: StorageError.Code) throws {
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if count < 0 {
                if errno == EINTR { continue }
                throw error(code, "cannot write \(path)", errno: errno)
            }
            offset += count
        }
    }

    static func fsync(_ fd: Int32, path: String, code: StorageError.Code) throws {
        if systemFsync(fd) != 0 { throw error(code, "cannot fsync \(path)", errno: errno) }
    }

    /// Makes a new or renamed directory entry durable: the entry lives in the directory, so the
    /// directory itself must be synced, not only the file.
    static func fsyncDirectory(_ directory: String, code: StorageError.Code) throws {
        let fd = open(directory, O_RDONLY | O_DIRECTORY)
        guard fd >= 0 else { throw error(code, "cannot open directory \(directory)", errno: errno) }
        defer { close(fd) }
        try fsync(fd, path: directory, code: code)
    }

    /// The directory part of `path` (`.` for a bare name).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// The last component of `path`.
    static func baseName(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    /// `mkdir -p` with `mode` for every directory it creates; existing directories are left as
    /// they are (systemd's `StateDirectory=` may have created them with its own mode). Each new
    /// directory's entry is synced into its parent.
    static func makeDirectories(_ path: String, mode: mode_t, code: StorageError.Code) throws {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            let parent = prefix.isEmpty ? "." : prefix
            prefix += prefix.isEmpty || prefix.hasSuffix("/") ? String(component) : "/" + component
            if mkdir(prefix, mode) == 0 {
                try fsyncDirectory(parent, code: code)
                continue
            }
            let mkdirErrno = errno
            var info = stat()
            guard mkdirErrno == EEXIST, stat(prefix, &info) == 0 else {
                throw error(code, "cannot create directory \(prefix)", errno: mkdirErrno)
            }
            guard info.st_mode & S_IFMT == S_IFDIR else {
                throw StorageError(code: code, message: "\(prefix) exists but is not a directory")
            }
        }
    }

    /// A fresh, unguessable name beside `path` for a temporary file. The `.NAME.tmp-` prefix lets
    /// ``removeStaleTemporaries(of:)`` find leftovers of a crash.
    static func temporaryPath(beside path: String) -> String {
        let random = String(UInt64.random(in: .min ... .max), radix: 16)
        return "\(directory(of: path))/\(temporaryPrefix(of: path))\(getpid())-\(random)"
    }

    static func temporaryPrefix(of path: String) -> String { ".\(baseName(of: path)).tmp-" }

    /// Writes `bytes` to a new temporary file beside `path` with `mode`, synced to disk.
    private static func writeTemporary(_ bytes: [UInt8], beside path: String, mode: mode_t, code: StorageError.Code)
        throws -> String
    {
        let temporary = temporaryPath(beside: path)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw error(code, "cannot create \(temporary)", errno: errno) }
        do {
            // The umask can only have removed bits; set the mode exactly anyway so a strict
            // umask cannot leave the owner unable to read its own key.
            if fchmod(fd, mode) != 0 { throw error(code, "cannot chmod \(temporary)", errno: errno) }
            try writeAll(fd, bytes, path: temporary, code: code)
            try fsync(fd, path: temporary, code: code)
            if close(fd) != 0 { throw error(code, "cannot close \(temporary)", errno: errno) }
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        return temporary
    }

    /// Replaces `path` with `bytes` atomically and durably: a temporary file in the same directory
    /// is written and synced, renamed over `path`, and the directory synced. A crash leaves
    /// either the old or the new content at `path`, never a mix.
    static func replaceAtomically(_ bytes: [UInt8], at path: String, mode: mode_t, code: StorageError.Code) throws {
        let temporary = try writeTemporary(bytes, beside: path, mode: mode, code: code)
        if rename(temporary, path) != 0 {
            let renameErrno = errno
            unlink(temporary)
            throw error(code, "cannot rename \(temporary) to \(path)", errno: renameErrno)
        }
        try fsyncDirectory(directory(of: path), code: code)
    }

    /// Creates `path` with `bytes` only if nothing exists there, atomically and durably. The
    /// content is written to a temporary file first and then `link(2)`ed into place, which fails
    /// if the name exists: unlike writing into an `O_EXCL`-created `path` directly, a crash can
    /// never leave an empty or half-written file at `path`.
    ///
    /// - Returns: `false` if `path` already existed (nothing was changed).
    static func createExclusively(_ bytes: [UInt8], at path: String, mode: mode_t, code: StorageError.Code) throws
        -> Bool
    {
        let temporary = try writeTemporary(bytes, beside: path, mode: mode, code: code)
        defer { unlink(temporary) }
        if link(temporary, path) != 0 {
            if errno == EEXIST { return false }
            throw error(code, "cannot create \(path)", errno: errno)
        }
        unlink(temporary)
        try fsyncDirectory(directory(of: path), code: code)
        return true
    }

    /// Deletes temporary files a crash left beside `path` (they may hold key material).
    static func removeStaleTemporaries(of path: String) {
        let directoryPath = directory(of: path)
        let prefix = temporaryPrefix(of: path)
        guard let directory = opendir(directoryPath) else { return }
        defer { closedir(directory) }
        var stale: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name.hasPrefix(prefix) { stale.append(name) }
        }
        for name in stale { unlink("\(directoryPath)/\(name)") }
    }
}

// `open`, `fsync` and `close` are shadowed by the static methods above; these reach the C functions.
private func systemOpen(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { open(path, flags, mode) }
private func systemFsync(_ fd: Int32) -> Int32 { fsync(fd) }
private func systemClose(_ fd: Int32) -> Int32 { close(fd) }
