import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An exclusive lock on the state directory, so only one tokend uses its database at a time.
///
/// It is a `flock(2)` on `<directory>/tokend.lock`, which holds the holder's pid for the message
/// another process gets. The kernel drops the lock when the holder exits, however it exits, so a
/// crash never leaves a stale lock behind; the pid in the file is informational only. The file is
/// never deleted: unlinking a lock file lets two processes lock two different inodes.
public final class StateDirectoryLock: Sendable {
    /// The lock file's name inside the state directory.
    public static let fileName = "tokend.lock"

    /// The locked directory.
    public let directory: String
    /// The lock file.
    public let path: String
    private let descriptor: Mutex<Int32?>

    private init(directory: String, path: String, descriptor: Int32) {
        self.directory = directory
        self.path = path
        self.descriptor = Mutex(descriptor)
    }

    /// Takes the lock without waiting.
    ///
    /// Creates the directory (0700) and the lock file (0600) if needed, locks the file, and
    /// writes the current pid into it.
    ///
    /// - Parameter directory: The state directory.
    /// - Returns: The held lock; keep it for the life of the process, or call ``release()``.
    /// - Throws: ``StorageError`` with code `.locked` and a message such as "another tokend
    ///   (pid 1234) is already using /var/lib/tokend" if another open lock (another process, or
    ///   an earlier unreleased acquisition in this one) holds it; `.fileSystem` if the file
    ///   cannot be created.
    public static func acquire(directory: String) throws -> StateDirectoryLock {
        try POSIXFile.makeDirectories(directory, mode: 0o700, code: .fileSystem)
        let path = "\(directory)/\(fileName)"
        let fd = POSIXFile.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw POSIXFile.error(.fileSystem, "cannot open lock file \(path)", errno: errno) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let lockErrno = errno
            if lockErrno == EINTR { continue }
            let holder = lockErrno == EWOULDBLOCK ? readPID(fd) : nil
            POSIXFile.closeDescriptor(fd)
            guard lockErrno == EWOULDBLOCK else {
                throw POSIXFile.error(.fileSystem, "cannot lock \(path)", errno: lockErrno)
            }
            let who = holder.map { "another tokend (pid \($0))" } ?? "another tokend"
            throw StorageError(
                code: .locked,
                message: "\(who) is already using \(directory) (it holds the lock on \(path))"
            )
        }
        // Record who holds the lock. Failing to write it is not worth refusing to start over.
        let pid = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        }
        return StateDirectoryLock(directory: directory, path: path, descriptor: fd)
    }

    /// The pid a holder wrote into the lock file, if it has written one yet.
    private static func readPID(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let text = String(decoding: buffer[0..<count], as: UTF8.self)
        return text.split(whereSeparator: \.isWhitespace).first.flatMap { Int32($0) }
    }

    /// Whether this object still holds the lock.
    public var isHeld: Bool { descriptor.withLock { $0 != nil } }

    /// Releases the lock (idempotent). It is also released when this object is freed and when
    /// the process exits.
    public func release() {
        descriptor.withLock { fd in
            guard let held = fd else { return }
            // Clear the pid while still holding the lock, so the file never names a process
            // that no longer holds it after an orderly release.
            _ = ftruncate(held, 0)
            POSIXFile.closeDescriptor(held)
            fd = nil
        }
    }

    deinit { release() }
}
