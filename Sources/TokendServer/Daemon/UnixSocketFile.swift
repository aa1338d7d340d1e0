#if canImport(Glibc)
    import Glibc
#endif

/// Puts a listening Unix socket in the file system with its final mode in one step, as other
/// processes see it, without acting on any name another user can create.
///
/// `bind(2)` creates the socket file with the process's umask; a `chmod` after it leaves a window
/// in which a client of another uid that connects (a companion reconnecting while tokend
/// restarts) gets `EACCES` and may give up. So the socket is bound in a directory of its own,
/// given its mode there, and renamed over `path`: a client finds no socket, the old one, or the
/// new one with its mode.
///
/// The socket's directory may be writable by others (a shared directory without the sticky bit):
/// they can then rename, remove or replace any name in it between two of tokend's steps. So
/// nothing is done by a name there except the final rename. The private directory is made with
/// a random name (`mkdirat` fails rather than use one that exists), opened without following a
/// link and checked to be tokend's own before anything goes in; the socket is bound through that
/// descriptor (`/proc/self/fd/N/`), its mode set and renamed by the descriptor (`fchmodat`,
/// `renameat`), in a directory nobody else can write. A name planted in advance, a link or a
/// directory, is never followed, chmodded, unlinked or bound over.
enum UnixSocketFile {
    /// The largest path `sockaddr_un` holds, without its NUL.
    static let maximumPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// The socket's name inside its private directory.
    static let boundName = "s"

    /// The name prefix of the private directories for the socket `name` (a random suffix follows).
    static func privateDirectoryPrefix(for name: String) -> String { "." + name + ".binding-" }

    /// A listening socket now at its path, and the file it is there (for ``OwnedSocketFile``).
    struct Placed {
        let descriptor: CInt
        let file: OwnedSocketFile
        /// Other users may write the socket's directory and it has no sticky bit: they can remove
        /// or replace the socket file at any time (the daemon warns).
        var othersMayReplaceIt = false
    }

    /// Binds a listening socket that appears at `path` with `mode`.
    ///
    /// - Parameters:
    ///   - path: Where the socket goes; its parent directory must exist.
    ///   - mode: The socket file's mode.
    ///   - backlog: The `listen(2)` backlog.
    ///   - afterBind: Called with the private directory's path once the socket is bound there,
    ///     before its mode is set and it is moved (tests look, or act as another user, there).
    /// - Returns: The listening descriptor (close-on-exec, blocking) and its file.
    /// - Throws: ``ListenerError`` naming what failed.
    static func listen(at path: String, mode: mode_t, backlog: CInt, afterBind: (String) -> Void = { _ in }) throws -> Placed {
        guard path.utf8.count <= maximumPathBytes else {
            throw ListenerError("socket path \(path) is longer than \(maximumPathBytes) bytes")
        }
        let (parent, name) = split(path)
        let parentDescriptor = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard parentDescriptor >= 0 else { throw ListenerError("cannot open \(parent): \(errorText())") }
        defer { close(parentDescriptor) }
        removeLeftovers(of: name, in: parentDescriptor)

        let directory = try PrivateDirectory.make(in: parentDescriptor, prefix: privateDirectoryPrefix(for: name), parent: parent)
        defer { directory.remove() }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw ListenerError("cannot create a socket: \(errorText())") }
        do {
            // Through the directory's descriptor: a name swapped in the parent meanwhile is not followed.
            let viaDescriptor = "/proc/self/fd/\(directory.descriptor)/\(boundName)"
            guard bindUnix(descriptor, to: viaDescriptor) == 0 else {
                throw ListenerError("cannot bind a socket in \(parent) (through \(viaDescriptor); is /proc mounted?): \(errorText())")
            }
            afterBind(parent + "/" + directory.name)
            guard fchmodat(directory.descriptor, boundName, mode, 0) == 0 else {
                throw ListenerError("cannot set mode \(String(mode, radix: 8)) on the socket for \(path): \(errorText())")
            }
            var info = stat()
            guard fstatat(directory.descriptor, boundName, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                throw ListenerError("cannot look at the socket for \(path): \(errorText())")
            }
            guard Glibc.listen(descriptor, backlog) == 0 else { throw ListenerError("cannot listen on \(path): \(errorText())") }
            guard renameat(directory.descriptor, boundName, parentDescriptor, name) == 0 else {
                throw ListenerError("cannot move the socket into place at \(path): \(errorText())")
            }
            var parentInfo = stat()
            let shared = fstat(parentDescriptor, &parentInfo) == 0 && parentInfo.st_mode & 0o022 != 0 && parentInfo.st_mode & S_ISVTX == 0
            return Placed(
                descriptor: descriptor, file: OwnedSocketFile(path: path, device: UInt64(info.st_dev), inode: UInt64(info.st_ino)),
                othersMayReplaceIt: shared)
        } catch {
            unlinkat(directory.descriptor, boundName, 0)
            close(descriptor)
            throw error
        }
    }

    /// The parent directory and the last name of `path` (a relative name's parent is `.`).
    static func split(_ path: String) -> (parent: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        return (parent, String(path[path.index(after: slash)...]))
    }

    /// Private directories a daemon that died mid-bind left: removed with their socket, but only
    /// those that are this uid's own and closed to others (a directory someone else made under
    /// such a name is left alone, and a link is not followed).
    static func removeLeftovers(of name: String, in parent: CInt) {
        let listing = dup(parent)
        guard listing >= 0, let stream = fdopendir(listing) else {
            if listing >= 0 { close(listing) }
            return
        }
        defer { closedir(stream) }
        let prefix = privateDirectoryPrefix(for: name)
        var leftovers: [String] = []
        while let entry = readdir(stream) {
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if entryName.hasPrefix(prefix) { leftovers.append(entryName) }
        }
        for leftover in leftovers {
            guard let directory = PrivateDirectory.open(leftover, in: parent) else { continue }
            var info = stat()
            if fstatat(directory.descriptor, boundName, &info, AT_SYMLINK_NOFOLLOW) == 0, (info.st_mode & S_IFMT) == S_IFSOCK {
                unlinkat(directory.descriptor, boundName, 0)
            }
            directory.remove()
        }
    }

    private static func bindUnix(_ descriptor: CInt, to path: String) -> CInt {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count <= maximumPathBytes else {
            errno = ENAMETOOLONG
            return -1
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    fileprivate static func errorText(_ code: CInt = errno) -> String { String(cString: strerror(code)) }
}

/// A directory only this uid can write, made (or found) by name in a parent others may write,
/// and used only through its descriptor.
private struct PrivateDirectory {
    let parent: CInt
    let name: String
    let descriptor: CInt
    private let device: UInt64
    private let inode: UInt64

    /// Makes a new one named `prefix` and a random suffix.
    static func make(in parent: CInt, prefix: String, parent parentPath: String) throws -> PrivateDirectory {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        for _ in 0..<16 {
            let suffix = String(decoding: (0..<12).map { _ in alphabet.randomElement()! }, as: UTF8.self)
            let name = prefix + suffix
            // mkdirat never follows or reuses a name that exists, a planted one included.
            guard mkdirat(parent, name, 0o700) == 0 else {
                if errno == EEXIST { continue }
                throw ListenerError("cannot create a directory in \(parentPath): \(UnixSocketFile.errorText())")
            }
            guard let directory = open(name, in: parent) else {
                // Replaced between mkdirat and open: someone else acts in the parent.
                throw ListenerError("\(parentPath)/\(name) was replaced while tokend was binding its socket; refusing to use it")
            }
            return directory
        }
        throw ListenerError("cannot find a free name for a directory in \(parentPath)")
    }

    /// The directory `name` in `parent` if it is a directory (not a link to one) of this uid,
    /// closed to group and others.
    static func open(_ name: String, in parent: CInt) -> PrivateDirectory? {
        let descriptor = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else {
            close(descriptor)
            return nil
        }
        return PrivateDirectory(
            parent: parent, name: name, descriptor: descriptor, device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Removes the (empty) directory if its name still leads to it, and closes it.
    func remove() {
        var info = stat()
        if fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode {
            unlinkat(parent, name, AT_REMOVEDIR)
        }
        close(descriptor)
    }
}
